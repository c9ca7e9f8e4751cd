"""Benchmark 24: a submit's cost does not grow with what git ignores.

A git project (train.py; .gitignore: data/) with its data in the git-ignored data/ (--files small files, a
million by default, in folders of 1,000) against the same project without them, interleaved: `--dry-run --
python train.py` with a Slurm profile, and a real submit with a local profile (the snapshot on; the job
`-- true`). Target: the --dry-run within 0.5 s with the files there, each submit within noise of the same
submit without them (the git-ignored note names data/, and nothing walks it).
Usage: python benchmarks/ignored_cost.py [--files 1000000] [--repeats 7]
"""

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _common import ROOT, median, python, report, timed


def project(folder: Path, files: int) -> Path:
    """train.py committed, and `files` empty files in the git-ignored data/ (what git stats is the same)."""
    folder.mkdir()
    (folder / "train.py").write_text("print('training')\n")
    (folder / ".gitignore").write_text("data/\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b"}
    env["GIT_COMMITTER_EMAIL"] = "b@b"
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "project"]):
        subprocess.run(["git", "-C", str(folder), *args], check=True, env=env)
    for start in range(0, files, 1000):
        part = folder / "data" / f"d{start // 1000:04d}"
        part.mkdir(parents=True)
        for i in range(start, min(start + 1000, files)):
            os.close(os.open(part / f"{i:07d}.png", os.O_CREAT | os.O_WRONLY, 0o644))
    return folder


def compare(label: str, cmd: list[str], with_files: Path, without: Path, repeats: int, bound: float | None) -> None:
    """The same submit from both projects, interleaved (both see the same load and file cache), medians."""
    there, absent = [], []
    for _ in range(repeats):
        there.append(timed(cmd, with_files))
        absent.append(timed(cmd, without))
    w, o = median(there), median(absent)
    target = f"<= {bound} s and 1.0x" if bound else "1.0x"
    report(label, w, o, "s", target, w / o <= 1.2 and (bound is None or w <= bound))
    print(f"  {label}: {w:.3f} s with the ignored files | {o:.3f} s without (medians of {repeats})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    subprocess.run([python(), "-m", "compileall", "-q", "jobs", "trainer"], cwd=ROOT, check=True)
    scratch = Path(tempfile.mkdtemp(prefix="ignored_bench_"))
    try:
        start = time.perf_counter()
        with_files, without = project(scratch / "data_there", args.files), project(scratch / "no_data", 0)
        print(f"{args.files} ignored files made in {time.perf_counter() - start:.0f} s", flush=True)
        slurm, local = scratch / "slurm.yaml", scratch / "local.yaml"
        slurm.write_text(f"executor: slurm\nrun_root: {scratch / 'runs'}\n")
        local.write_text(f"executor: local\ngpus_per_node: 1\nrun_root: {scratch / 'runs'}\n")
        submit = [python(), "-m", "jobs.submit", "--profile"]
        dry = [*submit, str(slurm), "--dry-run", "--", "python", "train.py"]
        compare("--dry-run -- python train.py", dry, with_files, without, args.repeats, 0.5)
        compare(
            "submit -- true (local, snapshot)",
            [*submit, str(local), "--", "true"],
            with_files,
            without,
            args.repeats,
            None,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

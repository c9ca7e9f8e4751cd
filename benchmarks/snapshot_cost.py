"""Benchmark 8: what the code snapshot adds to a submit, and that --dry-run pays nothing for it.

A real submit (local profile, a command that does nothing, so the job costs nothing) with `snapshot: true`
against the same submit with `snapshot: false`, interleaved, from three folders: this repository, a plain
folder of 10,000 small files, and the same folder as a git tree. Then --dry-run of a Slurm profile from the
10,000-file folder, snapshot on against off. Target: the snapshot adds a small, measured cost; --dry-run 1.0x.
Usage: python benchmarks/snapshot_cost.py [--files 10000] [--repeats 7]
"""

import argparse
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from _common import ROOT, median, python, report, timed


def make_tree(folder: Path, files: int, git: bool) -> Path:
    """`files` source-sized files (2 KiB) in folders of 100, as a project's code and configs might be."""
    for i in range(files):
        path = folder / f"pkg{i // 100:03d}" / f"mod{i % 100:02d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# module {i}\n" + "x = 1\n" * 340)
    if git:
        env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b"}
        env["GIT_COMMITTER_EMAIL"] = "b@b"
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "tree"]):
            subprocess.run(["git", "-C", str(folder), *args], check=True, env=env)
    return folder


def profiles(folder: Path, runs: Path) -> dict[str, Path]:
    out = {}
    for name, on in (("on", "true"), ("off", "false")):
        out[name] = folder / f"local_{name}.yaml"
        out[name].write_text(f"executor: local\ngpus_per_node: 1\nrun_root: {runs}\nsnapshot: {on}\n")
        out["dry_" + name] = folder / f"slurm_{name}.yaml"
        out["dry_" + name].write_text(f"executor: slurm\nrun_root: {runs}\nsnapshot: {on}\n")
    return out


def compare(label: str, cwd: Path, on: Path, off: Path, repeats: int, extra: list[str], target: str) -> float:
    with_snapshot, without = [], []
    for _ in range(repeats):  # interleaved: both see the same load and file cache
        for profile, times in ((on, with_snapshot), (off, without)):
            times.append(timed([python(), "-m", "jobs.submit", "--profile", str(profile), *extra], cwd))
    w, o = median(with_snapshot), median(without)
    ok = target != "1.0x" or w / o <= 1.1  # --dry-run: within noise; a real submit: reported, no fixed bound
    report(label, w, o, "s", target, ok)
    print(f"  {label}: snapshot adds {1000 * (w - o):.0f} ms per submit (medians of {repeats})")
    return w - o


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    subprocess.run([python(), "-m", "compileall", "-q", "jobs", "trainer"], cwd=ROOT, check=True)
    scratch = Path(tempfile.mkdtemp(prefix="snapshot_bench_"))
    try:
        runs = scratch / "runs"
        folders = {
            "this repository": ROOT,
            f"{args.files} files": make_tree(scratch / "plain", args.files, git=False),
            f"{args.files} files, git": make_tree(scratch / "git", args.files, git=True),
        }
        p = profiles(scratch, runs)
        job = ["--", "true"]  # the job: a command that exits at once
        for label, folder in folders.items():
            compare(f"submit from {label}", folder, p["on"], p["off"], args.repeats, job, "a small, measured cost")
        compare(
            f"--dry-run from {args.files} files",
            folders[f"{args.files} files"],
            p["dry_on"],
            p["dry_off"],
            args.repeats,
            ["--dry-run"],
            "1.0x",
        )
        sizes = [
            sum(1 for _ in (d / "code").rglob("*") if _.is_file()) for d in runs.iterdir() if (d / "code").is_dir()
        ]
        print(f"snapshots written: {len(sizes)}, files in each: {sorted(set(sizes))}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

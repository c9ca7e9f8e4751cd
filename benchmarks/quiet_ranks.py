"""Filesystem calls of a non-zero rank in steady training, on the test cluster (issue: quiet at 4,096 ranks).

Submits a 2-node run, waits until it trains, then counts with `strace -f -e trace=%file` every call that rank 1's
task (its process and its loader workers) makes by path for `--seconds`: those on the run folder (goal: at most
0.2 a second) and all others (its data files, which are the dataset's reads, not supervision).

    python benchmarks/quiet_ranks.py --seconds 20
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT

GOAL_PER_S = 0.2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to trace rank 1")
    parser.add_argument("--tasks", type=int, default=1, help="tasks per node")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        sys.exit("error: strace is not installed; apt-get install strace")
    sys.path.insert(0, str(ROOT))
    from tests.slurm import cluster

    cluster.up_for_benchmark()
    with tempfile.TemporaryDirectory() as tmp:
        profile = cluster.mini_profile(Path(tmp) / "p.yaml", Path(tmp) / "runs")
        submit = [sys.executable, "-m", "jobs.submit", "--profile", str(profile), "--nodes", "2"]
        submit += ["--gpus-per-node", str(args.tasks), "steps=1000000", "log.every=10", "log.image_every=0"]
        out = subprocess.run(submit, cwd=ROOT, capture_output=True, text=True, check=True).stdout
        run_dir = Path(re.search(r"run directory: (\S+)", out).group(1))  # type: ignore[union-attr]
        try:
            count, others = trace(run_dir, args.seconds)
        finally:
            subprocess.run([sys.executable, "-m", "jobs.cancel", str(run_dir)], cwd=ROOT, capture_output=True)
    rate = count / args.seconds
    verdict = "meets" if rate <= GOAL_PER_S else "MISSES"
    print(f"rank 1, {args.seconds:g} s of steady training: {count} calls on the run folder ({rate:.2f}/s), "
          f"{others} on other paths (its data); {verdict} goal <= {GOAL_PER_S}/s")  # fmt: skip


def trace(run_dir: Path, seconds: float) -> tuple[int, int]:
    """(calls naming the run folder, other path calls) of rank 1's task over `seconds`."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        progress = run_dir / "progress.json"
        if progress.exists() and json.loads(progress.read_text() or "{}").get("step", 0) >= 30:
            break
        time.sleep(1)
    else:
        sys.exit(f"error: the run did not train within 300 s; see {run_dir / 'logs'}")
    [log] = [p for p in (run_dir / "logs").glob("*_1_log.out")]
    pid = re.findall(r"^dist: .* pid=(\d+)", log.read_text(), re.M)[-1]
    lines = subprocess.run(
        ["timeout", str(seconds), "strace", "-f", "-e", "trace=%file", "-p", pid, "-o", "/dev/stdout"],
        capture_output=True, text=True,
    ).stdout.splitlines()  # fmt: skip
    named = [line for line in lines if '("' in line or ', "' in line]
    named = [line for line in named if '""' not in line]  # fstat of an open descriptor: no lookup
    on_run = [line for line in named if str(run_dir) in line]
    return len(on_run), len(named) - len(on_run)


if __name__ == "__main__":
    main()

"""Benchmark 5: `python -m jobs.submit --dry-run` wall time against `python -c "import submitit"`.

Target: at most 1.3x (the submit path must not import torch). Usage: python benchmarks/submit_speed.py [--repeats N]
"""

import argparse
import subprocess

from _common import ROOT, median, python, report, time_command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=31)
    args = parser.parse_args()
    # submitit's bytecode was compiled when pip installed it; compile ours too, or with PYTHONDONTWRITEBYTECODE
    # set (as on the development machine) every run would compile our sources again and the race is unfair.
    subprocess.run([python(), "-m", "compileall", "-q", "jobs", "trainer"], cwd=ROOT, check=True)
    baseline, ours = [], []
    # Interleaved, so both see the same machine load and file cache.
    for _ in range(args.repeats):
        baseline += time_command([python(), "-c", "import submitit"], 1)
        ours += time_command([python(), "-m", "jobs.submit", "--profile", "example", "--dry-run", "--name", "bench"], 1)
    b, o = median(baseline), median(ours)
    report("submit --dry-run", o, b, "s", "<= 1.3x", o / b <= 1.3)
    # The machine's load drifts between seconds; the ratio within each back-to-back pair cancels most of it.
    paired = median([x / y for x, y in zip(ours, baseline, strict=True)])
    print(f"median of the {len(ours)} back-to-back pairs' ratios: {paired:.3f}")


if __name__ == "__main__":
    main()

"""Benchmark 15: what timing every rank's data, compute and communication costs a step (log.stragglers).

The main job's shape (local profile, 2 processes, pix2pix on the sample data), with log.stragglers=true (the
default: a comm hook times each DDP all-reduce; every log interval one more all-reduce gathers the figures) and
false, in interleaved rounds. Each run's step time is the median of its logged perf/step_time_s (rank 0's
TensorBoard events), the first interval left out. Target: at most 1.005x. This machine's noise between runs of
the same code is about +-5%, so a single round says little: read the median of the per-round ratios.
Usage: python benchmarks/straggler_cost.py [--rounds N] [--steps N]
"""

import argparse
import statistics
import subprocess
from pathlib import Path

from _common import ROOT, logged_step_time, paired_rounds, python, report


def step_time(folder: Path, on: bool, steps: int) -> float:
    profile = folder / "local.yaml"
    profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {folder}/runs\n")
    cmd = [python(), "-m", "jobs.submit", "--profile", str(profile), "--wait", f"steps={steps}", "log.every=10"]
    cmd += ["log.image_every=0", "checkpoint.every=100000", f"log.stragglers={str(on).lower()}"]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    return logged_step_time(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    measure = lambda folder, on: step_time(folder, on, args.steps)  # noqa: E731
    with_it, without, ratios = paired_rounds(args.rounds, measure, ("with the timing", "without"))
    ratio = statistics.median(ratios)
    report(
        "step time with log.stragglers",
        statistics.median(with_it),
        statistics.median(without),
        "s",
        "<= 1.005",
        ratio <= 1.005,
    )
    print(f"median of the per-round ratios: {ratio:.4f}")


if __name__ == "__main__":
    main()

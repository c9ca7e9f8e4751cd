"""Benchmark 7: the share of a run's wall time spent evaluating the validation set.

Runs the main job's defaults (local profile, 2 processes, the sample data, 300 steps, eval.every=100) with
data.val_fraction=0.1, and reads the trainer's own count (summary.json's eval_share: evaluation time over the
attempt's time, both measured in the same run). Target: below 5%. Usage: python benchmarks/eval_share.py [--steps N]
"""

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from _common import ROOT, python, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        profile = Path(out) / "local.yaml"
        profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {out}/runs\n")
        cmd = [python(), "-m", "jobs.submit", "--profile", str(profile), "--wait", "data.val_fraction=0.1"]
        subprocess.run([*cmd, f"steps={args.steps}"], cwd=ROOT, check=True, capture_output=True)
        [summary] = [json.loads(p.read_text()) for p in Path(out).glob("runs/*/summary.json")]
    share = summary["eval_share"]
    report("evaluation share of wall time", share, 1.0, "of the attempt", "< 0.05", share < 0.05)


if __name__ == "__main__":
    main()

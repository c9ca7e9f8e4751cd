"""Benchmark 9: a torchrun-style script's step time launched by the submitter against the same script under
torchrun, side by side (rounds interleaved), 2 processes with gloo on this machine.

The script (written below, importing nothing from the project) times its own steps after a warm-up and rank 0
writes the mean; both launchers give it OMP_NUM_THREADS=1. Target: ratio <= 1.01 (the project adds nothing per
step: the task process waits on the script, the local controller polls a few times a second).
Usage: python benchmarks/script_overhead.py [--steps 300] [--rounds 3]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, median, python, report

SCRIPT = """
import json, os, sys, time
import torch, torch.distributed as dist
from torch import nn
dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256)
steps, warmup, times = int(sys.argv[1]), 20, []
for step in range(steps + warmup):
    start = time.perf_counter()
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    if step >= warmup:
        times.append(time.perf_counter() - start)
if dist.get_rank() == 0:
    with open(sys.argv[2], "w") as f:
        json.dump({"step_s": sum(times) / len(times)}, f)
dist.barrier()  # both ranks leave together: gloo can abort a rank whose peer tore the group down first
dist.destroy_process_group()
"""


def step_time(out: Path) -> float:
    return float(json.loads(out.read_text())["step_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="script_bench_"))
    try:
        (scratch / "step.py").write_text(SCRIPT)
        profile = scratch / "local.yaml"
        profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {scratch / 'runs'}\n")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
        ours, theirs = [], []
        for i in range(args.rounds):
            out = scratch / f"ours_{i}.json"
            cmd = [python(), "-m", "jobs.submit", "--profile", str(profile), "--wait", "--", python(), "step.py"]
            done = subprocess.run(
                [*cmd, str(args.steps), str(out)], cwd=scratch, env=env, capture_output=True, text=True
            )
            if done.returncode:
                sys.exit(f"the submitted run failed: {done.stderr.strip()}")
            ours.append(step_time(out))
            out = scratch / f"torchrun_{i}.json"
            cmd = [torchrun, "--standalone", "--nproc-per-node", "2", "step.py", str(args.steps), str(out)]
            done = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"torchrun failed: {done.stderr.strip()[-3000:]}")
            theirs.append(step_time(out))
        o, t = median(ours), median(theirs)
        report("script step time, submitter vs torchrun", 1000 * o, 1000 * t, "ms", "<= 1.01", o / t <= 1.01)
        paired = median([a / b for a, b in zip(ours, theirs, strict=True)])
        print(f"median of the {len(ours)} back-to-back rounds' ratios: {paired:.3f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

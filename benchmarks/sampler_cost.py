"""The cost of the run's order of samples per step (trainer.data.order.TrainOrder: micro-batches of (index,
seed) pairs, plus rank 0's digest for step_samples.jsonl) against what it replaced, DistributedSampler batched
by DataLoader's BatchSampler, with the same (index, seed) pairing. No data is loaded: the samplers alone.
Target: under 0.1 ms a step, against a step of tens of milliseconds. Usage: python benchmarks/sampler_cost.py
[--samples N] [--batch B] [--world W] [--epochs E]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch.utils.data import BatchSampler, DistributedSampler  # noqa: E402

from benchmarks._common import report  # noqa: E402
from trainer.data.order import TrainOrder  # noqa: E402
from trainer.rng import sample_seed  # noqa: E402


def distributed(samples: int, batch: int, world: int, epochs: int) -> tuple[float, int]:
    sampler = DistributedSampler(range(samples), num_replicas=world, rank=0, shuffle=True, seed=0)
    start, steps = time.perf_counter(), 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for indices in BatchSampler(sampler, batch, drop_last=True):
            _ = [(i, sample_seed(0, epoch, i)) for i in indices]
            steps += 1
    return time.perf_counter() - start, steps


def ours(samples: int, batch: int, world: int, epochs: int) -> tuple[float, int]:
    order = TrainOrder(samples, batch * world, world, 0, seed=0)
    start, steps = time.perf_counter(), 0
    for epoch in range(epochs):
        order.start(epoch, 0)
        for _ in order:
            order.digest(epoch, steps % order.steps_per_epoch)  # rank 0's record of the step
            steps += 1
    return time.perf_counter() - start, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    shape = (args.samples, args.batch, args.world, args.epochs)
    base, new = [], []
    for _ in range(args.rounds):  # side by side, alternating
        took, steps = distributed(*shape)
        base.append(took / steps * 1e6)
        took, steps = ours(*shape)
        new.append(took / steps * 1e6)
    value, baseline = statistics.median(new), statistics.median(base)
    report("sampler cost per step", value, baseline, "us", "< 100 us a step", value < 100)


if __name__ == "__main__":
    main()

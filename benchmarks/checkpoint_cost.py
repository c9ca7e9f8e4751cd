"""Benchmark 3: how long a checkpoint save blocks training, against one training step.

The state is the pix2pix U-Net with its AdamW state after a step, saved the way the trainer saves it:
synchronously (serialise, write, fsync, rename, checksum) and with the background writer (serialise,
then write in a thread). Target: at the default interval (checkpoint.every=50), under 1% of training time.
Usage: python benchmarks/checkpoint_cost.py [--repeats N] [--width W]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from trainer import checkpoint  # noqa: E402
from trainer.config import CheckpointConfig  # noqa: E402
from trainer.tasks._pix2pix_nn import UNet  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--width", type=int, default=16, help="U-Net base channels (the trainer's default is 16)")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = UNet(args.width, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randn(8, 3, 64, 64)

    def step() -> None:
        loss = torch.nn.functional.l1_loss(model(batch), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step()
    step_times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step()
        step_times.append(time.perf_counter() - start)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    folder = Path(tempfile.mkdtemp(prefix="bench-ckpt-"))
    results = {}
    for mode in ("sync", "async"):
        writer = checkpoint.Writer(background=mode == "async")
        blocked = []
        for i in range(args.repeats):
            start = time.perf_counter()
            writer.save(folder / mode, i, state, keep=2)
            blocked.append(time.perf_counter() - start)
            step()  # training goes on while the background writer works
        writer.wait()
        results[mode] = statistics.median(blocked)
    step_s = statistics.median(step_times)
    every = CheckpointConfig().every
    size_mb = checkpoint.list_checkpoints(folder / "sync")[0][1].stat().st_size / 2**20
    print(f"checkpoint of {size_mb:.1f} MiB; one training step (batch 8, 1 process): {step_s * 1000:.1f} ms")
    for mode, seconds in results.items():
        share = seconds / (every * step_s + seconds)
        verdict = "meets" if share < 0.01 else "MISSES"
        print(
            f"{mode:5s} save blocks {seconds * 1000:.1f} ms = {seconds / step_s:.3f} steps -> "
            f"{share * 100:.2f}% of training at checkpoint.every={every} ({verdict} target < 1%)"
        )


if __name__ == "__main__":
    main()

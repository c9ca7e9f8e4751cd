"""Benchmark: pix2pix pairs per second through the trainer's dataset and a DataLoader, torchvision.io against Pillow.

The built-in sample data (PNG, 64 px) read by `PairsDataset` as the trainer reads it: 2 workers, batch 32. The
baseline is the same dataset with Pillow decoding every file (the fallback trainer/data/decode.py keeps for the
formats torchvision.io lacks). Rounds alternate between the two; the ratio is the medians' (ours over Pillow's).
Usage: python benchmarks/decode_speed.py [--rounds N] [--epochs N] [--pairs N]
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, report

sys.path.insert(0, str(ROOT))

import numpy  # noqa: E402
import torch  # noqa: E402

from trainer.data import decode  # noqa: E402
from trainer.data.sample import ensure_sample_data  # noqa: E402
from trainer.tasks._pix2pix_nn import PairsDataset  # noqa: E402
from trainer.tasks.pix2pix import read_pairs  # noqa: E402


def pairs_per_s(dataset: PairsDataset, epochs: int, pillow: bool) -> float:
    """Pairs per second over `epochs` passes; the workers are forked, so they decode as this process is set."""
    saved = decode.DECODE
    decode.DECODE = None if pillow else saved
    try:
        loader = torch.utils.data.DataLoader(dataset, batch_size=32, num_workers=2, persistent_workers=False)
        start = time.perf_counter()
        seen = sum(len(batch) for _ in range(epochs) for batch in loader)
        return seen / (time.perf_counter() - start)
    finally:
        decode.DECODE = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4, help="passes over the pairs per round and side")
    parser.add_argument("--pairs", type=int, default=256, help="sample pairs generated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = ensure_sample_data(Path(tmp) / "data", args.pairs) / "pix2pix"
        sources, targets = read_pairs(root, "pairs.csv")
        dataset = PairsDataset(str(root), numpy.array(sources, dtype=bytes), numpy.array(targets, dtype=bytes), 64)
        ours, pillow = [], []
        for _ in range(args.rounds):
            ours.append(pairs_per_s(dataset, args.epochs, pillow=False))
            pillow.append(pairs_per_s(dataset, args.epochs, pillow=True))
    # Higher is better: the ratio reported is Pillow's time per pair over ours (above 1: ours is faster).
    fast, slow = statistics.median(ours), statistics.median(pillow)
    print(f"pairs per second: torchvision.io {fast:.0f}, Pillow {slow:.0f}")
    report("time per pair, Pillow over ours", 1 / slow * 1e6, 1 / fast * 1e6, "us", ">= 1", slow <= fast)


if __name__ == "__main__":
    main()

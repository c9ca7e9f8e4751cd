"""Benchmark 2: samples per second of our data loader against the decode limit, PNG and JPEG apart.

The limit is measured in the same run: raw Pillow open, convert and to-tensor of the same files, one
process per core. Our loader: the pix2pix dataset in a DataLoader with as many workers as cores.
Target: at least 0.9 of the limit. Usage: python benchmarks/data_pipeline.py [--count N] [--epochs N]
"""

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402
from torchvision.transforms.functional import to_tensor  # noqa: E402

from trainer.sample_data import ensure_sample_data  # noqa: E402
from trainer.tasks._pix2pix_nn import PairsDataset  # noqa: E402
from trainer.tasks.pix2pix import read_pairs  # noqa: E402


def pairs_of(root: Path) -> list[tuple[Path, Path]]:
    """The pairs as absolute paths."""
    return [(root / s, root / t) for s, t in zip(*read_pairs(root, "pairs.csv"), strict=True)]


def as_jpeg(root: Path, out: Path) -> Path:
    """A copy of the pairs with every image as JPEG."""
    rows = ["image_name,target_name"]
    for source, target in pairs_of(root):
        names = []
        for path in (source, target):
            name = str(path.relative_to(root).with_suffix(".jpg"))
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            Image.open(path).convert("RGB").save(out / name, quality=90)
            names.append(name)
        rows.append(",".join(names))
    (out / "pairs.csv").write_text("\n".join(rows) + "\n")
    return out


def decode_pair(paths: tuple[Path, Path]) -> int:
    for path in paths:
        with Image.open(path) as image:
            to_tensor(image.convert("RGB"))
    return 1


def decode_limit(pairs: list[tuple[Path, Path]], workers: int, epochs: int) -> float:
    with mp.get_context("fork").Pool(workers) as pool:
        pool.map(decode_pair, pairs[:workers])  # warm-up: workers started
        start = time.perf_counter()
        for _ in range(epochs):
            pool.map(decode_pair, pairs, chunksize=8)
        return epochs * len(pairs) / (time.perf_counter() - start)


def our_loader(pairs: list[tuple[Path, Path]], workers: int, epochs: int) -> float:
    torch.set_num_threads(1)
    loader = DataLoader(
        PairsDataset("/", *(numpy.array([str(p).encode() for p in side]) for side in zip(*pairs, strict=True)), 64),
        batch_size=8,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        drop_last=False,
    )
    next(iter(loader))  # warm-up: workers started
    start = time.perf_counter()
    seen = 0
    for _ in range(epochs):
        for pairs in loader:
            seen += pairs.shape[0]
    return seen / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--count", type=int, default=256, help="pairs in the sample data")
    args = parser.parse_args()
    workers = len(os.sched_getaffinity(0))
    out = Path(tempfile.mkdtemp(prefix="bench-data-"))
    png = ensure_sample_data(out / "sample", count=args.count) / "pix2pix"
    jpeg = as_jpeg(png, out / "jpeg")
    print(f"{workers} worker(s) = cores; {args.count} pairs of 64x64 images; {args.epochs} epochs")
    for name, root in (("PNG", png), ("JPEG", jpeg)):
        pairs = pairs_of(root)
        limit = decode_limit(pairs, workers, args.epochs)
        ours = our_loader(pairs, workers, args.epochs)
        verdict = "meets" if ours / limit >= 0.9 else "MISSES"
        print(
            f"{name}: our loader {ours:.0f} pairs/s vs decode limit {limit:.0f} pairs/s -> ratio {ours / limit:.3f} "
            f"({verdict} target >= 0.9)"
        )


if __name__ == "__main__":
    main()

"""Benchmark 2: pairs per second of our data loader against two decode limits, PNG and JPEG, 64 and 256 px.

Both limits are measured in the same run, on the same files, one process per core, returning nothing to the
parent: Pillow (open, convert, to a uint8 tensor: what the dataset did before trainer/decode.py) and
torchvision.io (the file read into a buffer, the op behind decode_image on it: the fastest way torchvision.io
decodes, without the wrapper's per-call logging). Our loader: the pix2pix dataset in trainer/loader.py's
SharedLoader (workers write batches into reused shared-memory buffers; what the trainer uses) with as many
workers as cores, at the trainer's default batch size (8) and at 32. Beside it, the same dataset in torch's
DataLoader (data.loader=torch), whose fresh shared-memory segment per batch is what held it below the limits,
and the loader as it was before trainer/decode.py (Pillow, channels-first pairs, pathlib joins, DataLoader).
Each loader is measured after one epoch of warm-up (the steady state of a long run: workers started, and the
shared buffers' pages touched, about 80 ms at 256 px and batch 32). Rounds are interleaved and each ratio is the
median of the per-round ratios, because this machine drifts.
Targets: our loader >= 1.0x the Pillow limit and >= 0.9x the torchvision.io limit.
Usage: python benchmarks/data_pipeline.py [--count N] [--epochs N] [--rounds N] [--sizes 64 256]
       [--batch-sizes 8 32]
"""

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader, RandomSampler  # noqa: E402
from torchvision.transforms.functional import pil_to_tensor  # noqa: E402

from trainer import decode  # noqa: E402
from trainer.loader import SharedLoader  # noqa: E402
from trainer.sample_data import ensure_sample_data  # noqa: E402
from trainer.tasks._pix2pix_nn import PairsDataset  # noqa: E402
from trainer.tasks.pix2pix import read_pairs  # noqa: E402

Pair = tuple[Path, Path]


def pairs_of(root: Path) -> list[Pair]:
    """The pairs as absolute paths."""
    return [(root / s, root / t) for s, t in zip(*read_pairs(root, "pairs.csv"), strict=True)]


def converted(root: Path, out: Path, suffix: str, size: int) -> Path:
    """A copy of the pairs at `size` px in the format of `suffix`."""
    rows = ["image_name,target_name"]
    for source, target in pairs_of(root):
        names = []
        for path in (source, target):
            name = str(path.relative_to(root).with_suffix(suffix))
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            image = Image.open(path).convert("RGB").resize((size, size), Image.Resampling.BICUBIC)
            image.save(out / name, **({"quality": 90} if suffix == ".jpg" else {}))
            names.append(name)
        rows.append(",".join(names))
    (out / "pairs.csv").write_text("\n".join(rows) + "\n")
    return out


def pillow_pair(paths: Pair) -> int:
    for path in paths:
        with Image.open(path) as image:
            pil_to_tensor(image.convert("RGB"))
    return 1


def torchvision_pair(paths: Pair) -> int:
    for path in paths:
        decode.DECODE(torch.frombuffer(decode.read(path), dtype=torch.uint8), decode.RGB, False)  # type: ignore[misc]
    return 1


def decode_limit(decode: Callable[[Pair], int], pairs: list[Pair], workers: int, epochs: int) -> float:
    with mp.get_context("fork").Pool(workers, initializer=torch.set_num_threads, initargs=(1,)) as pool:
        pool.map(decode, pairs[:workers])  # warm-up: workers started
        start = time.perf_counter()
        for _ in range(epochs):
            pool.map(decode, pairs, chunksize=8)
        return epochs * len(pairs) / (time.perf_counter() - start)


class PillowPairs(PairsDataset):
    """The dataset as it was before trainer/decode.py: Pillow, then a uint8 tensor; pairs (2, 3, H, W)."""

    def __getitem__(self, index: int) -> torch.Tensor:
        root = Path(self.root)
        source, target = root / self.sources[index].decode(), root / self.targets[index].decode()
        return torch.stack([self._load(source), self._load(target)])

    def _load(self, path: str | Path) -> torch.Tensor:
        with Image.open(path) as image:
            return pil_to_tensor(image.convert("RGB"))


def loader_rate(
    dataset_class: type[PairsDataset],
    pairs: list[Pair],
    size: int,
    workers: int,
    epochs: int,
    batch_size: int,
    shared: bool,
) -> float:
    """Pairs per second through trainer.loader's SharedLoader (`shared`, what the trainer uses) or torch's
    DataLoader (data.loader=torch), shuffled, as many workers as cores."""
    torch.set_num_threads(1)
    columns = (numpy.array([str(p).encode() for p in side]) for side in zip(*pairs, strict=True))
    dataset = dataset_class("/", *columns, size)
    loader: Iterable[torch.Tensor]
    if shared:
        loader = SharedLoader(dataset, RandomSampler(dataset), batch_size, workers, drop_last=False)
    else:
        loader = DataLoader(
            dataset, batch_size=batch_size, shuffle=True, num_workers=workers, persistent_workers=workers > 0
        )
    for _ in loader:  # warm-up, one epoch: workers started, and the shared buffers' pages touched once
        pass
    start = time.perf_counter()
    seen = 0
    for _ in range(epochs):
        for batch in loader:
            seen += batch.shape[0]
    rate = seen / (time.perf_counter() - start)
    if shared:
        loader.close()  # type: ignore[attr-defined]
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--count", type=int, default=256, help="pairs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 32])
    args = parser.parse_args()
    workers = len(os.sched_getaffinity(0))
    out = Path(tempfile.mkdtemp(prefix="bench-data-"))
    sample = ensure_sample_data(out / "sample", count=args.count) / "pix2pix"
    print(f"{workers} worker(s) = cores; {args.count} pairs; {args.epochs} epochs a measurement; {args.rounds} rounds")
    print("pairs/s (median of rounds) | ours/Pillow limit, ours/torchvision.io limit (median of per-round ratios)")
    for size in args.sizes:
        for name, suffix in (("PNG", ".png"), ("JPEG", ".jpg")):
            pairs = pairs_of(converted(sample, out / f"{suffix[1:]}{size}", suffix, size))
            rates: dict[str, list[float]] = {"pillow": [], "tvio": []}
            for _ in range(args.rounds):
                rates["pillow"].append(decode_limit(pillow_pair, pairs, workers, args.epochs))
                rates["tvio"].append(decode_limit(torchvision_pair, pairs, workers, args.epochs))
                for batch in args.batch_sizes:
                    for key, dataset, shared in (
                        (f"ours{batch}", PairsDataset, True),
                        (f"dataloader{batch}", PairsDataset, False),
                        (f"before{batch}", PillowPairs, False),
                    ):
                        rate = loader_rate(dataset, pairs, size, workers, args.epochs, batch, shared)
                        rates.setdefault(key, []).append(rate)
            med = {key: statistics.median(values) for key, values in rates.items()}
            for batch in args.batch_sizes:
                ours = rates[f"ours{batch}"]
                vs_pillow = statistics.median(o / p for o, p in zip(ours, rates["pillow"], strict=True))
                vs_tvio = statistics.median(o / t for o, t in zip(ours, rates["tvio"], strict=True))
                verdict = "meets" if vs_pillow >= 1.0 and vs_tvio >= 0.9 else "MISSES"
                print(
                    f"{name} {size}px batch {batch}: ours {med[f'ours{batch}']:.0f}, our dataset in torch's "
                    f"DataLoader {med[f'dataloader{batch}']:.0f}, Pillow loader (before) "
                    f"{med[f'before{batch}']:.0f}, limits: Pillow {med['pillow']:.0f}, torchvision.io "
                    f"{med['tvio']:.0f} -> ratio {vs_pillow:.3f} to the Pillow limit, {vs_tvio:.3f} to the "
                    f"torchvision.io limit ({verdict} targets >= 1.0 and >= 0.9)"
                )


if __name__ == "__main__":
    main()

"""The task's random stream, kept apart from everything the trainer does for itself.

A resumed run restores the global generators from its checkpoint, so the task's Dropout draws continue exactly
where they stopped, as long as nothing else draws from them at points that differ between an interrupted and an
uninterrupted run. So: each sample's augmentations follow from (seed, epoch, index) alone, in a loader worker or
in this process, whatever worker or loader made it; loaders draw their own seeds from generators of their own;
validation and image grids run with streams of their own and leave the task's as they found them.
"""

import contextlib
import hashlib
import os
import random
from collections.abc import Iterator

import numpy
import torch


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of sample `index`'s augmentations in `epoch`: the same on any rank, worker or attempt."""
    digest = hashlib.blake2b(f"{seed}:{epoch}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # below 2**63: a valid torch seed


def seed_micro_batch(seed: int, step: int, index: int, device: torch.device) -> None:
    """torch's generators before micro-batch `index` of global step `step` (its place among the step's
    micro-batches, on any number of processes): its Dropout draws follow from them alone. Not numpy's or
    Python's: a seed of either costs tens of microseconds, on every micro-batch."""
    digest = hashlib.blake2b(f"micro:{seed}:{step}:{index}".encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little") >> 1
    torch.default_generator.manual_seed(value)
    if device.type == "cuda":
        torch.cuda.manual_seed(value)


def seed_all(seed: int) -> None:
    """Python's, numpy's and torch's CPU generators (not the accelerators': torch.manual_seed's cost, per sample)."""
    random.seed(seed)
    numpy.random.seed(seed % 2**32)
    torch.default_generator.manual_seed(seed)


def deterministic_kernels() -> None:
    """torch's deterministic mode (as Lightning's `deterministic=True`): on a GPU, cuDNN's and cuBLAS's kernels
    give the same bits run to run, so a resumed run ends on the uninterrupted run's weights there too (seen on an
    H100: without it, two runs of the same seed differed after 12 steps). cuBLAS reads its workspace setting at
    its first handle, before any matrix product: hence before the model is built."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


@contextlib.contextmanager
def isolated(seed: int | None = None) -> Iterator[None]:
    """Run a block with the CPU generators seeded by `seed` (as they are, when None); restore them after, so
    whatever the block draws never shows in the task's stream."""
    saved = torch.get_rng_state(), random.getstate(), numpy.random.get_state()
    if seed is not None:
        seed_all(seed)
    try:
        yield
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        numpy.random.set_state(saved[2])


class SeededSamples(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """`dataset`, read by (index, seed) pairs: each sample made with its own seed, apart from the task's stream."""

    def __init__(self, dataset: torch.utils.data.Dataset) -> None:  # type: ignore[type-arg]
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> object:
        index, seed = key
        with isolated(seed):
            return self.dataset[index]

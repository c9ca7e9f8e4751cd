"""The distributed data loader, and a sampler that can start mid-epoch."""

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from trainer.config import TrainConfig
from trainer.distenv import DistEnv
from trainer.rng import SeededSamples, sample_seed


class ResumableSampler(DistributedSampler[Any]):
    """DistributedSampler that skips the first `start` samples of this rank's share of the epoch, and gives each
    sample its augmentations' seed: (index, seed) pairs.

    The order and the seeds are functions of (seed, epoch) alone, so skipping reproduces exactly the samples an
    uninterrupted run would see next, without loading the skipped ones.
    """

    start: int = 0

    def __iter__(self) -> Iterator[Any]:
        indices = list(super().__iter__())[self.start :]
        return iter([(i, sample_seed(self.seed, self.epoch, i)) for i in indices])

    def __len__(self) -> int:
        return self.num_samples - self.start


def to_device(batch: Any, device: torch.device) -> Any:
    """A batch as the task's dataset collates it (one tensor, or a tuple of them) moved to the device."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    return [t.to(device, non_blocking=True) for t in batch]


def num_workers(config: TrainConfig, env: DistEnv) -> int:
    if config.data.num_workers >= 0:
        return config.data.num_workers
    # One core stays with the training process; the rest decode images.
    return min(8, env.cpus_per_task - 1)


def make_loader(
    dataset: Dataset[Any], config: TrainConfig, env: DistEnv, device: torch.device
) -> tuple[Iterable[Any], ResumableSampler]:
    """The training batches: trainer.loader's shared buffers (data.loader=shared) or torch's DataLoader."""
    sampler = ResumableSampler(dataset, num_replicas=env.world_size, rank=env.rank, shuffle=True, seed=config.seed)
    workers = num_workers(config, env)
    if config.data.loader == "shared" and workers > 0:
        from trainer.loader import SharedLoader, Unsupported

        try:  # drop_last: every rank takes the same number of steps
            return SharedLoader(dataset, sampler, config.batch_size, workers, True, device.type == "cuda"), sampler
        except Unsupported as exc:
            if env.is_main:
                print(f"data: {exc}, which data.loader=shared cannot stack: torch's DataLoader loads them", flush=True)
    loader = DataLoader(
        SeededSamples(dataset),
        batch_size=config.batch_size,
        sampler=sampler,
        drop_last=True,  # every rank takes the same number of steps
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
        generator=torch.Generator(),  # its base seed, drawn at each epoch, is not the task's to give
    )
    return loader, sampler


def close(loader: Iterable[Any]) -> None:
    """Stop the shared loader's workers (torch's DataLoader stops its own when it is collected)."""
    if hasattr(loader, "close"):
        loader.close()

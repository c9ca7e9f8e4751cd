"""The training batches: torch's DataLoader over a sampler that can start mid-epoch, and the batches in order
from wherever the run stands."""

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from trainer.config import TrainConfig
from trainer.rng import SeededSamples, sample_seed
from trainer.supervise.launcher import DistEnv


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


def loader_options(config: TrainConfig, workers: int, device: torch.device, task: Any) -> dict[str, Any]:
    """DataLoader's keyword arguments: the data section's knobs, and the task's own `collate` (samples of
    different lengths, e.g. token sequences) and `worker_init` (a handle each worker opens for itself)."""
    options: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": config.data.pin_memory and device.type == "cuda",  # pinned host memory copies asynchronously
        "collate_fn": getattr(task, "collate", None),
        "worker_init_fn": getattr(task, "worker_init", None),
    }
    if workers > 0:  # DataLoader refuses these without workers
        options |= {
            "prefetch_factor": config.data.prefetch_factor,
            "persistent_workers": config.data.persistent_workers,
        }
    return options


def make_loader(
    dataset: Dataset[Any], config: TrainConfig, env: DistEnv, device: torch.device, task: Any = None
) -> tuple[DataLoader[Any], ResumableSampler]:
    """This rank's training batches: full ones only, in the sampler's order, each sample seeded by itself."""
    sampler = ResumableSampler(dataset, num_replicas=env.world_size, rank=env.rank, shuffle=True, seed=config.seed)
    loader = DataLoader(
        SeededSamples(dataset),
        batch_size=config.batch_size,
        sampler=sampler,
        drop_last=True,  # every rank takes the same number of steps
        generator=torch.Generator(),  # its base seed, drawn at each epoch, is not the task's to give
        **loader_options(config, num_workers(config, env), device, task),
    )
    return loader, sampler


def shutdown(loader: DataLoader[Any]) -> None:
    """Stop a loader's persistent workers now, on every way out of training, not whenever the garbage collector
    reaches them. DataLoader has no public call for it; this is what its iterator's own __del__ does."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    loader._iterator = None


def batches(
    loader: DataLoader[Any], sampler: ResumableSampler, position: Callable[[], tuple[int, int]], batch_size: int
) -> Iterator[Any]:
    """Batches from where the run stands, epoch after epoch, for as long as the loop asks.

    `position()` is the state's (epoch, batch in epoch), read before each epoch: a resumed run starts in the
    middle of one, and the sampler skips exactly the samples already trained on.
    """
    while True:
        epoch, batch_in_epoch = position()
        sampler.set_epoch(epoch)
        sampler.start = batch_in_epoch * batch_size
        yield from loader  # the rest of this epoch: exactly the batches the state has not trained on

"""The training batches: torch's DataLoader over the run's order of samples (trainer.data.order), and the
micro-batches in order from wherever the run stands."""

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from trainer.config import TrainConfig
from trainer.data.order import TrainOrder
from trainer.rng import SeededSamples
from trainer.supervise.launcher import DistEnv


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
) -> tuple[DataLoader[Any], TrainOrder]:
    """This rank's training micro-batches: full ones only, in the run's order, each sample seeded by itself. A
    new run's global batch is `batch_size` on each process; a resumed one's is the checkpoint's (trainer.state)."""
    order = TrainOrder(len(dataset), config.batch_size * env.world_size, env.world_size, env.rank, config.seed)  # type: ignore[arg-type]
    order.given_micro_batch = config.batch_size  # a resume on fewer processes accumulates batches of at most this
    loader = DataLoader(
        SeededSamples(dataset),
        batch_sampler=order,
        generator=torch.Generator(),  # its base seed, drawn at each epoch, is not the task's to give
        **loader_options(config, num_workers(config, env), device, task),
    )
    return loader, order


def shutdown(loader: DataLoader[Any]) -> None:
    """Stop a loader's persistent workers now, on every way out of training, not whenever the garbage collector
    reaches them. DataLoader has no public call for it; this is what its iterator's own __del__ does."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    loader._iterator = None


def batches(loader: DataLoader[Any], order: TrainOrder, position: Callable[[], tuple[int, int]]) -> Iterator[Any]:
    """Micro-batches from where the run stands, epoch after epoch, for as long as the loop asks.

    `position()` is the state's (epoch, step in epoch), read before each epoch: a resumed run starts in the middle
    of one, and the order skips exactly the steps already trained.
    """
    while True:
        order.start(*position())
        yield from loader  # the rest of this epoch: exactly the micro-batches the state has not trained on

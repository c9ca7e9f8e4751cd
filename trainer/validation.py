"""The validation set and its evaluation: every sample counted once, whatever the number of ranks.

DistributedSampler pads a shard by repeating samples so all ranks get the same count: right for training,
wrong for a metric. Here each rank takes every world_size-th sample (no padding, no drop), sums each
metric over its samples in float64, and one all-reduce adds the sums and counts: the mean is that of a
single process evaluating the whole set with the same weights.
"""

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Subset

from trainer.config import TrainConfig, best_metric
from trainer.config.tasks import Task
from trainer.data.loader import loader_options, num_workers, to_device
from trainer.data.resolve import validation_config
from trainer.errors import UserError
from trainer.supervise.launcher import DistEnv


@dataclass
class Datasets:
    full: Any  # what the task's model is built for (classify's class names): the training root, whole
    train: Dataset[Any]
    val: Dataset[Any] | None


def datasets(task: Task, config: TrainConfig) -> Datasets:
    """The training data, and the validation data: a held-out fraction (by seed) or a separate root."""
    full = task.dataset(config)
    if config.data.val_fraction:
        order = torch.randperm(len(full), generator=torch.Generator().manual_seed(config.seed)).tolist()
        held = config.data.held_out(len(full))
        return Datasets(full, Subset(full, sorted(order[held:])), Subset(full, sorted(order[:held])))
    if config.data.val_root:
        val = task.dataset(validation_config(config))
        classes, val_classes = getattr(full, "classes", None), getattr(val, "classes", None)
        if classes != val_classes:  # ImageFolder numbers classes by sorted folder name: they must agree
            raise UserError(
                f"data.val_root {config.data.val_root} has classes {val_classes}, the training data {classes}; "
                "give both the same class folders"
            )
        return Datasets(full, full, val)
    return Datasets(full, full, None)


def shard_loader(
    val: Dataset[Any], config: TrainConfig, env: DistEnv, device: torch.device, task: Any = None
) -> DataLoader[Any]:
    """This rank's share of the validation set: samples rank, rank + world_size, ... in order, loaded as the
    training batches are (the task's collate and worker_init, the data section's loader settings)."""
    size = len(val)  # type: ignore[arg-type]
    if size < env.world_size:
        raise UserError(
            f"the validation set holds {size} samples for {env.world_size} processes; give it at least "
            f"{env.world_size} (a larger data.val_fraction, or more data in data.val_root)"
        )
    shard = Subset(val, list(range(env.rank, size, env.world_size)))
    return DataLoader(
        shard,
        batch_size=config.batch_size,
        shuffle=False,
        generator=torch.Generator(),  # its base seed is not the task's to give (trainer.rng)
        **loader_options(config, num_workers(config, env), device, task),
    )


def improves(state: Any, val: dict[str, float], config: TrainConfig) -> bool:
    """Do these metrics beat the best so far (by eval.metric and eval.mode)? If so they become the best."""
    name, mode = best_metric(config)
    if name not in val:  # classify's top5 needs more than 5 classes
        raise UserError(f"eval.metric={name} is not reported here (only {', '.join(val)}); pick one of those")
    value, best = val[name], state.best
    if not math.isfinite(value):
        return False
    if best and (value >= best["value"] if mode == "min" else value <= best["value"]):
        return False
    finite = {k: v if math.isfinite(v) else None for k, v in val.items()}  # summary.json is strict JSON
    state.best = {"step": state.step, "metric": name, "mode": mode, "value": value, "val_metrics": finite}
    return True


def evaluate(
    model: torch.nn.Module,
    loader: DataLoader[Any],
    task: Task,
    env: DistEnv,
    device: torch.device,
    autocast: contextlib.AbstractContextManager[Any],
) -> dict[str, float]:
    """The mean of each of the task's per-sample metrics over the whole validation set. A collective."""
    if env.distributed:
        # BatchNorm's running statistics differ between ranks after training steps: DDP broadcasts rank 0's
        # at the start of each forward. Every rank evaluates rank 0's (those a checkpoint holds); the next
        # training forward would have copied them anyway.
        for buffer in model.buffers():
            dist.broadcast(buffer, src=0)
    model.eval()
    sums: dict[str, torch.Tensor] = {}
    count = torch.zeros((), dtype=torch.float64, device=device)
    with torch.no_grad():
        for batch in loader:
            with autocast:
                values = task.evaluate(model, to_device(batch, device))
            for name, per_sample in values.items():
                sums[name] = sums.get(name, 0) + per_sample.double().sum()
            count += len(next(iter(values.values())))
    model.train()
    names = sorted(sums)  # every rank has at least one sample, so the same names in the same order
    totals = torch.stack([*(sums[n] for n in names), count])
    if env.distributed:
        dist.all_reduce(totals)
    return {name: (totals[i] / totals[-1]).item() for i, name in enumerate(names)}

"""The train state: everything a checkpoint holds, saved and restored by itself (torchtitan's Stateful)."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.distributed import gather_rng, restore_rng
from trainer.errors import UserError
from trainer.supervise.launcher import DistEnv

# What a checkpoint must hold; one lacking any of them is not one of ours (trainer.checkpoint checks it).
KEYS = ("model", "optimizer", "scheduler", "scaler", "progress", "rng", "meta", "best")
PROGRESS = ("step", "epoch", "batch_in_epoch")


@dataclass(eq=False)
class TrainState:
    """Model, optimizer, scheduler, scaler, where the run stands, and every rank's random streams."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    env: DistEnv
    device: torch.device
    samples: int = 0  # the training set's length: with the number of processes, it decides the samples' order
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already trained: resume continues mid-epoch
    # What a checkpoint needs to be used without its run directory: task, config, class names (plain values).
    meta: dict[str, Any] | None = None
    last_val: dict[str, float] | None = None  # the latest validation metrics
    best: dict[str, Any] | None = None  # {"step", "metric", "mode", "value", "val_metrics"}: carried across resumes

    def advance(self, batches_per_epoch: int) -> None:
        """One optimizer step done."""
        self.step += 1
        self.batch_in_epoch += 1
        if self.batch_in_epoch == batches_per_epoch:
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """A collective (every rank's RNG state is gathered): every rank calls it, rank 0 saves it."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": {
                "step": self.step,
                "epoch": self.epoch,
                "batch_in_epoch": self.batch_in_epoch,
                "samples": self.samples,
            },
            "rng": gather_rng(self.env, self.device),
            "meta": {**(self.meta or {}), "step": self.step, "val_metrics": self.last_val},
            "best": self.best or {},
        }

    def best_meta(self) -> dict[str, Any]:
        """What best.pt carries beside the weights."""
        return {**(self.meta or {}), "step": self.step, "val_metrics": self.last_val, "best": self.best}

    def load_state_dict(self, state: dict[str, Any], source: Path) -> None:
        refuse_other_samples(state, source, self.env.world_size, self.samples)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self.batch_in_epoch = (int(state["progress"][k]) for k in PROGRESS)
        self.best = state["best"] or None
        self.last_val = state["meta"].get("val_metrics")
        restore_rng(state["rng"], self.env, self.device)


def refuse_other_samples(state: dict[str, Any], source: Path, world_size: int, samples: int) -> None:
    """A checkpoint goes on with the samples an uninterrupted run would see next (ResumableSampler) only on as
    many processes as saved it (one random stream each) and on a training set of the same length (a checkpoint
    of an earlier version does not say it: not checked). Anything else ends the run, rather than training on."""
    saved_by, saved_on = len(state["rng"]), state["progress"].get("samples")
    if saved_by != world_size:
        raise UserError(
            f"{source} was saved by {processes(saved_by)}, this attempt has {world_size}: the order of the samples "
            f"depends on their number, so the run would not go on as it ran; resume on {processes(saved_by)} "
            f"(--nodes N --gpus-per-node G with N x G = {saved_by}) to go on exactly"
        )
    if saved_on is not None and saved_on != samples:
        raise UserError(
            f"{source} was saved training on {saved_on} samples, the training data now holds {samples}: the run "
            "would not go on with the samples it ran on; resume with the data it trained on to go on exactly, or "
            "start a new run"
        )


def processes(count: int) -> str:
    return f"{count} process{'es' * (count != 1)}"

"""The train state: everything a checkpoint holds, saved and restored by itself (torchtitan's Stateful)."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.data.order import TrainOrder, go_on_with, saved_fingerprint
from trainer.distributed import gather_rng, restore_rng
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
    order: TrainOrder  # the samples' order: a checkpoint keeps its fingerprint ("data")
    files: str | None = None  # a digest of the training set's file list (trainer.data.order.files_digest)
    allow_change: bool = False  # data.allow_change: a resume on changed data goes on, with a warning
    data_change: str = ""  # that warning, once a resume went on so
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0  # batches of `epoch` already trained: resume continues mid-epoch
    # What a checkpoint needs to be used without its run directory: task, config, class names (plain values).
    meta: dict[str, Any] | None = None
    last_val: dict[str, float] | None = None  # the latest validation metrics
    best: dict[str, Any] | None = None  # {"step", "metric", "mode", "value", "val_metrics"}: carried across resumes

    def advance(self) -> None:
        """One optimizer step done."""
        self.step += 1
        self.batch_in_epoch += 1
        if self.batch_in_epoch >= self.order.steps_per_epoch:
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0

    def state_dict(self) -> dict[str, Any]:
        """A collective (every rank's RNG state is gathered): every rank calls it, rank 0 saves it."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": {k: getattr(self, k) for k in PROGRESS} | {"samples": self.order.samples},
            "data": self.order.fingerprint(self.files, self.env.world_size),
            "rng": gather_rng(self.env, self.device),
            "meta": {**(self.meta or {}), "step": self.step, "val_metrics": self.last_val},
            "best": self.best or {},
        }

    def best_meta(self) -> dict[str, Any]:
        """What best.pt carries beside the weights."""
        return {**(self.meta or {}), "step": self.step, "val_metrics": self.last_val, "best": self.best}

    def load_state_dict(self, state: dict[str, Any], source: Path) -> None:
        saved = saved_fingerprint(state, self.order)
        self.data_change = go_on_with(self.order, saved, self.files, source, self.allow_change)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self.batch_in_epoch = (int(state["progress"][k]) for k in PROGRESS)
        if self.batch_in_epoch >= self.order.steps_per_epoch:  # the data changed (allowed): its next epoch
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0
        self.best = state["best"] or None
        self.last_val = state["meta"].get("val_metrics")
        restore_rng(state["rng"], self.env, self.device)

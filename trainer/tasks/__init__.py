"""Training tasks. Each module here defines `TASK`, an object with the `Task` methods, and owns everything
about its task: its settings, its data check, its sample data, its dataset, model and loss. Adding a task is
adding one module; the shared code asks the task and never tests a task's name.

Task modules import torch inside their methods only: the submitter imports them (for the settings and the
data check) and must stay quick.
"""

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset

    from trainer.config import TrainConfig


class Task(Protocol):
    settings: type
    """A frozen dataclass of the task's own keys, validated in __post_init__, set as `<task>.<key>=value`."""
    metrics: dict[str, str]
    """The validation metrics `evaluate` reports, each with its direction (min or max); the first one picks
    the best checkpoint unless eval.metric names another."""

    def check(self, config: "TrainConfig", world_size: int) -> None:
        """Refuse data and settings this task cannot train on, with a UserError (torch-free: run at submit)."""
        ...

    def sample_data(self, folder: Path, count: int) -> None:
        """Write about `count` samples of the task's built-in data into `folder` (not yet there)."""
        ...

    def dataset(self, config: "TrainConfig") -> "Dataset[Any]": ...

    def model(self, config: "TrainConfig", dataset: "Dataset[Any]") -> "torch.nn.Module": ...

    def forward(self, model: "torch.nn.Module", batch: Any) -> tuple["torch.Tensor", dict[str, "torch.Tensor"]]:
        """Loss and named metrics (scalars) for one batch already on the device."""
        ...

    def evaluate(self, model: "torch.nn.Module", batch: Any) -> dict[str, "torch.Tensor"]:
        """Validation metrics of one batch, one value per sample (the trainer averages them over the set)."""
        ...

    def images(self, model: "torch.nn.Module", batch: Any) -> "torch.Tensor | None":
        """An image grid (C, H, W in [0, 1]) for TensorBoard, or None."""
        ...


def available() -> list[str]:
    # A directory listing rather than pkgutil, whose import the submit path would pay for.
    return sorted(n.removesuffix(".py") for n in os.listdir(__path__[0]) if n.endswith(".py") and n[0] != "_")


def get(name: str) -> Task:
    return importlib.import_module(f"{__name__}.{name}").TASK  # type: ignore[no-any-return]

"""Training tasks. Each module here defines `TASK`, an object with the `Task` methods;
adding a task is adding one module. Importing this package does not import torch."""

import importlib
import os
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset

    from trainer.config import TrainConfig


class Task(Protocol):
    def dataset(self, config: "TrainConfig") -> "Dataset[Any]": ...

    def model(self, config: "TrainConfig", dataset: "Dataset[Any]") -> "torch.nn.Module": ...

    def forward(self, model: "torch.nn.Module", batch: Any) -> tuple["torch.Tensor", dict[str, "torch.Tensor"]]:
        """Loss and named metrics (scalars) for one batch already on the device."""
        ...

    def images(self, model: "torch.nn.Module", batch: Any) -> "torch.Tensor | None":
        """An image grid (C, H, W in [0, 1]) for TensorBoard, or None."""
        ...


def available() -> list[str]:
    # A directory listing rather than pkgutil, whose import the submit path would pay for.
    return sorted(n.removesuffix(".py") for n in os.listdir(__path__[0]) if n.endswith(".py") and n[0] != "_")


def get(name: str) -> Task:
    return importlib.import_module(f"{__name__}.{name}").TASK

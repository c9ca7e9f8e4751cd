"""TensorBoard on rank 0, and a do-nothing twin for the other ranks."""

from pathlib import Path
from typing import Any

import torch


class NullLogger:
    def scalars(self, values: dict[str, float], step: int) -> None:
        pass

    def image(self, tag: str, grid: torch.Tensor, step: int) -> None:
        pass

    def hparams(self, hparams: dict[str, Any], metrics: dict[str, float]) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger(NullLogger):
    def __init__(self, folder: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(folder))

    def scalars(self, values: dict[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def image(self, tag: str, grid: torch.Tensor, step: int) -> None:
        self.writer.add_image(tag, grid, step)

    def hparams(self, hparams: dict[str, Any], metrics: dict[str, float]) -> None:
        # run_name="." keeps the hparams in the same event folder as the scalars.
        self.writer.add_hparams(hparams, {f"hparam/{k}": v for k, v in metrics.items()}, run_name=".")

    def close(self) -> None:
        self.writer.close()

"""Paired image-to-image translation: a small U-Net trained with an L1 loss, on pairs listed in a CSV."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.errors import UserError
from trainer.images import check_batches, check_image, inside_root

if TYPE_CHECKING:
    import torch
    from torch import nn

    from trainer.config import TrainConfig
    from trainer.tasks._pix2pix_nn import PairsDataset

COLUMNS = ("image_name", "target_name")


@dataclass(frozen=True, eq=False)
class Pix2PixSettings:
    """`pix2pix.<key>=value`: the U-Net's size."""

    width: int = 16  # base channels
    depth: int = 3  # down/up levels: the image size must be divisible by 2**depth

    def __post_init__(self) -> None:
        if self.width < 1:
            raise UserError(f"pix2pix.width: must be >= 1, got {self.width}")
        if not 1 <= self.depth <= 6:
            raise UserError(f"pix2pix.depth: must be between 1 and 6, got {self.depth}")


def read_pairs(root: Path, csv_name: str, verify: bool = True) -> list[tuple[Path, Path]]:
    """The (input, target) image paths listed in the pairs CSV, each checked."""
    import pandas as pd

    csv = inside_root(root, csv_name, "data.csv")
    if not csv.is_file():
        raise UserError(f"pairs CSV {csv} does not exist; set data.root and data.csv to an existing file")
    try:
        frame = pd.read_csv(csv, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserError(f"pairs CSV {csv} cannot be parsed ({exc}); write it as comma-separated text") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise UserError(
            f"pairs CSV {csv} lacks column(s) {', '.join(missing)}; its header must hold {','.join(COLUMNS)}"
        )
    if frame.empty:
        raise UserError(f"pairs CSV {csv} has no rows; add at least one image pair")
    pairs = []
    for index, row in enumerate(frame.itertuples(index=False), start=2):  # row 1 is the header
        where = f"{csv.name} row {index}"
        source = inside_root(root, row.image_name, where)
        target = inside_root(root, row.target_name, where)
        if verify:
            check_image(source, where)
            check_image(target, where)
        pairs.append((source, target))
    return pairs


class Pix2Pix:
    name = "pix2pix"
    settings = Pix2PixSettings
    metrics = {"l1": "min", "psnr": "max"}

    def check(self, config: TrainConfig, world_size: int) -> None:
        depth, size = config.task_settings.depth, config.data.image_size
        if size % 2**depth:
            raise UserError(
                f"pix2pix.depth={depth} halves the image {depth} times, and data.image_size={size} is not "
                f"divisible by {2**depth}; pass data.image_size={max(2**depth, size - size % 2**depth)} or a "
                "smaller pix2pix.depth"
            )
        pairs = read_pairs(Path(config.data.root), config.data.csv, config.data.verify_images)
        check_batches(len(pairs), config, world_size, f"pairs CSV {config.data.csv}")

    def sample_data(self, folder: Path, count: int) -> None:
        """`count` edge maps (input) and the filled, coloured shapes (target), listed in pairs.csv."""
        from trainer.sample_data import SHAPES, edges, scene

        rng = random.Random(0)
        (folder / "inputs").mkdir(parents=True)
        (folder / "targets").mkdir()
        rows = [",".join(COLUMNS)]
        for i in range(count):
            target = scene(rng, rng.choice(SHAPES))
            edges(target).save(folder / "inputs" / f"{i:04d}.png")
            target.save(folder / "targets" / f"{i:04d}.png")
            rows.append(f"inputs/{i:04d}.png,targets/{i:04d}.png")
        (folder / "pairs.csv").write_text("\n".join(rows) + "\n")

    def dataset(self, config: TrainConfig) -> PairsDataset:
        from trainer.tasks._pix2pix_nn import PairsDataset

        root = Path(config.data.root)
        return PairsDataset(read_pairs(root, config.data.csv, verify=False), config.data.image_size)

    def model(self, config: TrainConfig, dataset: Any) -> nn.Module:
        from trainer.tasks._pix2pix_nn import UNet

        return UNet(config.task_settings.width, config.task_settings.depth)

    def forward(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        from torch import nn

        from trainer.tasks._pix2pix_nn import to_unit

        source, target = to_unit(batch).unbind(1)
        loss = nn.functional.l1_loss(model(source).float(), target)
        return loss, {}

    def evaluate(self, model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        """L1 and PSNR (dB, for images in [-1, 1]: a peak-to-peak range of 2) per pair."""
        import torch

        from trainer.tasks._pix2pix_nn import to_unit

        source, target = to_unit(batch).unbind(1)
        error = model(source).float() - target
        mse = error.square().mean(dim=(1, 2, 3)).clamp_min(1e-10)
        return {"l1": error.abs().mean(dim=(1, 2, 3)), "psnr": 10 * torch.log10(4 / mse)}

    def images(self, model: nn.Module, batch: Any) -> torch.Tensor:
        import torch
        from torchvision.utils import make_grid

        from trainer.tasks._pix2pix_nn import to_unit

        with torch.no_grad():
            source, target = to_unit(batch[:4]).unbind(1)
            output = model(source).float()
        rows = torch.stack([source, target, output], dim=1).flatten(0, 1)  # input | target | output
        return make_grid(rows, nrow=3, normalize=True, value_range=(-1, 1))


TASK = Pix2Pix()

"""Paired image-to-image translation: a small U-Net trained with an L1 loss, on pairs listed in a CSV."""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.config.schema import setting
from trainer.data.checks import (
    BadImages,
    bad_images_folder,
    check_batches,
    inside_root,
    open_images,
    sample_rows,
    sampled_line,
)
from trainer.errors import UserError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from trainer.config.schema import TrainConfig
    from trainer.tasks._pix2pix_nn import PairsDataset

COLUMNS = ("image_name", "target_name")


@dataclass(frozen=True, eq=False)
class Pix2PixSettings:
    """`pix2pix.<key>=value`: the U-Net's size."""

    width: int = setting(16, "the U-Net's base channels")
    depth: int = setting(3, "the U-Net's down/up levels (1 to 6): `data.image_size` must be divisible by `2**depth`")

    def __post_init__(self) -> None:
        if self.width < 1:
            raise UserError(f"pix2pix.width: must be >= 1, got {self.width}")
        if not 1 <= self.depth <= 6:
            raise UserError(f"pix2pix.depth: must be between 1 and 6, got {self.depth}")


# A path needing a closer look: absolute, with . or .. segments, doubled slashes, or empty. Every other row is
# a plain relative path, which cannot leave the root but through a symlink inside it (yours to place).
ODD_PATH = re.compile(r"^(?:/|$)|//|(?:^|/)\.\.?(?:/|$)", re.MULTILINE)


# The same, as substrings of a column joined by newlines (with one before and after): substring search runs at
# memory speed, where the regex over a whole column took 0.6 s a million rows.
ODD_PARTS = ("\n/", "//", "\n\n", "/./", "/../", "\n./", "\n../", "/.\n", "/..\n", "\n.\n", "\n..\n")


def any_odd_path(paths: list[str]) -> bool:
    joined = "\n" + "\n".join(paths) + "\n"
    return any(part in joined for part in ODD_PARTS)


def read_pairs(root: Path, csv_name: str) -> tuple[list[str], list[str]]:
    """The (input, target) image paths listed in the pairs CSV, relative to the root and normalised, each
    one present.

    Cost that grows as the work does (benchmarks/data_scale.py): one C parse of the CSV, one substring scan of
    each whole column for paths needing a closer look, and existence checked against one directory listing per
    folder (set operations), instead of a resolve and a stat per row.
    """
    csv = inside_root(root, csv_name, "data.csv")
    stat = csv.stat() if csv.is_file() else None
    if stat is None:
        raise UserError(f"pairs CSV {csv} does not exist; set data.root and data.csv to an existing file")
    return _read_pairs(root.resolve(), csv, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)  # the submitter checks the data, then stores the list: read once
def _read_pairs(root: Path, csv: Path, mtime_ns: int, size: int) -> tuple[list[str], list[str]]:
    import pandas as pd

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
    columns = [frame[column].tolist() for column in COLUMNS]
    for paths in columns:
        if any_odd_path(paths):  # rare: only then row by row
            for i, path in enumerate(paths):
                if ODD_PATH.search(path):
                    resolved = inside_root(root, path, f"{csv.name} row {i + 2}")  # row 1 is the header
                    paths[i] = str(resolved.relative_to(root))
    _check_present(root, columns, csv.name)
    return columns[0], columns[1]


def _check_present(root: Path, columns: list[list[str]], csv_name: str) -> None:
    """Every path names an entry of its folder's listing: one listdir per folder, not one stat per row."""
    import os

    paths = set(columns[0]) | set(columns[1])
    listed: set[str] = set()
    for folder in {p.rpartition("/")[0] for p in paths}:
        try:
            listed.update(f"{folder}/{name}" if folder else name for name in os.listdir(root / folder))
        except OSError:  # a missing folder: its rows are reported below
            pass
    absent = paths - listed
    if absent:
        row, path = next((i, p) for i, pair in enumerate(zip(*columns, strict=True)) for p in pair if p in absent)
        raise UserError(
            f"{csv_name} row {row + 2}: image {root / path} is missing or not a file; fix the path or add the file"
        )


def verify_pairs(root: Path, pairs: tuple[list[str], list[str]], sample: int, csv_name: str) -> str:
    """Open both images of `sample` rows drawn at random (0: every row); a line saying so when sampled."""
    sources, targets = pairs
    rows = sample_rows(len(sources), sample)
    items = [(root / side[i], f"{csv_name} row {i + 2}") for i in rows for side in (sources, targets)]
    open_images(items)
    return sampled_line(len(rows), len(sources), csv_name)


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
        root = Path(config.data.root)
        pairs = read_pairs(root, config.data.csv)
        if config.data.verify_images and (
            line := verify_pairs(root, pairs, config.data.verify_sample, config.data.csv)
        ):
            print(line)
        check_batches(len(pairs[0]), config, world_size, f"pairs CSV {config.data.csv}")

    def file_list(self, config: TrainConfig) -> list[str]:
        """The checked pairs, one `input<TAB>target` line each (relative to data.root): what every rank reads
        instead of the CSV."""
        sources, targets = read_pairs(Path(config.data.root), config.data.csv)
        return [f"{s}\t{t}" for s, t in zip(sources, targets, strict=True)]

    def sample_data(self, folder: Path, count: int) -> None:
        """`count` edge maps (input) and the filled, coloured shapes (target), listed in pairs.csv."""
        from trainer.data.sample import SHAPES, edges, scene

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
        import numpy

        from trainer.data import filelist
        from trainer.tasks._pix2pix_nn import PairsDataset

        raw = filelist.read_bytes(config.data)
        if raw is None:  # no stored list (a run submitted before there was one, or trainer used directly)
            sources, targets = (
                numpy.array([p.encode() for p in c]) for c in read_pairs(Path(config.data.root), config.data.csv)
            )
        else:  # bytes split in C: a million rows in a fraction of a second, no Python string per path
            fields = raw.replace(b"\t", b"\n").split(b"\n")[:-1]
            sources, targets = numpy.array(fields[0::2]), numpy.array(fields[1::2])
        bad = BadImages(bad_images_folder(config), config.data.bad_images == "skip")
        return PairsDataset(config.data.root, sources, targets, config.data.image_size, bad)

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

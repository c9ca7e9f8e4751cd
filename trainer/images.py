"""Checks shared by the tasks' data checks, run before any run directory exists (torch-free)."""

from pathlib import Path
from typing import TYPE_CHECKING

from trainer.errors import UserError

if TYPE_CHECKING:
    from trainer.config import TrainConfig

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".ppm", ".tif", ".tiff")


def inside_root(root: Path, relative: str, where: str) -> Path:
    """Resolve `relative` under `root`, refusing paths that escape it."""
    path = (root / relative).resolve()
    if not path.is_relative_to(root.resolve()):
        raise UserError(f"{where}: path {relative!r} escapes the data root {root}; use a path inside it")
    return path


def check_image(path: Path, where: str) -> None:
    from PIL import Image, UnidentifiedImageError

    if not path.is_file():
        raise UserError(f"{where}: image {path} is missing or not a file; fix the path or add the file")
    try:
        with Image.open(path) as image:
            image.verify()
    except PermissionError:
        raise UserError(f"{where}: image {path} is not readable; fix its permissions") from None
    except Image.DecompressionBombError:
        raise UserError(
            f"{where}: image {path} has more pixels than Pillow opens safely (a decompression bomb?); "
            "replace it with a smaller image"
        ) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise UserError(f"{where}: image {path} is corrupt ({exc}); replace it or drop the row") from None


def check_batches(samples: int, config: "TrainConfig", world_size: int, what: str) -> None:
    """Every rank needs one full batch per epoch: the loader drops a last partial one so that all ranks take
    the same steps, and DistributedSampler gives each rank ceil(samples / world_size) samples."""
    samples -= config.data.held_out(samples)
    per_rank = -(-samples // world_size)
    if per_rank < config.batch_size:
        raise UserError(
            f"{what} holds {samples} samples: {per_rank} for each of {world_size} processes, fewer than "
            f"batch_size={config.batch_size}; pass batch_size={max(1, per_rank)} or less, use fewer processes, "
            "or add data"
        )

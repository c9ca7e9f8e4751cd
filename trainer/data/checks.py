"""Checks shared by the tasks' data checks, run before any run directory exists (torch-free)."""

import random
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.errors import UserError

if TYPE_CHECKING:
    from trainer.config import TrainConfig

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".ppm", ".pgm", ".tif", ".tiff")  # ImageFolder's


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
            jpeg = image.format == "JPEG"
            image.verify()  # PNG: every chunk's CRC; JPEG: only its headers
        if jpeg:  # a truncated JPEG passes verify() and fails at the first batch: decode it
            with Image.open(path) as image:
                image.load()
    except PermissionError:
        raise UserError(f"{where}: image {path} is not readable; fix its permissions") from None
    except Image.DecompressionBombError:
        raise UserError(
            f"{where}: image {path} has more pixels than Pillow opens safely (a decompression bomb?); "
            "replace it with a smaller image"
        ) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise UserError(f"{where}: image {path} is corrupt ({exc}); replace it or drop the row") from None


def sample_rows(count: int, sample: int) -> list[int]:
    """Which of `count` samples to open at submit: `sample` of them at random (seed 0), or all (0)."""
    if not sample or sample >= count:
        return list(range(count))
    return sorted(random.Random(0).sample(range(count), sample))


def open_images(items: list[tuple[Path, str]]) -> None:
    """check_image on each (path, where), in threads: on a shared filesystem the wait is latency, not CPU.
    In order: the first bad item is the one reported."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=16) as pool:
        for _ in pool.map(lambda item: check_image(*item), items):
            pass


def sampled_line(opened: int, count: int, what: str) -> str:
    """The line the submitter prints when it opened a sample only (empty when it opened everything)."""
    if opened >= count:
        return ""
    return (
        f"data check: opened the images of {opened} of {count} samples of {what}, drawn at random (seed 0); "
        "data.verify_sample=0 opens all"
    )


class BadImages:
    """What a dataset does with an image it cannot read during training (data.bad_images): fail the run with
    the path, or skip to the next sample and note the path in `folder` (one file per process: workers too)."""

    def __init__(self, folder: str, skip: bool) -> None:
        self.folder, self.skip = folder, skip

    def met(self, path: Path | str, exc: Exception) -> None:
        if not self.skip or not self.folder:
            raise UserError(f"cannot read image {path} ({exc}); fix or remove it, or set data.bad_images=skip")
        import os

        Path(self.folder).mkdir(parents=True, exist_ok=True)
        with open(Path(self.folder) / f"{os.getpid()}.txt", "a") as log:
            log.write(f"{path}\n")


def bad_images_folder(config: "TrainConfig") -> str:
    from trainer.run.rundir import RunDir

    return str(RunDir(Path(config.run_dir)).bad_images) if config.run_dir else ""


def count_bad_images(folder: Path) -> int:
    """The distinct images skipped so far (an image met in every epoch counts once)."""
    return len({line for f in folder.glob("*.txt") for line in f.read_text().splitlines()}) if folder.is_dir() else 0


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

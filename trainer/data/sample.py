"""The built-in sample data: procedural shapes drawn with Pillow alone, generated on first use.

Each task writes its own part (its `sample_data` method) into a folder named after it; this module holds
the drawing they share and the "generate once, atomically" logic.
"""

import os
import random
import shutil
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

from trainer.config import tasks
from trainer.errors import UserError, one_line_errors

SHAPES = ("circle", "square", "triangle")
SIZE = 64


def _shape(draw: ImageDraw.ImageDraw, kind: str, box: tuple[int, int, int, int], **style: object) -> None:
    x0, y0, x1, y1 = box
    if kind == "circle":
        draw.ellipse(box, **style)
    elif kind == "square":
        draw.rectangle(box, **style)
    else:
        draw.polygon([((x0 + x1) // 2, y0), (x1, y1), (x0, y1)], **style)


def scene(rng: random.Random, kind: str) -> Image.Image:
    """One filled shape of a random colour, size and place on a dark background."""
    background = tuple(rng.randrange(0, 80) for _ in range(3))
    image = Image.new("RGB", (SIZE, SIZE), background)
    draw = ImageDraw.Draw(image)
    side = rng.randrange(20, 48)
    x0, y0 = rng.randrange(0, SIZE - side), rng.randrange(0, SIZE - side)
    colour = tuple(rng.randrange(120, 256) for _ in range(3))
    _shape(draw, kind, (x0, y0, x0 + side, y0 + side), fill=colour)
    return image


def edges(image: Image.Image) -> Image.Image:
    return image.convert("L").filter(ImageFilter.FIND_EDGES).point(lambda v: 255 if v > 20 else 0).convert("RGB")


def ensure_sample_data(root: str | os.PathLike[str], count: int = 256) -> Path:
    """Generate every task's sample data under `root/<task>` unless it is already there; returns `root`.

    Written to a temporary folder and renamed into place, so concurrent callers and
    interrupted runs never leave a half-written data set behind.
    """
    root = Path(root)
    names = tasks.available()
    if all((root / name).is_dir() for name in names):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".sample-", dir=root.parent))
    try:
        for name in names:
            tasks.get(name).sample_data(tmp / name, count)
        try:
            os.rename(tmp, root)
        except OSError:
            if not all((root / name).is_dir() for name in names):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


@one_line_errors
def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else "sample_data")
    try:
        print(ensure_sample_data(target))
    except OSError as exc:
        raise UserError(f"{target} cannot be written ({exc.strerror}); pass a folder you can write") from None
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))

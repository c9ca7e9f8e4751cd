"""The built-in sample data: procedural shapes, generated on first use with Pillow alone.

pix2pix: an edge map (input) and the filled, coloured shape (target), listed in pairs.csv.
classify: an ImageFolder of circles, squares and triangles.
"""

import os
import random
import shutil
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

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


def _scene(rng: random.Random, kind: str) -> Image.Image:
    background = tuple(rng.randrange(0, 80) for _ in range(3))
    image = Image.new("RGB", (SIZE, SIZE), background)
    draw = ImageDraw.Draw(image)
    side = rng.randrange(20, 48)
    x0, y0 = rng.randrange(0, SIZE - side), rng.randrange(0, SIZE - side)
    colour = tuple(rng.randrange(120, 256) for _ in range(3))
    _shape(draw, kind, (x0, y0, x0 + side, y0 + side), fill=colour)
    return image


def _edges(image: Image.Image) -> Image.Image:
    return image.convert("L").filter(ImageFilter.FIND_EDGES).point(lambda v: 255 if v > 20 else 0).convert("RGB")


def _write_pix2pix(out: Path, count: int, rng: random.Random) -> None:
    (out / "inputs").mkdir(parents=True)
    (out / "targets").mkdir()
    rows = ["image_name,target_name"]
    for i in range(count):
        target = _scene(rng, rng.choice(SHAPES))
        _edges(target).save(out / "inputs" / f"{i:04d}.png")
        target.save(out / "targets" / f"{i:04d}.png")
        rows.append(f"inputs/{i:04d}.png,targets/{i:04d}.png")
    (out / "pairs.csv").write_text("\n".join(rows) + "\n")


def _write_classify(out: Path, per_class: int, rng: random.Random) -> None:
    for kind in SHAPES:
        (out / kind).mkdir(parents=True)
        for i in range(per_class):
            _scene(rng, kind).save(out / kind / f"{i:04d}.jpg", quality=90)


def ensure_sample_data(root: str | os.PathLike[str], count: int = 256) -> Path:
    """Generate the sample data under `root` unless it is already there; returns `root`.

    Written to a temporary folder and renamed into place, so concurrent callers and
    interrupted runs never leave a half-written data set behind.
    """
    root = Path(root)
    if (root / "pix2pix" / "pairs.csv").exists() and (root / "classify").is_dir():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".sample-", dir=root.parent))
    try:
        _write_pix2pix(tmp / "pix2pix", count, random.Random(0))
        _write_classify(tmp / "classify", count // len(SHAPES), random.Random(1))
        try:
            os.rename(tmp, root)
        except OSError:
            if not (root / "pix2pix" / "pairs.csv").exists():
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

"""Reading and checking the data a task points at, before any run directory exists (torch-free)."""

from pathlib import Path

from trainer.errors import UserError

COLUMNS = ("image_name", "target_name")
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


def check_image_folder(root: Path) -> None:
    """An ImageFolder needs class sub-folders holding images."""
    if not root.is_dir():
        raise UserError(f"data root {root} does not exist; set data.root to a folder of class sub-folders")
    classes = [d for d in root.iterdir() if d.is_dir() and any(f.suffix.lower() in IMAGE_SUFFIXES for f in d.iterdir())]
    if not classes:
        raise UserError(f"data root {root} has no class sub-folders with images; lay it out as root/<class>/<image>")


def check_data(task: str, root: Path, csv_name: str, verify: bool) -> None:
    """Refuse data the task cannot read, naming the row and path."""
    if task == "pix2pix":
        read_pairs(root, csv_name, verify)
    else:
        check_image_folder(root)

"""Benchmark 10: the data's cost at scale: submit-time check, storing the file list, a rank's dataset ready.

For CSVs of 10k, 100k and 1M rows: pandas.read_csv of the same file (the floor), the submitter's check (paths,
existence, images of 1,000 sampled rows), the file list stored, and a rank's dataset built from the stored
list; at 10k and 100k also the row-by-row resolve the check replaced. Then an ImageFolder of the same files:
torchvision's scan against the dataset from the stored list. Targets: check <= 3 s and a rank ready <= 1 s
at 1M rows. The files are hard links to one small PNG (creating a million files would take this machine
minutes): the rows cycle over `--files` distinct names per column, so listings are `--files` entries long.
Usage: python benchmarks/data_scale.py [--rows 10000,100000,1000000] [--files 50000]
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT

sys.path.insert(0, str(ROOT))

from trainer.config import build_config  # noqa: E402
from trainer.data import filelist  # noqa: E402
from trainer.data.checks import inside_root  # noqa: E402
from trainer.tasks import pix2pix  # noqa: E402
from trainer.tasks.classify import TASK as CLASSIFY  # noqa: E402


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def make_files(root: Path, files: int) -> None:
    from PIL import Image

    (root / "inputs").mkdir(parents=True)
    (root / "targets").mkdir()
    png = root / "one.png"
    for n, (side, i) in enumerate((side, i) for side in ("inputs", "targets") for i in range(files)):
        if n % 10_000 == 0:  # a file takes at most 65,000 links on ext4
            png.unlink(missing_ok=True)
            Image.new("RGB", (64, 64), (120, 30, 200)).save(png)
        os.link(png, root / side / f"{i:07d}.png")
    png.unlink()


def old_resolve(root: Path, csv: Path) -> int:
    """The check before: pandas, then Path.resolve (a stat per component) row by row."""
    import pandas as pd

    frame = pd.read_csv(csv, dtype=str, keep_default_na=False)
    for index, row in enumerate(frame.itertuples(index=False), start=2):
        inside_root(root, row.image_name, f"row {index}")
        inside_root(root, row.target_name, f"row {index}")
    return len(frame)


def measure(rows: int, root: Path, scratch: Path, files: int) -> None:
    """One table row: the CSV of `rows` rows read, checked, stored and made a rank's dataset."""
    import pandas as pd

    csv = root / f"pairs_{rows}.csv"
    names = [f"{i % files:07d}.png" for i in range(rows)]
    csv.write_text("image_name,target_name\n" + "".join(f"inputs/{n},targets/{n}\n" for n in names))
    floor, _ = timed(lambda: pd.read_csv(csv, dtype=str, keep_default_na=False))
    config = build_config([f"data.root={root}", f"data.csv={csv.name}", f"data.file_lists={scratch / 'lists'}"])
    pix2pix._read_pairs.cache_clear()

    def check() -> None:
        pix2pix.verify_pairs(root, pix2pix.read_pairs(root, csv.name), 1000, csv.name)

    checked, _ = timed(check)
    old = f"{timed(lambda: old_resolve(root, csv))[0]:.2f} s" if rows <= 100_000 else "-"
    lines = pix2pix.TASK.file_list(config)
    stored, _ = timed(lambda: filelist.write(scratch / "lists", str(root), csv.name, lines))
    ready, dataset = timed(lambda: pix2pix.TASK.dataset(config))
    assert len(dataset) == rows
    print(
        f"| {rows:,} | {floor:.2f} s | {checked:.2f} s | {checked / floor:.1f} | {old} | {stored:.2f} s "
        f"| {ready:.2f} s | {ready / floor:.1f} |"
    )
    ok = rows < 1_000_000 or (checked <= 3 and ready <= 1)
    print(
        f"ratio check/floor {checked / floor:.2f}, ready/floor {ready / floor:.2f} ({'meets' if ok else 'MISSES'} target)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="10000,100000,1000000")
    parser.add_argument("--files", type=int, default=50_000)
    args = parser.parse_args()
    import trainer.tasks._pix2pix_nn  # noqa: F401  torch's import is not the dataset's cost

    scratch = Path(tempfile.mkdtemp(prefix="data_scale_"))
    try:
        root = scratch / "data"
        seconds, _ = timed(lambda: make_files(root, args.files))
        print(f"made {2 * args.files} hard links in {seconds:.1f} s")
        print(
            "| rows | read_csv (floor) | check, sampled | x floor | old row-by-row | list stored | rank ready | x floor |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for rows in [int(r) for r in args.rows.split(",")]:
            measure(rows, root, scratch, args.files)
        # An ImageFolder of the same files: two classes (inputs, targets), 2 x --files images.
        from torchvision.datasets import ImageFolder

        folder = build_config(["task=classify", f"data.root={root}", f"data.file_lists={scratch / 'lists'}"])
        for stray in root.glob("*.csv"):
            stray.unlink()
        scan, scanned = timed(lambda: ImageFolder(str(root)))
        listing, lines = timed(lambda: CLASSIFY.file_list(folder))
        filelist.write(scratch / "lists", str(root), folder.data.csv, lines)
        ready, listed = timed(lambda: CLASSIFY.dataset(folder))
        assert listed.samples == scanned.samples
        print(
            f"ImageFolder of {len(scanned):,} files: torchvision's scan {scan:.2f} s, the submitter's scan "
            f"{listing:.2f} s, a rank from the stored list {ready:.2f} s -> ratio {ready / scan:.3f}"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

"""classify's ImageFolder built from the stored file list (trainer.data.filelist) instead of a scan of the root.

A module of its own: it imports torchvision, which the classify module imports inside its methods only.
"""

from pathlib import Path
from typing import Any

from torchvision.datasets import ImageFolder

from trainer.data.checks import BadImages
from trainer.data.decode import load_rgb
from trainer.errors import UserError


class ListedImageFolder(ImageFolder):  # type: ignore[misc]
    """ImageFolder's classes and samples, from `class<TAB>path` lines in ImageFolder's own order."""

    def __init__(self, root: str, items: list[list[str]], transform: Any, bad: BadImages) -> None:
        self.items, self.bad = items, bad  # items: read by the two methods below, which ImageFolder's __init__ calls
        super().__init__(root, transform=transform, loader=load_rgb)

    def __getitem__(self, index: int) -> Any:
        for offset in range(len(self.samples)):  # a skipped image's place is taken by the next readable one
            i = (index + offset) % len(self.samples)
            try:
                return super().__getitem__(i)
            except OSError as exc:
                self.bad.met(Path(self.samples[i][0]), exc)  # raises, unless skipping
        raise UserError("no image of the data set can be read; check data.root")

    def find_classes(self, directory: str) -> tuple[list[str], dict[str, int]]:
        classes = sorted({name for name, _ in self.items})
        return classes, {name: i for i, name in enumerate(classes)}

    def make_dataset(self, directory: str, class_to_idx: dict[str, int], *args: Any, **kwargs: Any) -> list:  # type: ignore[override]
        return [(path, class_to_idx[name]) for name, path in self.items]

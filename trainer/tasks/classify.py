"""Image classification: a torchvision ImageFolder and a torchvision classification model chosen by name."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.config.schema import setting
from trainer.data.checks import (
    IMAGE_SUFFIXES,
    BadImages,
    bad_images_folder,
    check_batches,
    open_images,
    sample_rows,
    sampled_line,
)
from trainer.errors import UserError

if TYPE_CHECKING:
    import torch
    import torchvision
    from torch import nn

    from trainer.config.schema import TrainConfig


@dataclass(frozen=True, eq=False)
class ClassifySettings:
    """`classify.<key>=value`."""

    # Checked when the job starts, on a probe batch of data.image_size: the submitter does not import torch.
    model: str = setting(
        "resnet18",
        "a torchvision classification model that takes num_classes and returns logits at `data.image_size`, "
        "built without weights (nothing is downloaded); `googlenet` and `inception_v3` (auxiliary outputs) are "
        "refused when the job starts, `vit_*` need 224 px",
    )

    def __post_init__(self) -> None:
        if not self.model:
            raise UserError("classify.model: must name a torchvision model, e.g. classify.model=resnet18")


def class_folders(root: Path) -> dict[str, list[str]]:
    """ImageFolder's layout and order: root/<class>/<image>, classes sorted by name, files as ImageFolder's
    make_dataset walks them. os.walk reads each folder's listing once (no stat per file)."""
    if not root.is_dir():
        raise UserError(f"data root {root} does not exist; set data.root to a folder of class sub-folders")
    out = {}
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.is_dir():
            if any(ch in entry.name for ch in "\t\n\r"):
                raise UserError(
                    f"class folder {entry.path!r} has a tab or line break in its name, which the run's file list "
                    "(class<TAB>path lines) cannot hold; rename it"
                )
            files: list[str] = []
            for folder, _, names in sorted(os.walk(entry.path, followlinks=True)):
                files += [os.path.join(folder, n) for n in sorted(names) if n.lower().endswith(IMAGE_SUFFIXES)]
            for path in files:
                try:
                    path.encode()
                except UnicodeEncodeError:  # bytes that are not UTF-8 (os.walk keeps them as surrogates)
                    raise UserError(f"file name {path!r} is not UTF-8; rename it (e.g. with convmv)") from None
                if any(ch in path for ch in "\n\r"):
                    raise UserError(f"file name {path!r} has a line break; rename it")
            out[entry.name] = files
    return out


class Classify:
    name = "classify"
    settings = ClassifySettings
    metrics = {"top1": "max", "loss": "min", "top5": "max"}  # top5 only with more than 5 classes

    def check(self, config: TrainConfig, world_size: int) -> None:
        root = Path(config.data.root)
        classes = class_folders(root)
        if not classes:
            raise UserError(f"data root {root} has no class sub-folders; lay it out as root/<class>/<image>")
        empty = [name for name, files in classes.items() if not files]
        if empty:
            raise UserError(
                f"class folder {root / empty[0]} holds no images ({', '.join(IMAGE_SUFFIXES)}); add images or "
                "remove the folder"
            )
        if len(classes) < 2:
            raise UserError(
                f"data root {root} has one class ({next(iter(classes))}): a classifier needs at least two "
                "class sub-folders"
            )
        if config.data.verify_images:
            flat = [(Path(path), f"class {name}") for name, files in classes.items() for path in files]
            rows = sample_rows(len(flat), config.data.verify_sample)
            open_images([flat[i] for i in rows])
            if line := sampled_line(len(rows), len(flat), f"data root {root}"):
                print(line)
        check_batches(sum(len(f) for f in classes.values()), config, world_size, f"data root {root}")

    def file_list(self, config: TrainConfig) -> list[str]:
        """`class<TAB>path` per image, in ImageFolder's order: every rank reads this instead of scanning."""
        return [f"{name}\t{path}" for name, files in class_folders(Path(config.data.root)).items() for path in files]

    def sample_data(self, folder: Path, count: int) -> None:
        """An ImageFolder of circles, squares and triangles, `count` images in all."""
        from trainer.data.sample import SHAPES, scene

        rng = random.Random(1)
        for kind in SHAPES:
            (folder / kind).mkdir(parents=True)
            for i in range(count // len(SHAPES)):
                scene(rng, kind).save(folder / kind / f"{i:04d}.jpg", quality=90)

    def dataset(self, config: TrainConfig) -> torchvision.datasets.ImageFolder:
        import torch
        import torchvision
        from torchvision.transforms import v2

        from trainer.data import filelist
        from trainer.data.decode import load_rgb

        size = config.data.image_size
        # On the uint8 tensors that trainer.data.decode gives (torchvision.io, Pillow for other formats).
        transform = v2.Compose(
            [
                v2.Resize((size, size), antialias=True),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize([0.5] * 3, [0.5] * 3),
            ]
        )
        lines = filelist.read(config.data)
        if lines is None:  # no stored list: scan the folders, as ImageFolder does
            return torchvision.datasets.ImageFolder(config.data.root, transform=transform, loader=load_rgb)
        from trainer.tasks._listed import ListedImageFolder

        bad = BadImages(bad_images_folder(config), config.data.bad_images == "skip")
        return ListedImageFolder(config.data.root, [line.split("\t", 1) for line in lines], transform, bad)

    def model(self, config: TrainConfig, dataset: Any) -> nn.Module:
        import torchvision

        name = config.task_settings.model
        if name not in torchvision.models.list_models(module=torchvision.models):
            raise UserError(
                f"classify.model: {name!r} is not a torchvision classification model; try resnet18, "
                "mobilenet_v3_small or another of torchvision.models.list_models(torchvision.models)"
            )
        # weights=None: nothing is downloaded, the model starts from the seeded initialisation.
        model = torchvision.models.get_model(name, weights=None, num_classes=len(dataset.classes))
        probe(model, name, config.data.image_size)
        return model

    def forward(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        from torch import nn

        images, labels = batch
        logits = model(images).float()
        accuracy = (logits.argmax(dim=1) == labels).float().mean()
        return nn.functional.cross_entropy(logits, labels), {"accuracy": accuracy}

    def evaluate(self, model: nn.Module, batch: Any) -> dict[str, torch.Tensor]:
        """Loss and top-1 accuracy per sample; top-5 too with more than 5 classes."""
        from torch import nn

        images, labels = batch
        logits = model(images).float()
        values = {
            "loss": nn.functional.cross_entropy(logits, labels, reduction="none"),
            "top1": (logits.argmax(dim=1) == labels).float(),
        }
        if logits.shape[1] > 5:
            values["top5"] = (logits.topk(5, dim=1).indices == labels[:, None]).any(dim=1).float()
        return values

    def images(self, model: nn.Module, batch: Any) -> None:
        return None


TASK = Classify()


def probe(model: nn.Module, name: str, size: int) -> None:
    """One training-mode forward pass of two blank images: a model that cannot take this image size, or
    that returns something other than a logits tensor (googlenet's and inception's auxiliary outputs),
    fails here in one line rather than at the first step."""
    import torch

    buffers = [b.clone() for b in model.buffers()]  # BatchNorm's running statistics: left as they were
    model.train()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):  # dropout's draws: the seeded stream stays
            out = model(torch.zeros(2, 3, size, size))
    except (RuntimeError, ValueError, AssertionError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(
            f"classify.model={name} cannot take {size}x{size} images ({first}); pass a larger data.image_size "
            "or another classify.model"
        ) from None
    finally:
        with torch.no_grad():
            for buffer, saved in zip(model.buffers(), buffers, strict=True):
                buffer.copy_(saved)
    if not isinstance(out, torch.Tensor):
        raise UserError(
            f"classify.model={name} returns {type(out).__name__}, not a tensor of logits, in training; pick a "
            "model that returns logits, e.g. classify.model=resnet18"
        )

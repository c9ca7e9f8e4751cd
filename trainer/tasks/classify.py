"""Image classification: a torchvision ImageFolder and a torchvision model chosen by name."""

from typing import Any

import torch
import torchvision
from torch import nn
from torchvision import transforms

from trainer.config import TrainConfig
from trainer.errors import UserError


class Classify:
    def dataset(self, config: TrainConfig) -> torchvision.datasets.ImageFolder:
        size = config.data.image_size
        transform = transforms.Compose(
            [transforms.Resize((size, size)), transforms.ToTensor(), transforms.Normalize(0.5, 0.5)]
        )
        return torchvision.datasets.ImageFolder(config.data.root, transform=transform)

    def model(self, config: TrainConfig, dataset: Any) -> nn.Module:
        name = config.model.name
        if name not in torchvision.models.list_models():
            raise UserError(
                f"model.name: unknown torchvision model {name!r}; try resnet18, mobilenet_v3_small or another of torchvision.models.list_models()"
            )
        # weights=None: nothing is downloaded, the model starts from the seeded initialisation.
        return torchvision.models.get_model(name, weights=None, num_classes=len(dataset.classes))

    def forward(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        images, labels = batch
        logits = model(images).float()
        accuracy = (logits.argmax(dim=1) == labels).float().mean()
        return nn.functional.cross_entropy(logits, labels), {"accuracy": accuracy}

    def images(self, model: nn.Module, batch: Any) -> None:
        return None


TASK = Classify()

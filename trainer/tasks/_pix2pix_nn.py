"""pix2pix's torch parts: the paired-image dataset and the U-Net (imported by the task's methods only)."""

import os

import numpy
import torch
from torch import nn
from torch.utils.data import Dataset

from trainer.data.checks import BadImages
from trainer.data.decode import load_rgb_sized
from trainer.errors import UserError


class SkippedImage(Exception):
    """An unreadable image under data.bad_images=skip."""


class PairsDataset(Dataset[torch.Tensor]):
    """Each pair as one uint8 tensor (2, H, W, 3): source and target stacked, channels last.

    uint8 is a quarter of float32's bytes between workers and to the device; one tensor rather than two
    halves the shared-memory handoffs per batch, which cost the loader about 15% of its throughput here
    (measured when the pipeline was tuned: git log -p benchmarks/RESULTS.md). Channels last because the decoders write (H, W, 3): stacking their output
    is then a plain copy, where stacking the (3, H, W) views they return cost as much as decoding a JPEG.
    The layout change and the scaling to [-1, 1] happen on the device, on whole batches (`to_unit`).
    """

    def __init__(
        self, root: str, sources: numpy.ndarray, targets: numpy.ndarray, image_size: int, bad: BadImages | None = None
    ) -> None:
        # Paths relative to root as byte arrays, not lists of str: a DataLoader worker touching a Python object
        # writes its refcount, which copies the page; with a million paths every worker would hold a copy.
        self.root, self.sources, self.targets = str(root), sources, targets  # str: os.path.join is cheaper
        self.size = (image_size, image_size)
        self.bad = bad or BadImages("", skip=False)

    def __len__(self) -> int:
        return len(self.sources)

    def _load(self, path: str) -> torch.Tensor:
        try:
            return load_rgb_sized(path, self.size)
        except OSError as exc:
            self.bad.met(path, exc)  # raises, unless skipping
            raise SkippedImage from None

    def _pair(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Source and target, (H, W, 3) each."""
        for offset in range(len(self.sources)):  # a skipped pair's place is taken by the next readable one
            i = (index + offset) % len(self.sources)
            try:
                source = os.path.join(self.root, self.sources[i].decode())
                target = os.path.join(self.root, self.targets[i].decode())
                return self._load(source).permute(1, 2, 0), self._load(target).permute(1, 2, 0)
            except SkippedImage:
                continue
        raise UserError("no image of the data set can be read; check data.root")

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.stack(self._pair(index))


def to_unit(images: torch.Tensor) -> torch.Tensor:
    """A batch of pairs (B, 2, H, W, 3) uint8 [0, 255] -> (B, 2, 3, H, W) float [-1, 1], contiguous."""
    channels_first = images.permute(0, 1, 4, 2, 3)
    return channels_first.to(torch.float32, memory_format=torch.contiguous_format) / 127.5 - 1


def _block(c_in: int, c_out: int, stride: int = 1) -> nn.Sequential:
    # GroupNorm, not BatchNorm: no running buffers to broadcast, same result at any batch size.
    conv = nn.Conv2d(c_in, c_out, 4 if stride == 2 else 3, stride, 1)
    return nn.Sequential(conv, nn.GroupNorm(min(8, c_out), c_out), nn.SiLU())


class UNet(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        chans = [width * 2**i for i in range(depth + 1)]
        self.inc = _block(3, chans[0])
        self.downs = nn.ModuleList(_block(chans[i], chans[i + 1], stride=2) for i in range(depth))
        self.ups = nn.ModuleList(nn.ConvTranspose2d(chans[i + 1], chans[i], 4, 2, 1) for i in reversed(range(depth)))
        self.fuse = nn.ModuleList(_block(2 * chans[i], chans[i]) for i in reversed(range(depth)))
        self.out = nn.Conv2d(chans[0], 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inc(x)
        skips = [x]
        for down in self.downs:
            x = down(x)
            skips.append(x)
        skips.pop()
        for up, fuse in zip(self.ups, self.fuse, strict=True):
            x = fuse(torch.cat([up(x), skips.pop()], dim=1))
        return torch.tanh(self.out(x))

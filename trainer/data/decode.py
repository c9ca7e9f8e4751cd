"""Images to uint8 tensors for the datasets: torchvision.io for PNG and JPEG, Pillow for everything else.

torchvision.io decodes straight into a tensor (libpng, libjpeg-turbo): no PIL image in between, no copy out
of it (both decoders side by side: benchmarks/decode_speed.py). Pillow stays the fallback for the
formats torchvision.io lacks (BMP, TIFF, PPM, ...) and for any file it refuses, so that what Pillow could read
before is still read. An unreadable image raises OSError, which the datasets hand to data.bad_images.
"""

import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy
import torch
from PIL import Image
from torchvision.transforms.v2 import functional

DECODE: Callable[[torch.Tensor, int, bool], torch.Tensor] | None
try:
    from torchvision.io import ImageReadMode

    # The op that torchvision.io.decode_image calls, called directly: the wrapper logs API usage and warns of
    # its deprecation (TorchCodec supersedes it from torchvision 0.29) on every call, which took a 64 px JPEG
    # from 131 to 223 us (one process, timeit, 100 pairs).
    DECODE, RGB = torch.ops.image.decode_image, ImageReadMode.RGB.value
except (ImportError, AttributeError, RuntimeError):  # a torchvision without its decoders: Pillow for all
    DECODE, RGB = None, 0

PNG = b"\x89PNG\r\n\x1a\n"
JPEG = b"\xff\xd8"
# JPEG's start-of-frame markers, which carry the size: C0-CF but for DHT (C4), JPG (C8) and DAC (CC).
SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def pixels(data: bytes | bytearray) -> int | None:
    """Width x height from a PNG or JPEG header, or None when the header does not say (Pillow decides then).

    Pillow refuses a decompression bomb from the header before decoding; torchvision.io would decode it
    whole (a 20000x20000 1-bit PNG of a few kB becomes 1.2 GB), so the same check runs here first."""
    if data[:8] == PNG and data[12:16] == b"IHDR" and len(data) >= 25:
        width, height = struct.unpack(">II", data[16:24])
        return int(width * height)
    if data[:2] != JPEG:
        return None
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte before a marker
            i += 1
            continue
        if marker in SOF:
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(width * height)
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:  # markers without a length
            i += 2
            continue
        i += 2 + struct.unpack(">H", data[i + 2 : i + 4])[0]
    return None


def deep_png(data: bytes | bytearray) -> bool:
    """A PNG of 16 bits a channel: torchvision.io decodes it to uint16, Pillow to the 8 bits the tasks use."""
    return data[:8] == PNG and len(data) >= 25 and data[24] > 8


def read(path: Path | str) -> bytearray:
    """The file's bytes, read once into a buffer a tensor can share. A missing or unreadable file: OSError."""
    with open(path, "rb", buffering=0) as f:
        data = bytearray(os.fstat(f.fileno()).st_size)
        view, done = memoryview(data), 0
        while done < len(data):  # one read may return less (a network filesystem, a signal)
            got = f.readinto(view[done:])
            if not got:
                break  # the file shrank since the stat
            done += got
        view.release()
        del data[done:]
    return data


def load_rgb(path: Path | str) -> torch.Tensor:
    """The image at `path` as uint8 (3, H, W), RGB: a view of (H, W, 3) storage, as the decoders write it
    (`.permute(1, 2, 0)` gives that back without a copy). Raises OSError when it cannot be read."""
    data = read(path)
    count = pixels(data) if DECODE is not None and not deep_png(data) else None
    if count is not None:
        # Pillow's own threshold for refusing outright; MAX_IMAGE_PIXELS = None turns the check off, as there.
        if Image.MAX_IMAGE_PIXELS and count > 2 * Image.MAX_IMAGE_PIXELS:
            raise OSError(f"{count} pixels, more than Pillow opens safely (a decompression bomb?)")
        try:
            return DECODE(torch.frombuffer(data, dtype=torch.uint8), RGB, False)  # type: ignore[misc]
        except RuntimeError:
            pass  # a variant torchvision.io does not decode (or a corrupt file): Pillow has the last word
    return _pillow(Path(path))


WIDE_GRAY = {"I;16", "I;16L", "I;16B", "I;16N", "I"}  # 16-bit grayscale (and 32-bit "I", read as 16-bit values)


def _pillow(path: Path) -> torch.Tensor:
    try:
        with Image.open(path) as image:
            if image.mode in WIDE_GRAY:
                # Pillow's convert("RGB") clips these at 255 (value 40000 of 65535 came out white): scale instead.
                wide = numpy.asarray(image).astype(numpy.int64)
                gray = numpy.clip((wide + 128) // 257, 0, 255).astype(numpy.uint8)
                return torch.from_numpy(numpy.ascontiguousarray(numpy.stack([gray] * 3, axis=-1))).permute(2, 0, 1)
            return functional.pil_to_tensor(image.convert("RGB"))
    except Image.DecompressionBombError as exc:  # not an OSError: without this it would end the run
        raise OSError(str(exc)) from None


def load_rgb_sized(path: Path | str, size: tuple[int, int]) -> torch.Tensor:
    """load_rgb, resized (bilinear, antialiased as Pillow's) only when it is not `size` (height, width)."""
    image = load_rgb(path)
    if tuple(image.shape[1:]) != size:  # resizing costs as much as decoding: only when needed
        image = functional.resize(image, list(size), antialias=True)
    return image

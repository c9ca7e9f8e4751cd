"""trainer.data.decode: torchvision.io for PNG and JPEG, Pillow for the rest, the same pixels either way."""

from pathlib import Path

import numpy
import pytest
import torch
from PIL import Image
from torchvision.transforms.functional import pil_to_tensor

from trainer.data import decode
from trainer.data.checks import BadImages
from trainer.tasks._pix2pix_nn import PairsDataset


def picture(path: Path, mode: str = "RGB", **options: object) -> Path:
    rng = numpy.random.default_rng(0)
    if mode == "I;16":
        image = Image.fromarray(rng.integers(0, 65536, (40, 50), dtype=numpy.uint16))
    else:
        image = Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=numpy.uint8)).convert(mode)
    image.save(path, **options)
    return path


def pillow(path: Path) -> torch.Tensor:
    """Pillow's RGB; for 16 bits a channel, its values scaled to 8 bits (its convert("RGB") clips at 255)."""
    with Image.open(path) as image:
        if image.mode.startswith("I"):
            gray = torch.from_numpy(numpy.asarray(image).astype(numpy.int64))
            return ((gray + 128) // 257).clamp(0, 255).to(torch.uint8).expand(3, -1, -1)
        return pil_to_tensor(image.convert("RGB"))


CASES = [
    ("a.png", "RGB", {}),
    ("a.jpg", "RGB", {"quality": 90}),
    ("p.jpg", "RGB", {"quality": 90, "progressive": True}),
    ("gray.png", "L", {}),
    ("gray.jpg", "L", {}),
    ("alpha.png", "RGBA", {}),
    ("palette.png", "P", {}),
    ("bits.png", "1", {}),
    ("cmyk.jpg", "CMYK", {}),
    ("a.bmp", "RGB", {}),
    ("a.tiff", "RGB", {}),
    ("deep.png", "I;16", {}),  # 16 bits a channel: torchvision.io would give uint16
]


@pytest.mark.parametrize(("name", "mode", "options"), CASES, ids=[c[0] for c in CASES])
def test_the_pixels_are_pillows(name: str, mode: str, options: dict[str, object], tmp_path: Path) -> None:
    path = picture(tmp_path / name, mode, **options)
    image = decode.load_rgb(path)
    assert image.dtype == torch.uint8 and image.shape == (3, 40, 50)
    assert torch.equal(image, pillow(path))


@pytest.mark.parametrize(
    ("mode", "values", "expected"),
    [
        ("I;16", [0, 257, 40000, 65535], [0, 1, 156, 255]),  # a 16-bit grayscale PNG
        ("I", [0, 257, 40000, 65535], [0, 1, 156, 255]),  # the same as 32-bit integers (TIFF)
        ("L", [0, 1, 156, 255], [0, 1, 156, 255]),
    ],
)
def test_wide_grayscale_is_scaled_not_clipped(
    mode: str, values: list[int], expected: list[int], tmp_path: Path
) -> None:
    """Known pixel values through every grayscale width the decoder takes (Pillow's convert("RGB") clipped
    16-bit values at 255: 99.6% of a full gradient came out white)."""
    dtype = {"I;16": numpy.uint16, "I": numpy.int32, "L": numpy.uint8}[mode]
    path = tmp_path / ("g.tiff" if mode == "I" else "g.png")
    image = Image.fromarray(numpy.array([values], dtype=dtype))
    assert image.mode == mode
    image.save(path)
    image = decode.load_rgb(path)
    assert image.dtype == torch.uint8 and image.shape == (3, 1, 4)
    assert image.tolist() == [[expected]] * 3


def test_png_and_jpeg_do_not_go_through_pillow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path) -> torch.Tensor:
        raise AssertionError(f"Pillow decoded {path}")

    monkeypatch.setattr(decode, "_pillow", refuse)
    for name in ("a.png", "a.jpg"):
        assert decode.load_rgb(picture(tmp_path / name)).shape == (3, 40, 50)
    with pytest.raises(AssertionError, match="Pillow decoded"):  # the fallback is Pillow's
        decode.load_rgb(picture(tmp_path / "a.bmp"))


@pytest.mark.parametrize("options", [{}, {"progressive": True}])
def test_the_header_gives_the_size(options: dict[str, object], tmp_path: Path) -> None:
    assert decode.pixels(picture(tmp_path / "a.jpg", **options).read_bytes()) == 40 * 50
    assert decode.pixels(picture(tmp_path / "a.png").read_bytes()) == 40 * 50
    assert decode.pixels(picture(tmp_path / "a.bmp").read_bytes()) is None
    assert decode.pixels(b"\xff\xd8\xff") is None  # a torn header: Pillow decides


@pytest.mark.parametrize("suffix", ["png", "jpg"])
def test_a_decompression_bomb_is_refused_before_decoding(suffix: str, tmp_path: Path) -> None:
    path = tmp_path / f"bomb.{suffix}"
    Image.new("1" if suffix == "png" else "L", (20000, 20000)).save(path)
    with pytest.raises(OSError, match="400000000 pixels, more than Pillow opens safely"):
        decode.load_rgb(path)


def test_no_pillow_limit_means_no_bomb_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # how a user turns Pillow's check off
    assert decode.load_rgb(picture(tmp_path / "a.png")).shape == (3, 40, 50)


def test_a_short_read_is_read_to_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = picture(tmp_path / "a.png")
    real = open

    class Trickle:  # returns at most 7 bytes a read, as a network filesystem may
        def __init__(self, f):  # type: ignore[no-untyped-def]
            self.f = f

        def __enter__(self):  # type: ignore[no-untyped-def]
            return self

        def __exit__(self, *exc):  # type: ignore[no-untyped-def]
            self.f.close()

        def fileno(self) -> int:
            return self.f.fileno()

        def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
            return self.f.readinto(buffer[:7])

    monkeypatch.setattr("builtins.open", lambda *a, **k: Trickle(real(*a, **k)))
    assert decode.read(path) == path.read_bytes()


def test_a_bomb_in_a_format_pillow_decodes_is_an_os_error(tmp_path: Path) -> None:
    path = tmp_path / "bomb.tiff"
    Image.new("1", (20000, 20000)).save(path, compression="group4")
    with pytest.raises(OSError, match="decompression bomb"):
        decode.load_rgb(path)


def test_unreadable_files_are_os_errors(tmp_path: Path) -> None:
    (tmp_path / "text.jpg").write_text("not a jpeg")
    (tmp_path / "torn.png").write_bytes(picture(tmp_path / "a.png").read_bytes()[:100])
    for name in ("text.jpg", "torn.png", "missing.png"):
        with pytest.raises(OSError):
            decode.load_rgb(tmp_path / name)


def test_a_bomb_met_in_training_is_skipped_under_bad_images_skip(tmp_path: Path) -> None:
    good = picture(tmp_path / "good.png")
    Image.new("1", (20000, 20000)).save(tmp_path / "bomb.png")
    columns = numpy.array([b"bomb.png", b"good.png"]), numpy.array([b"good.png", b"good.png"])
    dataset = PairsDataset(str(tmp_path), *columns, 32, BadImages(str(tmp_path / "skipped"), skip=True))
    assert dataset[0].shape == (2, 32, 32, 3)  # the next readable pair, resized
    assert (tmp_path / "skipped").is_dir() and good.exists()

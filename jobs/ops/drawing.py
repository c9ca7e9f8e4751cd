"""jobs.picture's drawing: a run's curves, its newest image grid and its goodput ledger, read from its own
TensorBoard event files and records, drawn with Pillow into one image (no plotting library; no torch)."""

import io
import math
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from trainer.errors import UserError
from trainer.run import ledger
from trainer.run.rundir import RunDir

IMAGE_TAG = "images/input_target_output"
MAX_CHARTS = 8
COLUMNS = 2
PANEL = (480, 280)  # one chart, its title and axes included
HEADER = 40
IMAGE_BAND = 420  # the image grid's height below the charts, its caption included
MARGIN = {"left": 78, "right": 20, "top": 34, "bottom": 46}  # a chart's plot area inside its panel
BACKGROUND, INK, GRID, LINE = (255, 255, 255), (40, 40, 40), (225, 225, 225), (31, 119, 180)
LEDGER_BAND = 70  # the stacked bar of the ledger and its legend, below the header
PART_COLOURS = dict(
    zip(ledger.PARTS, [(188, 189, 34), (255, 127, 14), (44, 160, 44), (31, 119, 180), (148, 103, 189),
                       (214, 39, 40), (140, 86, 75)], strict=True)
)  # fmt: skip
Font = ImageFont.ImageFont | ImageFont.FreeTypeFont


@dataclass(frozen=True)
class Picture:
    """What is drawn: each curve as (step, value) pairs by tag, and the newest image grid with its step."""

    name: str
    curves: dict[str, list[tuple[int, float]]]
    image: Image.Image | None
    image_step: int | None
    ledger: dict[str, float] | None = None  # trainer.run.ledger's parts, when the run has attempts


def chart_tags(tags: list[str]) -> list[str]:
    """The curves drawn, in order: the losses (the trainer's train/loss first), the trainer's validation metrics,
    the learning rate; a script's other scalars only when it logs none of these. At most MAX_CHARTS."""
    names = {t: t.rpartition("/")[2].lower() for t in tags}
    losses = sorted((t for t in tags if "loss" in names[t]), key=lambda t: (t != "train/loss", t))
    val = sorted(t for t in tags if t.startswith("val/") and t not in losses)
    rates = sorted(t for t in tags if names[t] in ("lr", "learning_rate") or names[t].startswith("lr-"))
    return ([*losses, *val, *rates] or sorted(tags))[:MAX_CHARTS]


def load(run_dir: Path) -> Picture:
    """Read the run's event files (every attempt's, wherever under the run they are) into curves and its newest
    image grid."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a directory; give a run directory printed by python -m jobs.submit")
    files = RunDir(run_dir).event_files()
    if not files:
        raise UserError(
            f"{run_dir} holds no TensorBoard event files (looked for regular files events.out.tfevents.* in it and "
            "every folder under it, links not followed); the trainer writes them once it has logged a step "
            "(log.every), a script when it writes them under $RUN_DIR itself (SummaryWriter)"
        )
    scalars: dict[str, dict[int, float]] = {}
    newest = None
    for file in files:  # oldest first: a step logged twice is the later attempt's
        accumulator = ea.EventAccumulator(str(file), size_guidance={ea.SCALARS: 0, ea.IMAGES: 1})
        accumulator.Reload()
        tags = accumulator.Tags()
        for tag in tags.get(ea.SCALARS, []):
            scalars.setdefault(tag, {}).update((e.step, e.value) for e in accumulator.Scalars(tag))
        if IMAGE_TAG in tags.get(ea.IMAGES, []):
            image = max(accumulator.Images(IMAGE_TAG), key=lambda e: e.step)
            newest = image if newest is None or image.step >= newest.step else newest
    curves = {tag: sorted(scalars[tag].items()) for tag in chart_tags(list(scalars))}
    if not curves and newest is None:
        where = ", ".join(sorted({str(file.parent) for file in files}))
        raise UserError(f"the event files in {where} hold no scalars and no {IMAGE_TAG}; nothing to draw")
    image = None if newest is None else Image.open(io.BytesIO(newest.encoded_image_string)).convert("RGB")
    parts = ledger.read(run_dir, "")  # a snapshot: up to the last recorded moment
    return Picture(run_dir.resolve().name, curves, image, None if newest is None else newest.step, parts)


def size(charts: int, image: bool, bar: bool = False) -> tuple[int, int]:
    """The picture's width and height for this many charts, with or without the image grid and ledger bar."""
    rows = math.ceil(charts / COLUMNS)
    return COLUMNS * PANEL[0], HEADER + (LEDGER_BAND if bar else 0) + rows * PANEL[1] + (IMAGE_BAND if image else 0)


def draw_ledger(canvas: Image.Image, top: int, parts: dict[str, float]) -> None:
    """One bar as wide as the picture, a segment per part of the wall time, and a legend of the parts shown."""
    draw, small = ImageDraw.Draw(canvas), font(11)
    left, right = 16, canvas.width - 16
    wall = parts.get("wall") or 0.0
    title = f"where the wall time went: {ledger.line(parts)}" if wall > 0 else "where the wall time went: -"
    draw.text((left, top), title, fill=INK, font=font(13))
    x, legend = float(left), left
    for part in ledger.PARTS:
        seconds = parts.get(part) or 0.0
        if wall <= 0 or seconds <= 0:
            continue
        width = seconds / wall * (right - left)
        draw.rectangle((x, top + 20, x + width, top + 40), fill=PART_COLOURS[part])
        x += width
        draw.rectangle((legend, top + 48, legend + 10, top + 58), fill=PART_COLOURS[part])
        text = f"{part} {ledger.seconds_text(seconds)}"
        draw.text((legend + 14, top + 47), text, fill=INK, font=small)
        legend += 24 + int(draw.textlength(text, font=small))
    draw.rectangle((left, top + 20, right, top + 40), outline=INK)


def font(points: int) -> Font:
    try:
        return ImageFont.load_default(size=points)
    except TypeError:  # Pillow before 10.1: the bitmap font, one size
        return ImageFont.load_default()


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` round values (1, 2 or 5 times a power of ten apart) from lo to hi."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / (count - 1)
    power = 10 ** math.floor(math.log10(raw))
    spacing = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))
    first = math.ceil(lo / spacing - 1e-6) * spacing  # tolerances: floating point must not drop an end tick
    return [first + i * spacing for i in range(int((hi - first) / spacing + 1e-6) + 1)]


def draw_chart(canvas: Image.Image, origin: tuple[int, int], tag: str, points: list[tuple[int, float]]) -> None:
    """One line chart in the panel at `origin`: title, frame, grid, ticks, axis labels, the curve."""
    draw, small, label = ImageDraw.Draw(canvas), font(11), font(13)
    x0, y0 = origin[0] + MARGIN["left"], origin[1] + MARGIN["top"]
    x1, y1 = origin[0] + PANEL[0] - MARGIN["right"], origin[1] + PANEL[1] - MARGIN["bottom"]
    finite = [(s, v) for s, v in points if math.isfinite(v)]
    last = f" (last {points[-1][1]:.3g} at step {points[-1][0]})" if points else ""
    draw.text((x0, origin[1] + 8), tag + last, fill=INK, font=label)
    draw.rectangle((x0, y0, x1, y1), outline=INK)
    if not finite:
        draw.text((x0 + 10, y0 + 10), "no finite values", fill=INK, font=small)
        return
    steps, values = [s for s, _ in finite], [v for _, v in finite]
    s_lo, s_hi = min(steps), max(steps)
    v_lo, v_hi = min(values), max(values)
    pad = (v_hi - v_lo) * 0.05 or abs(v_hi) * 0.05 or 1.0
    v_lo, v_hi = v_lo - pad, v_hi + pad
    s_span = (s_hi - s_lo) or 1

    def at(step: float, value: float) -> tuple[float, float]:
        return x0 + (step - s_lo) / s_span * (x1 - x0), y1 - (value - v_lo) / (v_hi - v_lo) * (y1 - y0)

    for value in ticks(v_lo, v_hi):  # value grid lines and their labels
        y = at(s_lo, value)[1]
        draw.line((x0 + 1, y, x1 - 1, y), fill=GRID)
        draw.line((x0 - 4, y, x0, y), fill=INK)
        draw.text((x0 - 6, y), f"{value:.3g}", fill=INK, font=small, anchor="rm")
    for step in ticks(s_lo, s_hi):
        x = at(step, v_lo)[0]
        draw.line((x, y1, x, y1 + 4), fill=INK)
        draw.text((x, y1 + 6), f"{step:.3g}" if step < 1e5 else f"{step:.2g}", fill=INK, font=small, anchor="ma")
    draw.text(((x0 + x1) / 2, y1 + 24), "step", fill=INK, font=label, anchor="ma")
    vertical(canvas, tag.rpartition("/")[2], (origin[0] + 4, (y0 + y1) // 2), label)
    xy = [at(s, v) for s, v in finite]
    if len(xy) == 1:
        draw.ellipse((xy[0][0] - 3, xy[0][1] - 3, xy[0][0] + 3, xy[0][1] + 3), fill=LINE)
    else:
        draw.line(xy, fill=LINE, width=2)


def vertical(canvas: Image.Image, text: str, left_middle: tuple[int, int], face: Font) -> None:
    """The y axis's label, written bottom to top."""
    box = ImageDraw.Draw(canvas).textbbox((0, 0), text, font=face)
    strip = Image.new("RGB", (box[2] + 2, box[3] + 2), BACKGROUND)
    ImageDraw.Draw(strip).text((0, 0), text, fill=INK, font=face)
    strip = strip.rotate(90, expand=True)
    canvas.paste(strip, (left_middle[0], left_middle[1] - strip.height // 2))


def draw(picture: Picture) -> Image.Image:
    """The whole picture: a header, the charts two to a row, the image grid below them."""
    width, height = size(len(picture.curves), picture.image is not None, picture.ledger is not None)
    canvas = Image.new("RGB", (width, height), BACKGROUND)
    ImageDraw.Draw(canvas).text((16, 12), f"run {picture.name}", fill=INK, font=font(16))
    charts = HEADER
    if picture.ledger is not None:
        draw_ledger(canvas, HEADER, picture.ledger)
        charts += LEDGER_BAND
    for i, (tag, points) in enumerate(picture.curves.items()):
        row, column = divmod(i, COLUMNS)
        draw_chart(canvas, (column * PANEL[0], charts + row * PANEL[1]), tag, points)
    if picture.image is not None:
        top = height - IMAGE_BAND
        caption = f"{IMAGE_TAG} at step {picture.image_step}: each row input, target, output"
        ImageDraw.Draw(canvas).text((width // 2, top + 8), caption, fill=INK, font=font(13), anchor="ma")
        room = (width - 32, IMAGE_BAND - 44)
        grid = picture.image
        scale = min(room[0] / grid.width, room[1] / grid.height)
        # Enlarged by whole pixels where it can be (a sharp grid), else smoothly to fill the band.
        whole = scale >= 2
        scale = math.floor(scale) if whole else scale
        new_size = (max(1, round(grid.width * scale)), max(1, round(grid.height * scale)))
        grid = grid.resize(new_size, Image.Resampling.NEAREST if whole else Image.Resampling.LANCZOS)
        canvas.paste(grid, ((width - grid.width) // 2, top + 32))
    return canvas

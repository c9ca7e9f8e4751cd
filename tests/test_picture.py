"""`python -m jobs.picture`: a run's curves and newest image grid in one PNG, from its own event files."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.utils.tensorboard import SummaryWriter

from jobs import picture
from jobs.ops import drawing
from tests.messages import Golden, refused
from tests.support import ROOT, TIMELINE
from trainer.run import ledger


def fake_run(folder: Path, val: bool = True) -> Path:
    """A run directory whose event file holds a few scalars and one image grid, as the trainer logs them."""
    writer = SummaryWriter(str(folder / "tensorboard"))
    for step in (10, 20, 30):
        writer.add_scalar("train/loss", 1.0 / step, step)
        writer.add_scalar("train/lr", 2e-3, step)
        if val:
            writer.add_scalar("val/l1", 0.5 / step, step)
    writer.add_image("images/input_target_output", torch.rand(3, 40, 30), 30)
    writer.close()
    return folder


@pytest.mark.parametrize(("val", "charts"), [(True, 3), (False, 2)])
def test_a_picture_of_a_run_has_a_chart_per_curve_and_the_image_grid(tmp_path: Path, val: bool, charts: int) -> None:
    run = fake_run(tmp_path / "run", val)
    loaded = drawing.load(run)
    assert list(loaded.curves) == ["train/loss", *(["val/l1"] if val else []), "train/lr"]
    assert loaded.curves["train/loss"] == [
        (10, pytest.approx(0.1)),
        (20, pytest.approx(0.05)),
        (30, pytest.approx(1 / 30)),
    ]
    assert (loaded.image.size, loaded.image_step) == ((30, 40), 30)  # type: ignore[union-attr]
    output = tmp_path / "out.png"
    assert picture.main([str(run), "-o", str(output)]) == 0
    with Image.open(output) as image:
        rows = -(-charts // drawing.COLUMNS)
        assert (image.format, image.size) == ("PNG", (960, 40 + rows * 280 + 420))
        assert image.convert("L").getextrema()[0] < 100  # drawn on, not a blank canvas


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for target, said in ((tmp_path / "nowhere", "is not a directory"), (tmp_path / "empty", "no TensorBoard event")):
        cmd = [sys.executable, "-m", "jobs.picture", str(target)]
        result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and result.stderr.startswith("error: ") and said in result.stderr
        assert result.stderr.count("\n") == 1 and not (target / "picture.png").exists()


def test_a_run_with_attempts_gets_its_ledger_as_one_stacked_bar(tmp_path: Path) -> None:
    """The goodput ledger (tests/test_ledger.py's timeline: 70 s queued of 344) as a band under the header:
    each part's colour across its share of the width."""
    run = fake_run(tmp_path / "run")
    (run / "attempts.json").write_text(json.dumps(TIMELINE))
    (run / "provenance").mkdir()
    (run / "provenance" / "submit.json").write_text(json.dumps({"time": 0.0}))
    (run / "summary.json").write_text(
        json.dumps({"final_step": 48, "ledger": ledger.ledger(0.0, TIMELINE, 344.0, ranks=4)})
    )
    output = tmp_path / "out.png"
    assert picture.main([str(run), "-o", str(output)]) == 0
    with Image.open(output) as image:
        assert image.size == (960, 40 + drawing.LEDGER_BAND + 2 * 280 + 420)
        bar = image.convert("RGB")
        y, left, right = 40 + 30, 16, 960 - 16
        queued_end = left + 70 / 344 * (right - left)
        assert bar.getpixel((left + 5, y)) == drawing.PART_COLOURS["queued"]
        assert bar.getpixel((int(queued_end) + 5, y)) == drawing.PART_COLOURS["starting"]
        assert drawing.PART_COLOURS["training"] in {bar.getpixel((x, y)) for x in range(left, right)}


def script_events(folder: Path, written_at: int, values: dict[str, list[tuple[int, float]]]) -> Path:
    """One event file of a script's, as SummaryWriter names it, written at `written_at` (the name's seconds)."""
    with SummaryWriter(str(folder)) as writer:
        for tag, points in values.items():
            for step, value in points:
                writer.add_scalar(tag, value, step)
    [written] = folder.glob("events.out.tfevents.*")
    return written.rename(folder / f"events.out.tfevents.{written_at}.host.{written_at}.0")


def test_a_scripts_own_event_files_anywhere_under_the_run_are_drawn(tmp_path: Path) -> None:
    """A Trainer-like script: a folder of events per attempt under code/runs/ (where it ran), its losses and
    learning rate drawn, the later attempt's value at a step logged twice; its throughput is not drawn."""
    run = tmp_path / "run"
    hf = {"train/loss": [(10, 2.0), (20, 1.5)], "train/learning_rate": [(10, 1e-3), (20, 9e-4)]}
    script_events(run / "code" / "runs" / "Nov28_a", 100, hf | {"train/samples_per_second": [(20, 9.0)]})
    script_events(
        run / "code" / "runs" / "Nov28_b", 200, {"train/loss": [(20, 1.4), (30, 1.2)], "eval/loss": [(30, 1.3)]}
    )
    (run / "command.json").write_text("[]")
    loaded = drawing.load(run)
    assert list(loaded.curves) == ["train/loss", "eval/loss", "train/learning_rate"]
    assert loaded.curves["train/loss"] == [(10, 2.0), (20, pytest.approx(1.4)), (30, pytest.approx(1.2))]
    assert picture.main([str(run), "-o", str(tmp_path / "out.png")]) == 0


def test_a_scripts_other_scalars_are_drawn_when_it_logs_no_loss(tmp_path: Path) -> None:
    run = tmp_path / "run"
    script_events(run / "tb", 100, {"accuracy": [(1, 0.5), (2, 0.75)], "reward/mean": [(1, 3.0)]})
    assert list(drawing.load(run).curves) == ["accuracy", "reward/mean"]


def test_event_files_are_read_from_the_run_only_never_through_a_link(tmp_path: Path) -> None:
    """Links in the run folder, to a folder and to a file of events outside, are not followed: only the
    run's own regular files are drawn."""
    outside = tmp_path / "outside"
    elsewhere = script_events(outside, 100, {"elsewhere/loss": [(1, 9.0)]})
    run = tmp_path / "run"
    script_events(run / "tb", 200, {"loss": [(1, 1.0)]})
    (run / "linked").symlink_to(outside, target_is_directory=True)
    (run / "tb" / "events.out.tfevents.300.host.1.0").symlink_to(elsewhere)
    assert list(drawing.load(run).curves) == ["loss"]


def test_a_run_without_event_files_is_refused_naming_where_it_looked(golden: Golden, tmp_path: Path) -> None:
    """A script run that wrote no events (one link to events outside): one line naming the run and how it
    looked, exit 2, no picture."""
    outside = script_events(tmp_path / "outside", 100, {"loss": [(1, 1.0)]})
    run = tmp_path / "run"
    (run / "tb").mkdir(parents=True)
    (run / "tb" / outside.name).symlink_to(outside)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "jobs.picture", str(run)]
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    refused(result, golden, str(run), "events.out.tfevents.*", "links not followed")
    assert not (run / "picture.png").exists()

"""Checkpoints that cannot be clobbered: pruning counts only good ones, unloadable ones are skipped, modes."""

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.messages import Golden, raises
from tests.support import state
from trainer import checkpoint
from trainer.data.order import TrainOrder, go_on_with, saved_fingerprint
from trainer.run import atomic


def load(folder: Path) -> tuple[dict[str, object], Path]:
    loaded = checkpoint.load_latest(folder, torch.device("cpu"))
    assert loaded is not None
    return loaded


def test_torn_files_do_not_count_towards_keep(tmp_path: Path) -> None:
    checkpoint.Writer(background=False).save(tmp_path, 10, state(10), keep=1)
    # A run killed between a checkpoint and its checksum, twice: then resumed from step 10.
    for step in (30, 40):
        (tmp_path / f"step_{step:08d}.pt").write_bytes(b"torn")
    checkpoint.Writer(background=False).save(tmp_path, 20, state(20), keep=1)
    assert load(tmp_path)[1].name == "step_00000020.pt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000020.pt", "step_00000020.pt.sha256"]


def test_newer_checkpoints_with_a_checksum_are_neither_counted_nor_deleted(tmp_path: Path) -> None:
    checkpoint.Writer(background=False).save(tmp_path, 40, state(40), keep=1)
    (tmp_path / "step_00000040.pt").write_bytes(b"rotted")  # skipped at resume; not ours to destroy
    checkpoint.Writer(background=False).save(tmp_path, 10, state(10), keep=1)
    checkpoint.Writer(background=False).save(tmp_path, 20, state(20), keep=1)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["step_00000020.pt", "step_00000020.pt.sha256", "step_00000040.pt", "step_00000040.pt.sha256"]
    assert load(tmp_path)[1].name == "step_00000020.pt"


def test_temporaries_of_killed_writes_are_removed(tmp_path: Path) -> None:
    leftovers = [tmp_path / ".step_00000030.pt.k2j4h1.tmp", tmp_path / ".step_00000030.pt.sha256.a8d0s_.tmp"]
    for path in leftovers:
        path.write_bytes(b"half a checkpoint")
    (tmp_path / "notes.txt").write_text("mine")
    checkpoint.Writer(background=False).save(tmp_path, 10, state(10), keep=2)
    assert not any(path.exists() for path in leftovers)
    assert (tmp_path / "notes.txt").exists()


class Arbitrary:
    """Unpickling this would run the code of a class: the safe loader refuses it."""


@pytest.mark.parametrize(
    ("newest", "reason"),
    [
        ({**state(20), "extra": Arbitrary()}, "Python objects other than tensors"),
        ({"w": torch.zeros(3)}, "lacks model, optimizer, scheduler, scaler, progress, rng"),
        ({**state(20), "progress": {"step": 20}}, "lacks progress.epoch, progress.batch_in_epoch"),
        ([1, 2], "holds a list"),
    ],
    ids=["pickled-class", "wrong-keys", "wrong-progress", "not-a-dict"],
)
def test_a_checkpoint_that_does_not_load_is_skipped(
    newest: object, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint.Writer(background=False).save(tmp_path, 10, state(10), keep=3)
    checkpoint.Writer(background=False).save(tmp_path, 20, newest, keep=3)  # type: ignore[arg-type]
    loaded, path = load(tmp_path)
    assert path.name == "step_00000010.pt" and loaded["progress"] == state(10)["progress"]
    err = capsys.readouterr().err
    assert err.startswith(f"warning: skipping checkpoint {tmp_path / 'step_00000020.pt'}: ") and reason in err
    assert err.count("\n") == 1
    assert "weights_only" not in err  # torch's own advice would run whatever code the file holds


def test_no_usable_checkpoint_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint.Writer(background=False).save(tmp_path, 10, {"w": torch.zeros(3)}, keep=3)
    assert checkpoint.load_latest(tmp_path, torch.device("cpu")) is None
    assert "no usable checkpoint" in capsys.readouterr().err


@pytest.fixture
def umask() -> Iterator[None]:
    saved = os.umask(0o022)
    os.umask(saved)
    yield
    os.umask(saved)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_respect_the_umask(mask: int, mode: int, tmp_path: Path, umask: None) -> None:
    os.umask(mask)
    atomic.write_text(tmp_path / "progress.json", "{}")
    checkpoint.Writer(background=False).save(tmp_path / "checkpoints", 5, state(5), keep=1)
    for path in (tmp_path / "progress.json", *(tmp_path / "checkpoints").iterdir()):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path
    assert atomic.current_umask() == mask  # read, not changed


def test_a_file_written_not_durable_is_whole_but_never_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """progress.json, rewritten each log interval on the step's path: atomic, without the two fsyncs (on one
    H100 they were 300 us of each interval's 522)."""
    synced: list[int] = []
    monkeypatch.setattr(atomic.os, "fsync", synced.append)
    atomic.write_text(tmp_path / "progress.json", '{"step": 1}', durable=False)
    assert (tmp_path / "progress.json").read_text() == '{"step": 1}' and synced == []
    assert [p.name for p in tmp_path.iterdir()] == ["progress.json"]  # no temporary file left
    atomic.write_text(tmp_path / "summary.json", "{}")
    assert len(synced) == 2  # the file, then its folder's entry


def order(samples: int = 90, world: int = 2, seed: int = 0) -> TrainOrder:
    order = TrainOrder(samples, 4 * world, world, 0, seed)
    order.given_micro_batch = 4
    return order


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({}, False),
        ({"world": 1}, False),  # fewer processes: two micro-batches a step
        ({"samples": 80}, True),
        ({"files": "other"}, True),  # as many samples, other files
        ({"seed": 1}, True),
    ],
    ids=["same", "fewer-processes", "fewer-samples", "other-files", "other-seed"],
)
def test_a_checkpoint_goes_on_on_any_number_of_processes_but_not_on_other_data(
    golden: Golden, change: dict[str, object], refused: bool
) -> None:
    """Saved by 2 processes on 90 samples: any number that shares the global batch goes on with its order;
    other data or another seed ends the run in one line, unless data.allow_change says go on."""
    saved = order().fingerprint("files", 2)
    source = Path("/runs/run/checkpoints/step_00000010.pt")
    now = order(int(change.get("samples", 90)), int(change.get("world", 2)), int(change.get("seed", 0)))
    files = str(change.get("files", "files"))
    if not refused:
        assert go_on_with(now, saved, files, source, allow=False) == ""
        assert (now.global_batch, now.padding, now.accumulation) == (8, 2, 2 // int(change.get("world", 2)))
        return
    with raises(golden, str(source)):
        go_on_with(now, saved, files, source, allow=False)
    assert "going on, as data.allow_change=true says" in go_on_with(now, saved, files, source, allow=True)


def test_a_checkpoint_from_before_fingerprints_reads_as_distributed_samplers_run() -> None:
    """No "data": DistributedSampler's order on as many processes as it holds random streams, unseeded."""
    saved = saved_fingerprint({**state(10), "rng": [torch.zeros(1)] * 2}, order(world=1))
    assert (saved["global_batch"], saved["padding"], saved["streams"]) == (8, 2, False)

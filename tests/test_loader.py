"""trainer/loader.py: the same batches as torch's DataLoader, buffers reused only when free, errors told."""

import collections
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from tests.conftest import ROOT, poll, process_start
from trainer.config import build_config
from trainer.data import close, make_loader
from trainer.distenv import DistEnv
from trainer.errors import UserError
from trainer.loader import SharedLoader
from trainer.tasks._pix2pix_nn import PairsDataset
from trainer.tasks.pix2pix import read_pairs


class Numbers(Dataset[tuple[torch.Tensor, int]]):
    """Sample i: a (2, 3) tensor of i and the label i % 3; a random draw when `noisy` (seeded per batch)."""

    def __init__(self, count: int = 20, noisy: bool = False) -> None:
        self.count, self.noisy = count, noisy

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        values = torch.full((2, 3), float(index))
        if self.noisy:
            values += torch.rand(2, 3)
        return values, index % 3


def batches(loader: object) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]  # type: ignore[attr-defined]


@pytest.mark.parametrize("drop_last", [True, False])
def test_the_batches_are_dataloaders(drop_last: bool) -> None:
    order = list(range(19, -1, -1))
    ours = SharedLoader(Numbers(), order, batch_size=6, workers=2, drop_last=drop_last)
    theirs = DataLoader(Numbers(), batch_size=6, sampler=order, drop_last=drop_last)
    try:
        for _ in range(2):  # a second epoch reuses the workers and buffers
            got, want = batches(ours), batches(theirs)
            assert len(got) == len(want) == len(ours) == (3 if drop_last else 4)
            for (x, y), (wx, wy) in zip(got, want, strict=True):
                assert torch.equal(x, wx) and torch.equal(y, wy) and y.dtype == wy.dtype == torch.int64
        assert type(next(iter(ours))) is type(next(iter(theirs))) is list  # a tuple sample collates to a list
    finally:
        ours.close()


def test_a_batch_kept_is_not_overwritten_and_an_epoch_left_early_gives_its_buffers_back() -> None:
    loader = SharedLoader(Numbers(40), range(40), batch_size=2, workers=2, drop_last=True)
    try:
        it = iter(loader)
        kept = next(it)[0][1]  # a view of sample 1: it alone keeps the first batch's buffer busy
        for _ in range(5):
            next(it)  # leaves the epoch early, batches in flight: they come back at the next epoch
        del it
        for _ in range(3):  # every buffer reused many times
            assert [int(x[0, 0, 0]) for x, _ in loader] == list(range(0, 40, 2))
        assert torch.equal(kept, torch.full((2, 3), 1.0))
        assert len(loader.free) == len(loader.buffers) - 1  # all but the kept view's
        del kept
        assert len(loader.free) == len(loader.buffers)
    finally:
        loader.close()


def test_a_loop_that_keeps_every_batch_is_told_how_to_fix_it() -> None:
    loader = SharedLoader(Numbers(40), range(40), batch_size=2, workers=1, drop_last=True)
    try:
        with pytest.raises(RuntimeError, match=r"holds all 4 of the data loader's batch buffers; keep a copy"):
            _ = list(loader)
    finally:
        loader.close()


def test_random_augmentations_follow_the_seed_not_the_workers() -> None:
    runs = []
    for workers in (1, 2, 1):
        torch.manual_seed(7)
        loader = SharedLoader(Numbers(12, noisy=True), range(12), batch_size=3, workers=workers, drop_last=True)
        runs.append(torch.cat([x for x, _ in batches(loader)]))
        loader.close()
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    torch.manual_seed(8)
    loader = SharedLoader(Numbers(12, noisy=True), range(12), batch_size=3, workers=2, drop_last=True)
    assert not torch.equal(runs[0], torch.cat([x for x, _ in batches(loader)]))
    loader.close()


class Failing(Numbers):
    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index == 5:
            raise UserError("cannot read image /data/5.png (truncated); fix or remove it")
        if index == 7:
            return torch.zeros(3, 3), 0  # not the first sample's shape
        if index == 9:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)


@pytest.mark.parametrize(
    ("first", "error", "message"),
    [
        (5, UserError, r"^cannot read image /data/5.png \(truncated\); fix or remove it"),
        (
            7,
            UserError,
            r"^sample 7 holds a torch.float32 tensor of shape \(3, 3\) where the first .* data.loader=torch",
        ),
        (9, RuntimeError, r"^a data loader worker died \(exit code -9\); if it was killed for lack of memory"),
    ],
)
def test_a_workers_failure_reaches_the_training_process(first: int, error: type, message: str) -> None:
    loader = SharedLoader(Failing(), [0, 1, first], batch_size=1, workers=2, drop_last=True)
    try:
        with pytest.raises(error, match=message) as caught:
            list(loader)
        assert "\n" not in str(caught.value)  # one line for error.txt
        if error is not RuntimeError:  # the worker's traceback comes along, for the task's log
            assert "in a data loader worker" in caught.value.__notes__[0]
    finally:
        loader.close()


def test_workers_stop_when_closed() -> None:
    loader = SharedLoader(Numbers(), range(20), batch_size=4, workers=2, drop_last=True)
    list(loader)
    processes = list(loader.processes)
    assert all(p.is_alive() for p in processes)
    loader.close()
    assert not any(p.is_alive() for p in processes)
    assert len(batches(loader)) == 5  # a closed loader starts new workers
    loader.close()


class InPlaceOnly(PairsDataset):
    """Its workers may only write in place: __getitem__ works in the training process alone (the first sample)."""

    fill = PairsDataset.fill  # defined beside __getitem__, so the loader may use it

    def __getitem__(self, index: int) -> torch.Tensor:
        assert os.getpid() == MAIN, "a worker called __getitem__"
        return super().__getitem__(index)


MAIN = os.getpid()


def test_pix2pix_pairs_written_in_place_are_the_datasets_samples(sample_root: Path) -> None:
    root = sample_root / "pix2pix"
    sources, targets = (numpy.array([p.encode() for p in c]) for c in read_pairs(root, "pairs.csv"))
    dataset = InPlaceOnly(str(root), sources[:8], targets[:8], 64)
    loader = SharedLoader(dataset, range(8), batch_size=4, workers=2, drop_last=True)
    try:
        got = torch.cat([batch.clone() for batch in loader])
    finally:
        loader.close()
    assert got.shape == (8, 2, 64, 64, 3)
    assert torch.equal(got, torch.stack([dataset[i] for i in range(8)]))


class Named(Numbers):
    def __getitem__(self, index: int) -> tuple[torch.Tensor, str]:  # type: ignore[override]
        return torch.zeros(2), f"sample {index}"


def test_samples_it_cannot_stack_go_to_torchs_dataloader(capsys: pytest.CaptureFixture[str]) -> None:
    env = DistEnv("single", 0, 0, 1, 1, 0, 1, "127.0.0.1", 0, None, cpus_per_task=2)
    config = build_config(["batch_size=4", "data.num_workers=1"])
    loader, _ = make_loader(Numbers(), config, env, torch.device("cpu"))
    assert isinstance(loader, SharedLoader)
    close(loader)
    loader, _ = make_loader(Named(), config, env, torch.device("cpu"))
    assert isinstance(loader, DataLoader)
    assert capsys.readouterr().out == (
        "data: a sample holds a str, which data.loader=shared cannot stack: torch's DataLoader loads them\n"
    )
    names = next(iter(loader))[1]
    assert len(names) == 4 and all(name.startswith("sample ") for name in names)


Point = collections.namedtuple("Point", ["x", "label"])


class Structured(Numbers):
    def __getitem__(self, index: int) -> dict[str, Any]:  # type: ignore[override]
        return {"point": Point(torch.full((2,), float(index)), index), "weight": 0.5 * index, "empty": torch.zeros(0)}


def test_dicts_namedtuples_floats_and_empty_tensors_collate_as_dataloaders() -> None:
    loader = SharedLoader(Structured(), range(8), batch_size=4, workers=1, drop_last=True)
    try:
        got, want = next(iter(loader)), next(iter(DataLoader(Structured(), batch_size=4, sampler=range(8))))
    finally:
        loader.close()
    assert isinstance(got["point"], Point) and got.keys() == want.keys()
    assert torch.equal(got["point"].x, want["point"].x) and torch.equal(got["point"].label, want["point"].label)
    assert torch.equal(got["weight"], want["weight"]) and got["weight"].dtype == torch.float64
    assert got["empty"].shape == want["empty"].shape == (4, 0)


def test_workers_end_when_the_training_process_is_killed(tmp_path: Path) -> None:
    script = (
        "import os, signal, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from tests.test_loader import Numbers\n"
        "from trainer.loader import SharedLoader\n"
        "loader = SharedLoader(Numbers(), range(20), batch_size=4, workers=2, drop_last=True)\n"
        "next(iter(loader))\n"
        "print(' '.join(str(p.pid) for p in loader.processes), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(ROOT)], capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr
    pids = [int(pid) for pid in result.stdout.split()]
    assert len(pids) == 2
    poll("the workers to end with the training process", lambda: not any(map(process_start, pids)), timeout=30)

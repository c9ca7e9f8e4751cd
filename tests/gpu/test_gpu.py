"""The GPU path, on a machine with CUDA (the `gpu` tier: `pytest -m gpu`); each test skips with its reason where
there is no CUDA device or too few. The ranks are forked (tests/ranks.py) as in the CPU tests: NCCL then joins
them, the trainer's device is cuda:LOCAL_RANK."""

from pathlib import Path

import pytest
import torch

from tests import ranks
from tests.support import summary

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
needs = {n: pytest.mark.skipif(GPUS < n, reason=f"needs {n} CUDA device(s), this machine has {GPUS}") for n in (1, 2)}
pytestmark = needs[1]


def args(sample_root: Path, *more: str) -> list[str]:
    base = [f"data.root={sample_root / 'pix2pix'}", "steps=12", "batch_size=4", "log.every=4", "log.image_every=0"]
    return [*base, "checkpoint.every=6", *more]


# Runs compared bit for bit: cuDNN's and cuBLAS's default kernels differ run to run on a GPU (seen on an H100:
# 12 steps of one seed, twice, gave two weights).
EXACT = ("deterministic=true",)


def test_an_nccl_group_of_one_all_reduces_on_the_gpu() -> None:
    import torch.distributed as dist

    from trainer.supervise.rendezvous import any_free_port

    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{any_free_port()}", rank=0, world_size=1)
    try:
        value = torch.ones(4, device="cuda")
        dist.all_reduce(value)
        assert dist.get_backend() == "nccl" and value.tolist() == [1.0] * 4
    finally:
        dist.destroy_process_group()


@needs[2]
def test_the_trainer_joins_an_nccl_group_of_two_gpus(sample_root: Path, tmp_path: Path) -> None:
    run = ranks.train(tmp_path / "run", *args(sample_root), world=2)
    assert summary(run.run_dir)["world_size"] == 2 and "process group formed: backend nccl" in run.log(0)


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_trains_to_a_finite_loss(sample_root: Path, tmp_path: Path, amp: str) -> None:
    """bf16 autocast, and fp16 with its GradScaler (the scaler's state is in the checkpoint)."""
    run = ranks.train(tmp_path / "run", *args(sample_root, f"amp={amp}"), world=1)
    loss = summary(run.run_dir)["final_loss"]
    assert loss is not None and loss == loss and loss < 10


def test_pinned_memory_loading_gives_the_same_weights_as_unpinned(sample_root: Path, tmp_path: Path) -> None:
    pinned = ranks.train(tmp_path / "pinned", *args(sample_root, "data.pin_memory=true", *EXACT), world=1).run_dir
    plain = ranks.train(tmp_path / "plain", *args(sample_root, "data.pin_memory=false", *EXACT), world=1).run_dir
    assert summary(pinned)["weights_sha256"] == summary(plain)["weights_sha256"]


def test_a_checkpoint_saved_on_gpu_resumes_to_the_same_weights(sample_root: Path, tmp_path: Path) -> None:
    """Resumed at step 6 of 12 from the uninterrupted run's own checkpoint: bit for bit (torch's deterministic
    kernels; without them two runs of one seed differ on an H100)."""
    more = ["seed=3", *EXACT]
    reference = ranks.train(tmp_path / "reference", *args(sample_root, *more), world=min(GPUS, 2)).run_dir
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    for path in (reference / "checkpoints").glob("step_00000006.pt*"):
        (resumed / "checkpoints" / path.name).write_bytes(path.read_bytes())
    run = ranks.train(resumed, *args(sample_root, *more), world=min(GPUS, 2))
    assert "resumed from" in run.log(0)
    assert summary(resumed)["weights_sha256"] == summary(reference)["weights_sha256"]


@needs[2]
def test_two_gpus_per_task_place_a_model_split_over_them(sample_root: Path, tmp_path: Path) -> None:
    """gpus_per_task: 2 with a task whose model() takes devices= (torch's DDP tutorial's ToyMpModel)."""
    task = tmp_path / "split.py"
    task.write_text(SPLIT)
    args = [f"task={task}:Split", "steps=4", "log.every=2", "batch_size=4"]
    run = ranks.train(tmp_path / "run", *args, world=1, env={"SLURM_DDP_GPUS_PER_TASK": "2"})
    assert summary(run.run_dir)["final_loss"] is not None


@needs[2]  # one rank has no all-reduce to time (on one H100 this test passed having checked nothing)
def test_the_straggler_timing_measures_nccl_all_reduces_on_the_device(sample_root: Path, tmp_path: Path) -> None:
    """log.stragglers on NCCL: CUDA events around each bucket; the weights are those of the timing off."""
    world = 2
    on = ranks.train(tmp_path / "on", *args(sample_root, "log.stragglers=true", *EXACT), world=world).run_dir
    off = ranks.train(tmp_path / "off", *args(sample_root, "log.stragglers=false", *EXACT), world=world).run_dir
    assert summary(on)["weights_sha256"] == summary(off)["weights_sha256"]


SPLIT = """
import torch
from torch import nn


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.randn(8)


class TwoParts(nn.Module):
    def __init__(self, devices):
        super().__init__()
        self.devices = devices
        self.a = nn.Linear(8, 8).to(devices[0])
        self.b = nn.Linear(8, 1).to(devices[1])

    def forward(self, x):
        return self.b(torch.relu(self.a(x.to(self.devices[0]))).to(self.devices[1]))


class Split:
    def dataset(self, config):
        return Data()

    def model(self, config, dataset, devices):
        return TwoParts(devices)

    def forward(self, model, batch):
        return model(batch).pow(2).mean(), {}
"""

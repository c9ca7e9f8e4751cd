"""Your own task by import path: README's example runs from a folder outside the project, and what is wrong
with a task reference is one line, exit 2, before anything is queued."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import ranks
from tests.messages import Golden
from tests.support import (
    AUGMENTED,
    EXACT,
    EXAMPLE,
    IN_CODE,
    NAN,
    ROOT,
    assert_refused,
    poll,
    run_dirs,
    submit,
    write_profile,
)
from trainer.run.rundir import RunDir


def submit_from(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m jobs.submit` run from the user's own folder, the project installed (here: on PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    profile = folder / "local.yaml"
    profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {folder / 'runs'}\n")
    cmd = [sys.executable, "-m", "jobs.submit", "--profile", str(profile), *args]
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path: Path, sample_root: Path) -> Path:
    """A user's folder: README's example task, and a folder of their images."""
    folder = tmp_path / "my_project"
    folder.mkdir()
    (folder / "my_tasks.py").write_text(EXAMPLE)
    shutil.copytree(sample_root / "classify" / "circle", folder / "photos")
    return folder


@pytest.mark.parametrize("task", ["my_tasks.py:Denoise", "my_tasks:Denoise"])
def test_readmes_example_task_trains_from_a_folder_outside_the_project(project: Path, task: str) -> None:
    args = ["--wait", f"task={task}", "data.root=photos", "Denoise.width=8", "steps=4", "log.every=2"]
    result = submit_from(project, *args, "log.image_every=0")
    assert result.returncode == 0, result.stdout + result.stderr
    [summary] = [json.loads(p.read_text()) for p in (project / "runs").glob("*-Denoise-*/summary.json")]
    assert summary["final_step"] == 4 and summary["world_size"] == 2
    [config] = list((project / "runs").glob("*/config.yaml"))
    assert yaml.safe_load(config.read_text())["Denoise"] == {"width": 8, "noise": 0.2}


@pytest.mark.parametrize(
    ("task", "named"),
    [
        ("nowhere:Task", "nowhere:Task"),
        ("missing.py:Task", "missing.py"),
        ("my_tasks.py:Denoize", "Denoize"),
        ("my_tasks.py:Settings", "Settings"),
        ("broken.py:Task", "broken.py"),
        ("init.py:Task", "init.py:Task"),
        ("cli.py:Task", "cli.py"),
    ],
)
def test_a_bad_task_reference_is_one_line(golden: Golden, project: Path, task: str, named: str) -> None:
    (project / "broken.py").write_text("x = 1 / 0\n")
    (project / "init.py").write_text("import os\nclass Task:\n    def __init__(self):\n        os.environ['DATA']\n")
    (project / "cli.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--data', required=True)\nargs = p.parse_args()\n"
    )
    assert_refused(submit_from(project, f"task={task}", "data.root=photos"), golden, named, project / "runs")


def test_a_task_settings_typo_is_one_line(golden: Golden, project: Path) -> None:
    result = submit_from(project, "task=my_tasks.py:Denoise", "data.root=photos", "Denoise.widht=8")
    assert_refused(result, golden, "Denoise.widht", project / "runs")  # its golden line lists Denoise.width


def test_a_task_whose_data_is_made_in_code_runs_without_data_root(tmp_path: Path) -> None:
    (tmp_path / "regress.py").write_text(IN_CODE)
    result = submit_from(
        tmp_path, "--wait", "task=regress.py:Regress", "steps=6", "log.every=2", "--gpus-per-node", "1"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "has no built-in sample data" not in result.stderr


def weights(run_dir: Path) -> str:
    return json.loads((run_dir / "summary.json").read_text())["weights_sha256"]


def killed_after_checkpoint(run_dir: Path, step: int, *args: str) -> None:
    """Start the run's ranks (or resume them), SIGKILL them once checkpoint `step` is on disk."""
    started = ranks.start(run_dir, *args)
    ready = run_dir / "checkpoints" / f"step_{step:08d}.pt.sha256"
    poll(f"checkpoint {step}", lambda: ready.exists() or any(p.exitcode is not None for p in started.processes))
    assert all(p.exitcode is None for p in started.processes), "a rank ended before the checkpoint"
    started.kill()
    assert not RunDir(run_dir).finished(), "the run finished before it was killed"


def test_a_dropout_task_with_random_augmentations_resumes_exactly_whatever_the_settings(tmp_path: Path) -> None:
    """One hash for: the run uninterrupted; killed twice mid-epoch and resumed (one loader worker); and other
    logging, evaluation and checkpoint intervals with two workers that start anew each epoch. Nothing the
    trainer does for itself draws from the task's random streams. (The ranks are forked: tests/ranks.py.)"""
    (tmp_path / "augmented.py").write_text(AUGMENTED)
    exact = [f"task={tmp_path / 'augmented.py'}:Augmented", *EXACT[1:]]
    reference = ranks.train(tmp_path / "reference", *exact).run_dir
    other = ["log.every=3", "log.image_every=7", "eval.every=4", "checkpoint.every=6"]
    loader = ["data.num_workers=2", "data.persistent_workers=false", "data.prefetch_factor=1"]
    varied = ranks.train(tmp_path / "varied", *exact, *other, *loader).run_dir
    run_dir = tmp_path / "killed"
    workers = ["data.num_workers=1", "checkpoint.every=5"]
    killed_after_checkpoint(run_dir, 5, *exact, *workers)
    killed_after_checkpoint(run_dir, 15, *exact, *workers)
    ranks.train(run_dir, *exact, *workers)
    assert len(json.loads((run_dir / "attempts.json").read_text())) == 3
    assert weights(varied) == weights(reference)
    assert weights(run_dir) == weights(reference)


@pytest.mark.parametrize("mode", ["warn", "stop"])
def test_a_loss_that_is_not_finite_for_a_log_interval_is_said(tmp_path: Path, mode: str) -> None:
    (tmp_path / "regress.py").write_text(NAN)
    args = [
        "--wait",
        "task=regress.py:Regress",
        "steps=4",
        "log.every=2",
        "--gpus-per-node",
        "1",
        f"log.nonfinite={mode}",
    ]
    result = submit_from(tmp_path, *args)
    said = "the training loss was nan over steps 1-2"
    if mode == "warn":
        assert result.returncode == 0 and f"warning: {said} (log.nonfinite=stop ends the run on it)" in result.stdout
    else:
        assert result.returncode == 1, result.stdout + result.stderr
        assert result.stderr.strip().endswith(
            f"{said}; lower optim.lr or set optim.grad_clip (log.nonfinite=warn trains on)"
        )


SEQUENCES = """
import os

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence


class Tokens(torch.utils.data.Dataset):
    # Token sequences of different lengths, read through a handle each process opens on first use, as h5py and
    # LMDB datasets do: it must be opened in the loader's workers, never inherited from the training process.
    def __init__(self, folder):
        self.folder, self.handle = folder, None

    def __len__(self):
        return 64

    def __getitem__(self, i):
        if self.handle is None:
            info = torch.utils.data.get_worker_info()
            where = "main" if info is None else f"worker{info.id}"
            self.handle = open(os.path.join(self.folder, f"opened-{os.getpid()}-{where}"), "w")
        return torch.randint(1, 16, (3 + i % 5,))


class Sequences:
    def dataset(self, config):
        self.folder = config.run_dir
        return Tokens(config.run_dir)

    def collate(self, samples):
        return pad_sequence(samples, batch_first=True)

    def worker_init(self, worker_id):
        open(os.path.join(self.folder, f"init-{worker_id}"), "w").close()

    def model(self, config, dataset):
        return Model()

    def forward(self, model, batch):
        return (model(batch) - (batch > 0).sum(1).float()).pow(2).mean(), {}

    metrics = {"error": "min"}

    def evaluate(self, model, batch):
        return {"error": (model(batch) - (batch > 0).sum(1).float()).abs()}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.out = nn.Embedding(16, 8), nn.Linear(8, 1)

    def forward(self, tokens):
        return self.out(self.embed(tokens).mean(1)).squeeze(1)
"""


def test_a_task_collates_its_own_samples_and_its_workers_open_their_own_handles(tmp_path: Path) -> None:
    """Samples of different lengths batched by the task's collate; the dataset's handle opened in each worker
    (get_worker_info set), never in the training process; the task's worker_init run in every worker."""
    (tmp_path / "sequences.py").write_text(SEQUENCES)
    run_dir = tmp_path / "run"
    args = [f"task={tmp_path / 'sequences.py'}:Sequences", "steps=6", "batch_size=4", "data.num_workers=2"]
    ranks.train(run_dir, *args, "log.every=3", "log.image_every=0", "data.val_fraction=0.25", "eval.every=3", world=1)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_step"] == 6 and summary["val_metrics"]["error"] >= 0  # validation batches collated too
    opened = sorted(p.name.rsplit("-", 1)[1] for p in run_dir.glob("opened-*"))
    assert opened == ["worker0", "worker0", "worker1", "worker1"], opened  # training's and validation's workers
    assert sorted(p.name for p in run_dir.glob("init-*")) == ["init-0", "init-1"]


SPLIT = """
import torch
from torch import nn


class ToyMpModel(nn.Module):  # torch's DDP tutorial: one model over two devices inside each DDP process
    def __init__(self, dev0, dev1):
        super().__init__()
        self.dev0, self.dev1 = dev0, dev1
        self.net1 = nn.Linear(10, 10).to(dev0)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5).to(dev1)

    def forward(self, x):
        x = self.relu(self.net1(x.to(self.dev0)))
        return self.net2(x.to(self.dev1))


class Pairs(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(10, generator=g), torch.randn(5, generator=g)


class Split:
    def dataset(self, config):
        return Pairs()

    def model(self, config, dataset, devices):
        return ToyMpModel(devices[0], devices[-1])

    def forward(self, model, batch):
        x, y = batch
        out = model(x)
        return nn.functional.mse_loss(out, y.to(out.device)), {}
"""


def test_a_model_split_over_two_devices_per_process_trains_what_one_device_does(tmp_path: Path) -> None:
    """gpus_per_task: 2 with 4 "GPUs" (CPU here: each task's two devices are the CPU): 2 DDP processes, the
    task's model() given devices= places its parts (the tutorial's ToyMpModel), DDP wraps it without
    device_ids; the weights equal those of the same run with one device per process."""
    (tmp_path / "split.py").write_text(SPLIT)
    args = ["task=split.py:Split", "steps=8", "batch_size=4", "log.every=4", "log.image_every=0", "--wait"]
    hashes = {}
    for per_task, per_node in ((2, 4), (1, 2)):
        root = tmp_path / f"runs{per_task}"
        text = f"executor: local\ngpus_per_node: {per_node}\ngpus_per_task: {per_task}\nrun_root: {root}\n"
        profile = write_profile(tmp_path, text, f"p{per_task}.yaml")
        result = submit("--profile", str(profile), *args, cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        [run_dir] = run_dirs(root)
        job = json.loads((run_dir / "job.json").read_text())
        assert (job["tasks"], job["profile"]["nodes"], job["executor"]) == (2, 1, "local"), job  # 1 node x 2 tasks
        hashes[per_task] = json.loads((run_dir / "summary.json").read_text())["weights_sha256"]
        logs = "".join(p.read_text() for p in (run_dir / "logs").glob("*_log.out"))
        assert logs.count(" gpus_per_task=2") == (2 if per_task == 2 else 0)  # each task was told
    assert hashes[2] == hashes[1]

"""Validation counts every sample once, at any world size: the distributed mean equals one process's."""

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import TensorDataset

from tests import ranks
from tests.messages import Golden, case_id, raises
from tests.support import ROOT, submit, summary, val_scalars
from trainer.config import build_config
from trainer.supervise.launcher import DistEnv
from trainer.tasks.classify import TASK as CLASSIFY
from trainer.validation import evaluate, shard_loader

SAMPLES, CLASSES = 23, 7  # 23 is divisible by none of 2 and 3 (and > 5 classes: top-5 is reported too)


def data_and_model() -> tuple[TensorDataset, torch.nn.Module]:
    torch.manual_seed(0)
    images, labels = torch.randn(SAMPLES, 3, 4, 4), torch.randint(0, CLASSES, (SAMPLES,))
    return TensorDataset(images, labels), torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, CLASSES))


def reference() -> dict[str, float]:
    """One process, the whole set in one batch, no trainer code: what the metric should be."""
    (dataset, model) = data_and_model()
    images, labels = dataset.tensors
    with torch.no_grad():
        logits = model(images)
    return {
        "loss": torch.nn.functional.cross_entropy(logits, labels).item(),
        "top1": (logits.argmax(1) == labels).double().mean().item(),
        "top5": (logits.topk(5, 1).indices == labels[:, None]).any(1).double().mean().item(),
    }


def worker(rank: int, world: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    env = DistEnv("env", rank, rank, world, world, 0, 1, "127.0.0.1", 0, None, 1)
    dataset, model = data_and_model()
    config = build_config(["task=classify", "batch_size=4", "data.num_workers=0"])
    loader = shard_loader(dataset, config, env, torch.device("cpu"))
    result = evaluate(model, loader, CLASSIFY, env, torch.device("cpu"), contextlib.nullcontext())
    if rank == 0:
        Path(out).write_text(json.dumps(result))
    dist.destroy_process_group()


@pytest.mark.job  # forks DDP ranks (about 8 s each): with the jobs, out of the inner loop
@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_distributed_mean_equals_a_single_process_evaluation(world: int, tmp_path: Path) -> None:
    store, out = tempfile.mktemp(dir=tmp_path), tmp_path / "result.json"
    # Forked from the forkserver that imported torch (tests/ranks.py), not fresh interpreters.
    mp.start_processes(worker, args=(world, store, str(out)), nprocs=world, join=True, start_method="forkserver")
    result = json.loads(out.read_text())
    assert result.keys() == reference().keys()
    for name, value in reference().items():
        assert result[name] == pytest.approx(value, rel=1e-6, abs=1e-9), name


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["data.val_fraction=0.1", "data.val_root=/x"], "data.val_root"),
        (["data.val_fraction=1"], "data.val_fraction"),
        (["data.val_csv=v.csv"], "data.val_csv"),
    ],
    ids=case_id,
)
def test_validation_settings_are_refused_in_one_line(golden: Golden, overrides: list[str], named: str) -> None:
    with raises(golden, named):
        build_config(overrides)


@pytest.mark.job
def test_a_separate_validation_root_is_checked_at_submit_and_evaluated(tmp_path: Path, sample_root: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")
    data = [f"data.root={sample_root / 'pix2pix'}", "--wait", "steps=4", "log.image_every=0"]
    refused = submit("--profile", str(profile), *data, f"data.val_root={tmp_path / 'nowhere'}")
    assert refused.returncode == 2 and refused.stderr.startswith("error: validation data (data.val_root, data.val_csv)")
    assert not list((tmp_path / "runs").glob("*/config.yaml"))
    evaluated = ranks.train(tmp_path / "run", *data[2:], data[0], f"data.val_root={sample_root / 'pix2pix'}")
    assert list(val_scalars(evaluated.run_dir)) == [4]  # validation at step 4
    assert summary(evaluated.run_dir)["val_metrics"]["l1"] == pytest.approx(val_scalars(evaluated.run_dir)[4])


def evaluate_cli(target: Path, *args: str) -> dict:  # type: ignore[type-arg]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "trainer.evaluate", str(target), *args]
    result = subprocess.run(cmd, cwd=target.parent, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.job
def test_the_best_checkpoint_survives_pruning_and_evaluate_agrees(tmp_path: Path, sample_root: Path) -> None:
    """keep=1 prunes every step checkpoint but the last; best.pt is apart, holds what its use needs, and
    trainer.evaluate recomputes the numbers summary.json reports for it and for the final weights."""
    args = ["task=classify", "steps=12", "eval.every=3", "data.val_fraction=0.2", "checkpoint.every=3"]
    args += ["checkpoint.keep=1", "eval.metric=loss", "log.image_every=0", "batch_size=4", "data.image_size=32"]
    run_dir = ranks.train(tmp_path / "run", f"data.root={sample_root / 'classify'}", *args).run_dir
    summary = json.loads((run_dir / "summary.json").read_text())
    best = summary["best"]
    evaluated = [
        line
        for line in (run_dir / "logs" / "rank_0.log").read_text().splitlines()
        if line.startswith("validation at step")
    ]
    losses = {int(line.split()[3][:-1]): float(line.split("loss=")[1].split()[0]) for line in evaluated}
    assert sorted(losses) == [3, 6, 9, 12] and best["step"] == min(losses, key=losses.__getitem__)
    assert (best["metric"], best["mode"]) == ("loss", "min")
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["best.pt", "best.pt.sha256", "step_00000012.pt", "step_00000012.pt.sha256"]

    # To float32's precision, not bit for bit: two ranks batch their shards differently from one process,
    # and CPU convolutions give a batch of one other low bits than a batch of four (measured on resnet18).
    final = evaluate_cli(run_dir)
    assert final["step"] == 12 and final["val_metrics"] == pytest.approx(summary["val_metrics"], rel=1e-6)
    from_best = evaluate_cli(Path(best["path"]))
    assert from_best["step"] == best["step"] and from_best["val_metrics"] == pytest.approx(
        best["val_metrics"], rel=1e-6
    )

    meta = torch.load(best["path"], weights_only=True)["meta"]
    assert meta["task"] == "classify" and meta["classes"] == ["circle", "square", "triangle"]
    assert meta["config"]["classify"] == {"model": "resnet18"} and meta["val_metrics"] == best["val_metrics"]


def test_an_unknown_eval_metric_is_refused(golden: Golden) -> None:
    with raises(golden, "eval.metric", "top1"):
        build_config(["eval.metric=top1"])

"""A run resumed on the real cluster on fewer, then more nodes: every step's samples are the uninterrupted run's
(step_samples.jsonl), and so are the weights, up to the order of a sum."""

import json
from pathlib import Path

import torch
import yaml

from tests import ranks
from tests.slurm.cluster import squeue_state
from tests.support import ROOT, attempts, cli, job_id_of, mini_profile, poll_cluster, run_dir_of, submit, summary
from trainer.config import flat

ARGS = ["steps=120", "log.every=5", "checkpoint.every=40", "log.image_every=0"]


def stop_after_checkpoint(run_dir: Path, step: int) -> None:
    """Cancel the run's job once its checkpoint of `step` is written, and wait until Slurm has let it go."""
    done = run_dir / "checkpoints" / f"step_{step:08d}.pt.sha256"
    poll_cluster(f"checkpoint {step}", done.exists, timeout=240)
    job = job_id_of(run_dir)
    assert cli("jobs.cancel", str(run_dir)).returncode == 0
    poll_cluster(f"job {job} to leave the queue", lambda: squeue_state(job) == "", timeout=120)


def step_samples(run_dir: Path) -> list[tuple[int, str, int]]:
    lines = (run_dir / "step_samples.jsonl").read_text().splitlines()
    return [(r["step"], r["digest"], r["processes"]) for r in map(json.loads, lines)]


def test_a_run_resumed_on_one_node_then_two_trains_on_the_same_samples(tmp_path: Path, sample_root: Path) -> None:
    """2 nodes x 1 task to step 40 (cancelled), `--resume --nodes 1` to step 80 (one process: two micro-batches
    a step; cancelled), `--resume --nodes 2` to the end."""
    data = f"data.root={sample_root / 'pix2pix'}"
    trainer = yaml.safe_load((ROOT / "cluster_profiles" / "mini.yaml").read_text())["trainer"]
    reference = ranks.train(
        tmp_path / "reference", *[f"{k}={v}" for k, v in flat(trainer).items()], data, *ARGS
    ).run_dir
    profile = str(mini_profile(tmp_path))
    first = submit("--profile", profile, "--nodes", "2", "--gpus-per-node", "1", data, *ARGS)
    assert first.returncode == 0, first.stderr
    run_dir = run_dir_of(first)
    stop_after_checkpoint(run_dir, 40)
    fewer = submit("--profile", profile, "--resume", str(run_dir), "--nodes", "1", "--gpus-per-node", "1")
    assert fewer.returncode == 0, fewer.stderr
    poll_cluster("the resumed attempt", lambda: len(attempts(run_dir)) == 2, timeout=120)
    stop_after_checkpoint(run_dir, 80)
    more = submit("--profile", profile, "--resume", str(run_dir), "--nodes", "2", "--gpus-per-node", "1", "--wait")
    assert more.returncode == 0, more.stdout + more.stderr
    assert [a["resumed_step"] for a in attempts(run_dir)] == [0, 40, 80]
    got, want = step_samples(run_dir), step_samples(reference)
    assert [(s, d) for s, d, _ in got] == [(s, d) for s, d, _ in want]
    assert [n for *_, n in got] == [2] * 40 + [1] * 40 + [2] * 40
    ours, theirs = (
        torch.load(r / "checkpoints" / "step_00000120.pt", weights_only=False)["model"] for r in (run_dir, reference)
    )
    gap = max(float((ours[k].float() - theirs[k].float()).abs().max()) for k in theirs)
    assert gap < 1e-5, gap
    assert summary(run_dir)["final_step"] == 120

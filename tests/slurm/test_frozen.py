"""Hangs no single rank's watchdog can name, on 2 nodes x 2 tasks: every rank frozen at once, a rank frozen
before the process group forms, and a stopped rank when torch's own timeout (dist.timeout_s) comes before the
hang budget. Each is named by the code that names it locally (tests/jobs/test_local_jobs.py), within the same
bound, and the job ends then: its allocation is released, not held to the time limit."""

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.slurm import cluster
from tests.support import job_id_of, poll_cluster, run_dir_of, submit
from trainer.supervise.stacks import ranks_of

HANG = ["hang.floor_s=10", "hang.factor=2", "hang.beat_s=2"]  # a step's budget: 10 s, 14 s waiting on peers
LONG = ["--nodes", "2", "--gpus-per-node", "2", "steps=100000", "log.every=5", "log.image_every=0"]

# A user's task file whose rank 1 stops itself as the file is imported, before the process group forms (a
# frozen node as the job starts): it never writes a heartbeat.
FREEZES_RANK_1 = """
import os
import signal

import torch
from torch import nn

if os.environ.get("SLURM_PROCID") == "1":
    os.kill(os.getpid(), signal.SIGSTOP)


class Regress:
    def dataset(self, config):
        return torch.utils.data.TensorDataset(torch.randn(4096, 4))

    def model(self, config, dataset):
        return nn.Linear(4, 1)

    def forward(self, model, batch):
        return model(batch[0]).pow(2).mean(), {}
"""


def job_state(job_id: str) -> str:
    """The job's state while Slurm still lists it; "" once it left the queue."""
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "UNKNOWN"  # squeue failing under load is not an end


def sacct_state(job_id: str) -> str:
    out = subprocess.run(
        ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"], capture_output=True, text=True
    ).stdout.split()
    return out[-1] if out else ""


def started(run_dir: Path, tasks: int = 4) -> list[int]:
    """The pids of the attempt's ranks, once every one has recorded itself."""
    return poll_cluster(
        "every rank", lambda: len(found := ranks_of(run_dir, None)) == tasks and [r["pid"] for r in found]
    )


def stop_all(pids: list[int], signum: signal.Signals = signal.SIGSTOP) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def ended_within(job_id: str, seconds: float) -> float:
    """Seconds until the job left the queue; fails past `seconds`."""
    began = time.monotonic()
    poll_cluster("the job to end", lambda: job_state(job_id) in ("", "COMPLETED", "FAILED"), seconds)
    return time.monotonic() - began


def test_every_rank_frozen_at_once_is_named_and_the_allocation_released(tmp_path: Path, sample_root: Path) -> None:
    """All 4 ranks stopped at once (a stalled filesystem): no rank's watchdog can name it. The batch step sees
    rank 0's node-local heartbeat go silent past the time its peers would have named it, names the hang in
    error.txt and ends the step: the job ends FAILED within the budget + 15 s, long before its time limit."""
    profile = cluster.mini_profile(tmp_path / "profile.yaml", tmp_path / "runs")
    result = submit("--profile", str(profile), *LONG, f"data.root={sample_root / 'pix2pix'}", *HANG)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir, progress = run_dir_of(result), run_dir_of(result) / "progress.json"
    job_id = job_id_of(run_dir)
    pids = started(run_dir)
    poll_cluster(
        "training past its first times", lambda: progress.exists() and json.loads(progress.read_text())["step"] >= 40
    )
    stop_all(pids)
    try:
        # Rank 0's budget (14 s waiting on peers), the peers' look and store wait (6 s), the margin, 15 s.
        waited = ended_within(job_id, 14 + 6 + 5 + 15 + 30)
    finally:
        stop_all(pids, signal.SIGCONT)
    assert waited < 14 + 6 + 5 + 15, waited
    line = (run_dir / "error.txt").read_text()
    assert line.startswith("rank 0 on node1: hung: every rank stopped: rank 0's heartbeat stopped"), line
    assert "seen by the supervisor" in line, line
    assert (
        poll_cluster("accounting", lambda: sacct_state(job_id) not in ("", "RUNNING") and sacct_state(job_id))
        == "FAILED"
    )


def test_a_rank_frozen_before_the_group_forms_is_named_within_hang_first_s(tmp_path: Path) -> None:
    """Rank 1 stops before it joins the process group; hang.first_s=30 is shorter than dist.timeout_s (300):
    the ranks waiting for it name it after start-up's budget, not torch's timeout, and the job ends."""
    (tmp_path / "freezes.py").write_text(FREEZES_RANK_1)
    profile = cluster.mini_profile(tmp_path / "profile.yaml", tmp_path / "runs")
    task = f"task={tmp_path / 'freezes.py'}:Regress"
    result = submit("--profile", str(profile), *LONG, task, "hang.first_s=30")
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    job_id = job_id_of(run_dir)
    poll_cluster("the job to run", lambda: job_state(job_id) == "RUNNING", 120)
    ended_within(job_id, 30 + 15 + 60)  # from the start: torch's import and the task's on every rank too
    line = (run_dir / "error.txt").read_text()
    assert line.startswith("rank 1"), line
    assert "hung: it kept the process group from forming: wrote no heartbeat" in line, line
    assert not (run_dir / "progress.json").exists()


def test_a_stopped_rank_is_named_when_torchs_timeout_comes_before_the_budget(tmp_path: Path, sample_root: Path) -> None:
    """Rank 1 stopped with dist.timeout_s=30, below its hang budget (hang.floor_s=120): gloo's timeout comes
    first on the other ranks; they name rank 1 from its heartbeat, not their own timeout."""
    profile = cluster.mini_profile(tmp_path / "profile.yaml", tmp_path / "runs")
    args = [*LONG, f"data.root={sample_root / 'pix2pix'}", "dist.timeout_s=30"]
    result = submit("--profile", str(profile), *args)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir, progress = run_dir_of(result), run_dir_of(result) / "progress.json"
    job_id = job_id_of(run_dir)
    pids = started(run_dir)
    poll_cluster("training", lambda: progress.exists() and json.loads(progress.read_text())["step"] >= 20)
    rank_1 = next(r for r in ranks_of(run_dir, None) if r["rank"] == 1)["pid"]
    stop_all([rank_1])
    try:
        waited = ended_within(job_id, 30 + 15 + 30)
    finally:
        stop_all(pids, signal.SIGCONT)
    assert waited < 30 + 15, waited
    line = (run_dir / "error.txt").read_text()
    assert line.startswith("rank 1 on node1: hung: its heartbeat stopped "), line
    assert "when torch timed out" in line, line

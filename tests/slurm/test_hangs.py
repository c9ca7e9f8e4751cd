"""Hangs and slow nodes on the real cluster: a loader worker that deadlocks on one node, named by the watchdog,
that node left out after its second hang (on a spare node, or by a requeue without it); a rank slowed from
outside named a straggler with its node."""

import contextlib
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests import ranks as forked
from tests.slurm import cluster
from tests.slurm.cluster import release_when_requeued
from tests.support import attempts, cli, job_id_of, poll_cluster, run_dir_of, submit, summary

HANG = ["hang.floor_s=6", "hang.factor=2", "hang.beat_s=2"]  # the least budget allowed: 3 heartbeats

# A user's task, shaped like theirs (no cooperation with this project): rank 1's loader worker stops delivering
# after a few batches whenever it runs on node1 (a stuck read on that node's mount, a lock held across fork).
STALLS_ON_NODE1 = """
import os
import time

import torch
import torch.distributed as dist
from torch import nn


class Stalling(torch.utils.data.Dataset):
    def __init__(self):
        self.rank = dist.get_rank()

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        if self.rank == 1 and os.environ.get("SLURMD_NODENAME") == "node1":
            if torch.utils.data.get_worker_info() is not None:
                self.served = getattr(self, "served", 0) + 1
                if self.served > 24:
                    time.sleep(3600)
        return torch.randn(4)


class Regress:
    def dataset(self, config):
        return Stalling()

    def model(self, config, dataset):
        return nn.Linear(4, 1)

    def forward(self, model, batch):
        return model(batch).pow(2).mean(), {}
"""


@pytest.mark.parametrize("spare", [1, 0], ids=["spare-node", "requeue-without-it"])
def test_a_node_whose_loader_hangs_twice_is_left_out_and_the_run_ends_on_the_same_weights(
    spare: int, tmp_path: Path
) -> None:
    """1 node x 2 tasks. On node1, rank 1's loader worker deadlocks: its watchdog names rank 1 on node1 (waiting
    on its own loader), the batch script starts the tasks again in the allocation; node1 hangs again, so it is
    held against it twice and left out: with a spare node the next step runs there; without one the job is
    requeued with node1 excluded. Either way the run ends on node2 with the weights of a run that never hung."""
    (tmp_path / "stalls.py").write_text(STALLS_ON_NODE1)
    task = [f"task={tmp_path / 'stalls.py'}:Regress", "data.num_workers=1", "steps=30", "batch_size=2"]
    args = [*task, "log.every=4", "log.image_every=0", "checkpoint.every=4", *HANG]
    reference = tmp_path / "reference"
    forked.train(reference, *task)  # no SLURMD_NODENAME here: it never stalls
    # With a spare node the third step is the second restart in the allocation; without, the second hang ends it.
    extra = "restarts_in_job: 2\nspare_nodes: 1\n" if spare else "restarts_in_job: 1\n"
    profile = cluster.mini_profile(tmp_path / "profile.yaml", tmp_path / "runs", extra)
    result = submit("--profile", str(profile), "--nodes", "1", "--gpus-per-node", "2", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    log0 = run_dir / "logs" / f"{job_id_of(run_dir)}_0_log.out"
    if not spare:
        poll_cluster(
            "the requeue without node1",
            lambda: log0.exists() and "requeueing the job without it" in log0.read_text(),
            150,
        )
        release_when_requeued(job_id_of(run_dir))
    data = summary(run_dir, timeout=180)
    assert data["weights_sha256"] == json.loads((reference / "summary.json").read_text())["weights_sha256"]
    first, second, third = attempts(run_dir)
    for hung in (first, second):
        assert hung["stop"]["error"].startswith("rank 1 on node1: hung: no progress for "), hung
    assert (second["in_job_restart"], third.get("in_job_restart", 0)) == (1, 2 if spare else 0)
    assert third["slurm_restart_count"] == (0 if spare else 1)  # a spare node: no queue
    log = log0.read_text()
    assert "the step failed on node node1 (its failure 2 in this job)" in log
    if spare:
        assert "node node1 failed twice: the next step leaves it out (--exclude=node1), a spare node" in log
    else:
        assert "requeueing the job without it (ExcNodeList=node1)" in log
    assert re.search(r"^dist: .*node=node2", log, re.M), "the last step ran on node2"
    assert data["in_job_restarts"] == (2 if spare else 1)


def test_a_rank_slowed_from_outside_is_named_with_its_node(tmp_path: Path, sample_root: Path) -> None:
    """2 nodes x 1 task. Rank 1 (node2) stopped and continued by turns from outside (SIGSTOP/SIGCONT, two thirds
    of the time stopped, as a throttled node runs): rank 0's log names it a straggler with its node; the run is
    cancelled then. An even run naming none: tests/slurm/test_requeue.py's runs, summary.json's stragglers."""
    profile = cluster.mini_profile(tmp_path / "profile.yaml", tmp_path / "runs")
    data = f"data.root={sample_root / 'pix2pix'}"
    args = ["--nodes", "2", "--gpus-per-node", "1", data, "steps=100000", "log.every=5", "log.image_every=0"]
    result = submit("--profile", str(profile), *args, "log.stragglers=true")
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    logs = run_dir / "logs"
    job = job_id_of(run_dir)
    poll_cluster("training", lambda: (run_dir / "progress.json").exists(), 120)
    pid = int(re.findall(r"^dist: .* pid=(\d+)", (logs / f"{job}_1_log.out").read_text(), re.M)[-1])
    named = "rank 1 on node2 is a straggler: its own work per step (data + compute) was "
    deadline = time.monotonic() + 120
    try:
        while named not in (logs / f"{job}_0_log.out").read_text() and time.monotonic() < deadline:
            signal_pid(pid, signal.SIGSTOP)
            time.sleep(0.2)
            signal_pid(pid, signal.SIGCONT)
            time.sleep(0.1)
    finally:
        signal_pid(pid, signal.SIGCONT)
        assert cli("jobs.cancel", str(run_dir)).returncode == 0
    text = (logs / f"{job}_0_log.out").read_text()
    assert named in text
    # Stopped in its forward and backward, or while it loads its batch: its own work, not communication.
    assert re.search(r"mostly (compute|data)", text.split(named, 1)[1].splitlines()[0])


def signal_pid(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the run ended meanwhile
        os.kill(pid, signum)

"""Your own torchrun-style script on the real two-node cluster: ranks, preemption with save and resume, failure."""

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import submit
from tests.slurm.cluster import preempt_normal_jobs, release_when_requeued
from tests.slurm.test_requeue import job_id_of, mini_profile
from tests.slurm.test_slurm import poll, run_dir_of
from tests.test_script import DDP, REQUEUEING

pytestmark = pytest.mark.slurm


def test_a_plain_ddp_script_gets_every_ranks_variables(slurm_cluster: None, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DDP)
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "2", "--wait"]
    result = submit(*args, "--", sys.executable, "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    reports = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in range(4)]
    assert [r["RANK"] for r in reports] == ["0", "1", "2", "3"]
    assert {r["WORLD_SIZE"] for r in reports} == {"4"} and {r["LOCAL_WORLD_SIZE"] for r in reports} == {"2"}
    assert [(r["GROUP_RANK"], r["LOCAL_RANK"]) for r in reports] == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    assert {r["MASTER_ADDR"] for r in reports} == {"node1"} and len({r["MASTER_PORT"] for r in reports}) == 1
    assert {r["sum"] for r in reports} == {10.0}  # 1 + 2 + 3 + 4: one process group of four


def test_a_preempted_script_saves_is_requeued_and_resumes(slurm_cluster: None, tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(REQUEUEING)
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "1"]
    result = submit(*args, "--", sys.executable, "loop.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    starts = run_dir / "starts"
    poll("both ranks to start", lambda: starts.exists() and len(starts.read_text().split()) == 2)
    preempt_normal_jobs()
    release_when_requeued(job_id_of(run_dir))
    poll("the summary", lambda: (run_dir / "summary.json").exists(), timeout=240)
    resumed = [int(s.split(":")[1]) for s in starts.read_text().split()[2:]]
    assert len(resumed) == 2 and all(step > 0 for step in resumed), starts.read_text()
    attempts = json.loads((run_dir / "attempts.json").read_text())
    assert attempts[0]["stop"]["reason"] == "preempted" and len(attempts) == 2


def test_a_failing_script_fails_the_job_naming_its_rank(slurm_cluster: None, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DDP)
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "2", "--wait"]
    os.environ["FAIL_RANK"] = "3"
    try:
        result = submit(*args, "--", sys.executable, "train.py", cwd=tmp_path)
    finally:
        del os.environ["FAIL_RANK"]
    assert result.returncode == 1, result.stdout + result.stderr
    assert "error: rank 3 on node2: " in result.stderr and "train.py exited with status 3" in result.stderr

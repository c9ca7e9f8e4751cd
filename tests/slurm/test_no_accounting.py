"""A cluster without accounting (no slurmdbd: sacct fails), as many small sites run: --wait, requeue after a
preemption and jobs.status work from scontrol, squeue and the run directory alone. The test cluster's
controller runs with a second configuration for these tests, then with its own again."""

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm import cluster
from tests.slurm.cluster import preempt_normal_jobs, release_when_requeued
from tests.support import cli, job_id_of, poll_cluster, run_dir_of, submit, training


@contextlib.contextmanager
def conf(env: dict[str, str]) -> Iterator[None]:
    """This process's SLURM_CONF (which cli() passes on) set to `env`'s for the block."""
    before = os.environ.get("SLURM_CONF")
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ["SLURM_CONF"] = before or str(cluster.CONF)


@pytest.fixture(scope="module")
def no_accounting() -> Iterator[dict[str, str]]:
    conf = cluster.write_no_accounting_config()
    try:
        cluster.restart_controller(conf)
        yield {"SLURM_CONF": str(conf)}
    finally:  # whatever happened: the cluster as the other tests know it
        cluster.restart_controller(cluster.CONF)


def test_a_preempted_run_resumes_and_status_reads_the_run_once_slurm_forgot_it(
    no_accounting: dict[str, str], tmp_path: Path, sample_root: Path
) -> None:
    sacct = subprocess.run(["sacct", "-n"], env={**os.environ, **no_accounting}, capture_output=True, text=True)
    assert sacct.returncode != 0 and "accounting storage is disabled" in sacct.stderr.lower()
    profile = cluster.mini_profile(tmp_path / "p.yaml", tmp_path / "runs")
    data = f"data.root={sample_root / 'pix2pix'}"
    args = ["--profile", str(profile), "--nodes", "2", "--gpus-per-node", "1", data, "steps=200", "log.every=5"]
    result = submit(*args, "log.image_every=0", env=no_accounting)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    poll_cluster("training", lambda: training(run_dir, 0), timeout=120)
    preempt_normal_jobs()
    release_when_requeued(job_id_of(run_dir))
    with conf(no_accounting):
        waited = cli("jobs.wait", str(run_dir))
    assert waited.returncode == 0 and waited.stdout.endswith("finished\n"), waited.stdout + waited.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["preemptions"], summary["final_step"]) == (1, 200)
    job = job_id_of(run_dir)
    scontrol = {**os.environ, **no_accounting}
    poll_cluster(
        "the controller to forget the job",
        lambda: subprocess.run(["scontrol", "show", "job", job], env=scontrol, capture_output=True).returncode != 0,
        timeout=90,
    )
    with conf(no_accounting):
        status = cli("jobs.status", str(run_dir))
    assert status.returncode == 0, status.stderr
    assert f"job {job}: COMPLETED (from the run directory: Slurm no longer knows the job" in status.stdout
    with conf(no_accounting):  # the run folder says it finished: so does jobs.wait, the job forgotten
        forgotten = cli("jobs.wait", str(run_dir))
    assert forgotten.returncode == 0 and forgotten.stdout.endswith("finished\n"), forgotten.stdout + forgotten.stderr

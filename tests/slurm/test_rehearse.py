"""jobs.rehearse on the real cluster, 2 nodes x 1 task: the preemption is the scheduler's (scancel -b, then a
requeue), and each rank's fault comes from a step on its node (srun --overlap). Not the time limit: Slurm sends
its signal from a check about once a minute, so a run of seconds ends first (jobs/README.md says so)."""

from pathlib import Path

from tests.support import mini_profile, rehearse


def test_the_trainer_is_certified_on_every_fault_on_two_nodes(tmp_path: Path, sample_root: Path) -> None:
    profile = mini_profile(tmp_path, "restarts_in_job: 2\n")
    args = ["--profile", str(profile), "--nodes", "2", "--gpus-per-node", "1", "--steps", "60"]
    args += ["--faults", "preempt,kill,kill-checkpoint,stop,frozen"]
    args += ["checkpoint.every=10", "log.every=5", "log.image_every=0", f"data.root={sample_root / 'pix2pix'}"]
    result, verdicts = rehearse(tmp_path, *args, timeout=1500)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [v["fault"] for v in verdicts] == ["preempt", "kill", "kill-checkpoint", "stop", "frozen"]
    assert all(v["verdict"] == "certified" and v["exact"] == "equal" for v in verdicts), verdicts
    assert verdicts[0]["recovered"] == "requeued 1x", verdicts[0]
    assert all(v["recovered"] == "restarted in the allocation 1x" for v in verdicts[1:]), verdicts
    named = {v["fault"]: v["named"] for v in verdicts}
    assert "rank 1" in named["stop"] and "hung" in named["stop"], named
    assert "every rank stopped" in named["frozen"], named

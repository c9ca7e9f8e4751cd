"""jobs.rehearse on the local profile, with code shaped like users': the built-in trainer (certified on every
fault, the time limit's too, with a profile that restarts a failed start), a plain DDP script that saves to $RUN_DIR on the signal
(certified with --compare), and one that never saves (lost work, with the fix)."""

from pathlib import Path

import pytest

from tests.support import rehearse

SCRIPTS = Path(__file__).parents[1] / "scripts"  # saves_to_run_dir.py, never_saves.py


@pytest.mark.slow
def test_the_trainer_is_certified_on_every_fault(tmp_path: Path, sample_root: Path) -> None:
    profile = tmp_path / "restarts.yaml"
    profile.write_text(f"executor: local\ngpus_per_node: 2\nrestarts_in_job: 2\nrun_root: {tmp_path / 'runs'}\n")
    args = ["--profile", str(profile), "--steps", "60", "checkpoint.every=10", f"data.root={sample_root / 'pix2pix'}"]
    result, verdicts = rehearse(tmp_path, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [v["fault"] for v in verdicts] == ["preempt", "timeout", "kill", "kill-checkpoint", "stop", "frozen"]
    assert all(v["verdict"] == "certified" and v["exact"] == "equal" for v in verdicts), verdicts
    assert verdicts[0]["recovered"] == "requeued 1x" and verdicts[0]["recomputed"] == "0"
    # The limit's signal comes halfway through the reference's training: requeued, and on from the step it
    # saved at the signal.
    assert verdicts[1]["recovered"].startswith("requeued ") and verdicts[1]["recomputed"] == "0", verdicts[1]
    assert all(v["recovered"] == "restarted in the allocation 1x" for v in verdicts[2:]), verdicts
    named = {v["fault"]: v["named"] for v in verdicts}
    assert "rank 1" in named["stop"] and "hung" in named["stop"], named
    assert "every rank stopped" in named["frozen"], named
    assert all(isinstance(v["lost_s"], float) for v in verdicts)


@pytest.mark.slow
def test_a_script_that_saves_is_certified_and_one_that_never_saves_lost_work(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text((SCRIPTS / "saves_to_run_dir.py").read_text())
    (tmp_path / "forgetful.py").write_text((SCRIPTS / "never_saves.py").read_text())
    profile = tmp_path / "local.yaml"
    profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")
    base = ["--profile", str(profile), "--faults", "preempt"]
    saves, [verdict] = rehearse(tmp_path, *base, "--compare", "final.pt", "--", "python", "train.py")
    assert saves.returncode == 0 and verdict["verdict"] == "certified", verdict
    assert verdict["exact"] == "equal" and verdict["went_on_from"].startswith("step ")
    forgets, [verdict] = rehearse(tmp_path, *base, "--", "python", "forgetful.py")
    assert forgets.returncode == 1 and verdict["verdict"] == "lost work", verdict
    assert "save to $RUN_DIR and load it when it is there" in verdict["fix"]
    assert "preempt: your script had saved nothing when the preempt came, so it began again" in forgets.stdout

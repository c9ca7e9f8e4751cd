"""jobs.rehearse on the real cluster, 2 nodes x 1 task: the preemption is the scheduler's (scancel -b, then a
requeue), each rank's fault comes from a step on its node (srun --overlap), and the time limit is Slurm's own
(its signal from slurmctld's check every 30 s). Code shaped like users': the built-in trainer, a plain DDP
script that saves to $RUN_DIR, one that never saves, a Lightning script with README's recipe, one that hangs."""

import hashlib
import json
import shutil
import sys
from pathlib import Path

from tests import frameworks
from tests.support import cli, mini_profile, rehearse

SCRIPTS = Path(__file__).parents[1] / "scripts"
TWO_NODES = ["--nodes", "2", "--gpus-per-node", "1"]


def test_the_trainer_is_certified_on_every_fault_on_two_nodes(tmp_path: Path, sample_root: Path) -> None:
    """Every fault, the time limit's Slurm's own: its signal comes from slurmctld's check every 30 s, so 60 steps
    are too short for it, and its run gets the steps that train over 80 s and a reference of its own."""
    profile = mini_profile(tmp_path, "restarts_in_job: 2\n")
    args = ["--profile", str(profile), *TWO_NODES, "--steps", "60"]
    args += ["checkpoint.every=10", "log.every=5", "log.image_every=0", f"data.root={sample_root / 'pix2pix'}"]
    result, verdicts = rehearse(tmp_path, *args, timeout=1500)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [v["fault"] for v in verdicts] == ["preempt", "timeout", "kill", "kill-checkpoint", "stop", "frozen"]
    assert all(v["verdict"] == "certified" and v["exact"] == "equal" for v in verdicts), verdicts
    by = {v["fault"]: v for v in verdicts}
    assert by["preempt"]["recovered"] == "requeued 1x", by["preempt"]
    assert by["timeout"]["recovered"].startswith("requeued ") and by["timeout"]["recomputed"] == "0", by["timeout"]
    for fault in ("kill", "kill-checkpoint", "stop", "frozen"):
        assert by[fault]["recovered"] == "restarted in the allocation 1x", by[fault]
    assert "rank 1" in by["stop"]["named"] and "hung" in by["stop"]["named"], by["stop"]
    assert "every rank stopped" in by["frozen"]["named"], by["frozen"]
    # The time limit's run was judged against its own reference, of more steps than the others'.
    timeout_dir, preempt_dir = Path(by["timeout"]["run_dir"]), Path(by["preempt"]["run_dir"])
    steps = [json.loads((d / "summary.json").read_text())["final_step"] for d in (timeout_dir, preempt_dir)]
    assert steps[0] > 60 == steps[1], steps


def test_scripts_are_judged_by_what_they_save(tmp_path: Path) -> None:
    """Certified where it saves to $RUN_DIR, lost work where it never saves, each on the scheduler's requeue and
    a restart in the allocation."""
    shutil.copy(SCRIPTS / "saves_to_run_dir.py", tmp_path / "train.py")
    shutil.copy(SCRIPTS / "never_saves.py", tmp_path / "forgetful.py")
    base = ["--profile", str(mini_profile(tmp_path, "restarts_in_job: 2\n")), *TWO_NODES]
    command = ["--", sys.executable, "train.py"]
    saves, verdicts = rehearse(tmp_path, *base, "--faults", "preempt,kill,stop", "--compare", "final.pt", *command)
    assert saves.returncode == 0, saves.stdout + saves.stderr
    assert all(v["verdict"] == "certified" and v["exact"] == "equal" for v in verdicts), verdicts
    assert [v["recovered"] for v in verdicts] == ["requeued 1x", *["restarted in the allocation 1x"] * 2], verdicts
    assert all(v["went_on_from"].startswith("step ") for v in verdicts), verdicts
    assert "rank 1" in verdicts[2]["named"], verdicts[2]
    # A script's length is its own: one too short for Slurm's time-limit check is not given the fault.
    args = ["--faults", "kill,timeout", "--", sys.executable, "forgetful.py"]
    forgets, [verdict, limit] = rehearse(tmp_path, *base, *args)
    assert forgets.returncode == 1 and verdict["verdict"] == "lost work", verdict
    assert "save to $RUN_DIR and load it when it is there" in verdict["fix"]
    assert limit["verdict"] == "not rehearsed" and "from a check every 30 s" in limit["fix"], limit


def test_lightning_with_readmes_recipe_and_a_script_that_hangs(tmp_path: Path) -> None:
    """Lightning as README's table writes it, seeded, its final weights saved: the verdict says what the weights
    say (Lightning itself warns that its resume mid-epoch is not exact). A script that hangs on purpose is named
    in its reference run, and the rehearsal ends there in one line."""
    folder = tmp_path / "lightning"
    folder.mkdir()
    frameworks.write(folder, "lightning")
    script = folder / "train_lightning.py"
    text = script.read_text().replace(
        'if __name__ == "__main__":\n', 'if __name__ == "__main__":\n    L.seed_everything(0)\n'
    )
    fit = 'trainer.fit(Model(), data, ckpt_path="last")'
    save = 'torch.save(model.state_dict(), os.path.join(os.environ["RUN_DIR"], "final.pt"))'
    text = text.replace(fit, f"model = Model()\n    {fit.replace('Model()', 'model')}\n    {save}")
    # 0.25 s a step (24 s of training, as in test_frameworks): the fault, half the reference's run after the
    # script's start, comes in training, not in Lightning's import.
    script.write_text(text.replace("time.sleep(0.05)", "time.sleep(0.25)"))
    base = ["--profile", str(mini_profile(tmp_path)), *TWO_NODES]
    args = [*base, "--faults", "preempt", "--compare", "final.pt", "--", sys.executable, script.name]
    result, [verdict] = rehearse(folder, *args, timeout=900)
    assert verdict["recovered"] == "requeued 1x", verdict
    preempted = Path(verdict["run_dir"])
    reference = preempted.with_name(preempted.name.replace("-preempt", "-reference"))
    # What really happened, from the script's own words (the step each start began at) and the weights.
    same = digest(reference / "final.pt") == digest(preempted / "final.pt")
    if frameworks.starts(preempted)[1] == 0:  # preempted before its first save: it began again
        assert verdict["verdict"] == "lost work", verdict
    else:
        assert verdict["verdict"] == ("certified" if same else "survived, not exact"), verdict
    assert verdict["exact"] == ("equal" if same else "differs")
    assert result.returncode == (0 if verdict["verdict"] == "certified" else 1), result.stdout + result.stderr
    shutil.copy(SCRIPTS / "hangs.py", tmp_path / "hangs.py")
    hangs = cli("jobs.rehearse", *base, "--", sys.executable, "hangs.py", cwd=tmp_path, timeout=600)
    assert hangs.returncode == 2 and len(hangs.stderr.strip().splitlines()) == 1, hangs.stdout + hangs.stderr
    # Either rank: rank 1 sleeps, rank 0 waits for it in gloo, and neither uses CPU or reports progress.
    assert "the reference run did not finish (rank " in hangs.stderr and "hung" in hangs.stderr, hangs.stderr
    assert "give --hang-s more" in hangs.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()

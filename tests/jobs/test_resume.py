"""--resume: what it refuses, what it continues, and what it records (local profile, 2 processes)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import ranks
from tests.messages import Golden, refused
from tests.support import AUGMENTED, ROOT, attempts, failure, submit, write_profile


def strict_json(path: Path) -> Any:
    """JSON as other tools read it: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{path} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def resume(run_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    profile = write_profile(run_dir.parent, "executor: local\ngpus_per_node: 2\n", "resume.yaml")
    return submit("--profile", str(profile), "--wait", "--resume", str(run_dir), *args, env=env)


def test_resuming_a_finished_run_starts_no_job(reference_copy: Path) -> None:
    job = (reference_copy / "job.json").read_text()
    result = resume(reference_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        result.stdout
        == f"{reference_copy} already finished at step 48 (steps=48); to train on, pass steps=N above 48\n"
    )
    assert (reference_copy / "job.json").read_text() == job
    [only] = attempts(reference_copy)
    assert only["stop"]["reason"] == "finished" and only["stop"]["step"] == 48
    assert strict_json(reference_copy / "summary.json")["final_step"] == 48


def test_resume_with_more_steps_continues_and_reports_its_warnings(reference_copy: Path) -> None:
    old_job = json.loads((reference_copy / "job.json").read_text())
    newest = reference_copy / "checkpoints" / "step_00000048.pt"
    newest.write_bytes(newest.read_bytes()[:100])  # torn
    entry = Path("tool", "trainer", "entry", "task.py")  # the function this version's job calls
    (reference_copy / entry).unlink()  # a run made by another version of the tool, which lacked it
    (reference_copy / "job.json").write_text(json.dumps(old_job | {"code": str(reference_copy / "code")}))
    result = resume(reference_copy, "steps=52")
    assert result.returncode == 0, result.stdout + result.stderr
    [aside] = (reference_copy / "superseded").iterdir()  # that tool/ set aside, this version's in its place
    assert (reference_copy / entry).is_file() and not (aside / entry).exists() and (aside / "tool/jobs").is_dir()
    first, second = attempts(reference_copy)
    assert first["stop"]["reason"] == "finished" and first["cost"]["time_lost_s"] == 0
    assert second["resumed_step"] == 40 and len(second["warnings"]) == 1
    assert second["warnings"][0].startswith(f"skipping checkpoint {newest}")
    assert f"warning: {second['warnings'][0]}" in result.stdout.splitlines()  # the recorded warning, as reported
    # Where the attempt's start-up went, in the order reached (benchmarks/startup.py reads these).
    startup = second["startup"]
    order = ["task_started", "torch_imported", "process_group_joined", "datasets_built", "data_ready", "model_ready"]
    assert list(startup) == ["process_start", *order, "checkpoint_restored"], startup
    assert abs(startup["process_start"] - second["started"]) < 120
    assert all(0 <= startup[a] <= startup[b] for a, b in zip(order, [*order[1:], "checkpoint_restored"], strict=True))
    summary = strict_json(reference_copy / "summary.json")
    assert (summary["final_step"], summary["failures"], summary["time_lost_s"]) == (52, 0, 0)
    # job.json names the job that ran last; the first one is kept in its history.
    job = json.loads((reference_copy / "job.json").read_text())
    assert f"submitted job {job['job_id']} " in result.stdout and job["job_id"] != old_job["job_id"]
    assert [h["job_id"] for h in job["history"]] == [old_job["job_id"]] and job["log"].endswith("_0_log.out")


def test_resume_refuses_a_new_model_shape_and_keeps_the_config_until_the_checkpoint_loads(
    golden: Golden, reference_copy: Path
) -> None:
    config = (reference_copy / "config.yaml").read_text()
    job = (reference_copy / "job.json").read_text()
    changed = resume(reference_copy, "steps=52", "pix2pix.width=32")
    refused(changed, golden, "--resume", "pix2pix.width (16 -> 32)")
    assert changed.stdout == ""
    assert (reference_copy / "config.yaml").read_text() == config and (reference_copy / "job.json").read_text() == job
    # Accepted at submit, but the job fails before it loads the checkpoint (gloo cannot find the network
    # interface it is told to use, which only the nodes can tell): the run keeps its settings.
    failed = resume(reference_copy, "steps=52", env={"GLOO_SOCKET_IFNAME": "nosuch0"})
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Unable to find address for: nosuch0" in failed.stderr
    assert (reference_copy / "config.yaml").read_text() == config
    resumed = resume(reference_copy, "steps=52")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert yaml.safe_load((reference_copy / "config.yaml").read_text())["steps"] == 52


def test_a_run_with_nothing_left_to_train_keeps_summary_json_valid(tmp_path: Path, sample_root: Path) -> None:
    data = f"data.root={sample_root / 'pix2pix'}"
    ranks.train(tmp_path / "run", data, "steps=2", world=1)
    ranks.train(tmp_path / "run", data, "steps=2", world=1)  # resumes at step 2: no step left, so no final loss
    summary = strict_json(tmp_path / "run" / "summary.json")
    assert summary["final_step"] == 2 and summary["final_loss"] is None
    assert [a["stop"]["reason"] for a in attempts(tmp_path / "run")] == ["finished", "finished"]
    assert (summary["failures"], summary["time_lost_s"]) == (0, 0)


def test_a_resume_without_any_checkpoint_warns(tmp_path: Path, sample_root: Path) -> None:
    data = f"data.root={sample_root / 'pix2pix'}"
    ranks.train(tmp_path / "run", data, "steps=2", world=1)
    shutil.rmtree(tmp_path / "run" / "checkpoints")
    result = ranks.train(tmp_path / "run", data, "steps=3", world=1)
    message = f"an earlier attempt ran, but {tmp_path / 'run' / 'checkpoints'} holds no usable checkpoint"
    assert f"warning: {message}" in result.log(0)
    assert attempts(tmp_path / "run")[-1]["warnings"][0].startswith(message)


def test_resume_without_profile_goes_on_in_the_shape_the_run_ran(reference_copy: Path) -> None:
    """The run ran on 2 local processes from its own profile file; --resume alone takes that profile up again
    (not the default one), and a flag changes one field of it."""
    recorded = json.loads((reference_copy / "job.json").read_text())["profile"]
    assert (recorded["executor"], recorded["gpus_per_node"], recorded["timeout_min"]) == ("local", 2, 60)
    one = submit("--resume", str(reference_copy), "--time", "30", "--wait", "steps=52")
    assert one.returncode == 0, one.stdout + one.stderr
    assert json.loads((reference_copy / "job.json").read_text())["profile"]["timeout_min"] == 30
    again = submit("--resume", str(reference_copy), "--wait", "steps=56")  # the last submission's shape
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((reference_copy / "job.json").read_text())["profile"] == recorded | {"timeout_min": 30}
    assert strict_json(reference_copy / "summary.json")["world_size"] == 2


def test_a_resume_on_fewer_processes_goes_on_from_submit(reference_copy: Path) -> None:
    """`--resume RUN --gpus-per-node 1` of a 2-process run: queued, resumed from its last checkpoint on one
    process, which accumulates the two micro-batches of each step (step_samples.jsonl records it)."""
    result = resume(reference_copy, "steps=52", "--gpus-per-node", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [a["resumed_step"] for a in attempts(reference_copy)] == [0, 48]
    assert [r["processes"] for r in map(json.loads, (reference_copy / "step_samples.jsonl").read_text().splitlines())][
        -5:
    ] == [2, 1, 1, 1, 1]


def test_a_resume_on_training_data_of_another_length_ends_the_run(
    golden: Golden, reference_copy: Path, sample_root: Path, tmp_path: Path
) -> None:
    """The job's backstop (the run's data is known only there): rank 0 names what changed in error.txt and the
    job ends before it trains or rewrites config.yaml."""
    data = Path(shutil.copytree(sample_root / "pix2pix", tmp_path / "pairs"))
    rows = (data / "pairs.csv").read_text().splitlines(keepends=True)
    (data / "pairs.csv").write_text("".join(rows[:-8]))  # 8 pairs fewer
    config = (reference_copy / "config.yaml").read_text()
    checkpoints = sorted(p.name for p in (reference_copy / "checkpoints").iterdir())
    result = resume(reference_copy, "steps=52", f"data.root={data}")
    assert result.returncode != 0, result.stdout + result.stderr
    failed = failure(reference_copy)  # one line (failure() checks it), its words in the golden file
    assert (failed["rank"], failed["kind"]) == (0, ""), failed  # a UserError: its message says it all
    golden(failed["message"])  # <tmp>/run/checkpoints/step_00000048.pt was saved training on 230 samples, ... 223
    assert (reference_copy / "config.yaml").read_text() == config
    assert sorted(p.name for p in (reference_copy / "checkpoints").iterdir()) == checkpoints
    assert [a["stop"]["reason"] for a in attempts(reference_copy)] == ["finished"]


RESIZE = ["steps=12", "batch_size=4", "checkpoint.every=4", "log.every=4", "log.image_every=0", "data.num_workers=0"]


def copy_checkpoint(source: Path, step: int, run_dir: Path) -> None:
    """A run folder holding `source`'s checkpoint of `step` alone: a resume goes on from it."""
    (run_dir / "checkpoints").mkdir(parents=True)
    for path in (source / "checkpoints").glob(f"step_{step:08d}.pt*"):
        (run_dir / "checkpoints" / path.name).write_bytes(path.read_bytes())


def step_samples(run_dir: Path) -> dict[int, tuple[str, int]]:
    lines = (run_dir / "step_samples.jsonl").read_text().splitlines()
    return {(r := json.loads(line))["step"]: (r["digest"], r["processes"]) for line in lines}


def final_weights(run_dir: Path) -> dict[str, Any]:
    import torch

    return torch.load(run_dir / "checkpoints" / "step_00000012.pt", weights_only=False)["model"]


@pytest.mark.parametrize("task", ["pix2pix", "augmented"])
def test_a_run_resumed_on_fewer_then_more_processes_trains_on_the_same_samples_to_the_same_weights(
    task: str, sample_root: Path, tmp_path: Path
) -> None:
    """2 processes to step 4, 1 to step 8 (two micro-batches a step), 2 again to 12: every step's samples are
    the uninterrupted run's, and so are the weights, up to the order of a sum. The user task draws random
    augmentations and Dropout masks: each sample's and each micro-batch's own seeds keep them the same."""
    (tmp_path / "augmented.py").write_text(AUGMENTED)
    what = (
        [f"data.root={sample_root / 'pix2pix'}"]
        if task == "pix2pix"
        else [f"task={tmp_path / 'augmented.py'}:Augmented"]
    )
    args = [*what, *RESIZE]
    reference = ranks.train(tmp_path / "reference", *args, world=2).run_dir
    fewer, more = tmp_path / "fewer", tmp_path / "more"
    copy_checkpoint(reference, 4, fewer)
    ranks.train(fewer, *args, world=1)
    copy_checkpoint(fewer, 8, more)
    ranks.train(more, *args, world=2)
    expected = {step: digest for step, (digest, _) in step_samples(reference).items()}
    assert {s: d for s, (d, _) in step_samples(fewer).items()} == {s: expected[s] for s in range(5, 13)}
    assert {s: d for s, (d, _) in step_samples(more).items()} == {s: expected[s] for s in range(9, 13)}
    assert {n for _, n in step_samples(fewer).values()} == {1}

    got, want = final_weights(more), final_weights(reference)
    gap = max(float((got[k].float() - want[k].float()).abs().max()) for k in want)
    assert gap < 1e-5, gap
    assert [a["resumed_step"] for a in attempts(more)] == [8]


def test_a_resume_that_would_leave_slurm_without_a_profile_is_refused(reference_copy: Path) -> None:
    record = json.loads((reference_copy / "job.json").read_text())
    del record["profile"]
    (reference_copy / "job.json").write_text(json.dumps(record | {"executor": "slurm"}))
    result = submit("--resume", str(reference_copy))
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr == (
        f"error: {reference_copy} ran with the slurm executor, and job.json does not say which profile; "
        "pass --profile NAME to resume it there\n"
    )


def test_a_resume_that_changes_the_task_says_so(reference_copy: Path) -> None:
    result = resume(reference_copy, "task=classify")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == (
        "error: --resume cannot change task (pix2pix -> classify): the checkpoints hold the old model; drop task=..., "
        "or start a new run without --resume\n"
    )


def test_two_resumes_at_the_same_moment_one_is_refused(reference_copy: Path) -> None:
    """Each --resume holds the run from its checks until job.json names its job: of two started together one
    is queued, the other refused, and job.json's history grows by one."""
    history = len(json.loads((reference_copy / "job.json").read_text()).get("history", []))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "jobs.submit", "--resume", str(reference_copy), "steps=400"]
    both = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in "ab"
    ]
    outputs = [p.communicate(timeout=120) for p in both]
    codes = sorted(p.returncode for p in both)
    assert codes == [0, 2], outputs
    [refusal] = [err for (_, err), p in zip(outputs, both, strict=True) if p.returncode == 2]
    assert "another --resume of" in refusal or "is still running as job" in refusal, refusal
    assert len(json.loads((reference_copy / "job.json").read_text())["history"]) == history + 1
    subprocess.run([sys.executable, "-m", "jobs.cancel", str(reference_copy)], cwd=ROOT, env=env, capture_output=True)

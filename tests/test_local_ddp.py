"""Real two-process DDP runs (gloo on CPU) through the local profile."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import ROOT, run_dirs, submit, write_profile

SMALL = ["steps=24", "log.every=4", "log.image_every=12", "checkpoint.every=8", "batch_size=4"]


def run_local(profile: Path, sample_root: Path, *extra: str) -> Path:
    result = submit("--profile", str(profile), "--wait", f"data.root={sample_root / 'pix2pix'}", *SMALL, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    [run_dir] = [
        Path(line.split(":", 1)[1].strip()) for line in result.stdout.splitlines() if line.startswith("run directory:")
    ]
    return run_dir


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory, sample_root: Path) -> Path:
    """One run with the default settings, read (never changed) by the tests that need one."""
    folder = tmp_path_factory.mktemp("default")
    return run_local(
        write_profile(folder, f"executor: local\ngpus_per_node: 2\nrun_root: {folder / 'runs'}\n"), sample_root
    )


def test_two_process_run_writes_scalars_images_and_summary(default_run: Path) -> None:
    run_dir = default_run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    assert {"train/loss", "train/lr", "perf/samples_per_s", "perf/step_time_s", "perf/data_wait_s"} <= set(
        tags["scalars"]
    )
    assert [e.step for e in events.Scalars("train/loss")] == [4, 8, 12, 16, 20, 24]
    images = events.Images("images/input_target_output")
    assert [e.step for e in images] == [12, 24] and images[0].width == 3 * 64 + 4 * 2  # input | target | output
    result = summary(run_dir)
    assert result["world_size"] == 2 and result["final_step"] == 24 and len(result["weights_sha256"]) == 64
    # The summary's train loss is the last log interval's mean (4 steps), the value TensorBoard shows at 24.
    assert result["final_loss"] == pytest.approx(events.Scalars("train/loss")[-1].value, rel=1e-6)
    assert [e.value for e in events.Scalars("train/epoch")][-1] == pytest.approx(24 / (256 // 2 // 4))
    # The hash is reproducible for a given thread count (reductions split by threads), so it is recorded.
    assert result["torch_threads"] == max(1, len(os.sched_getaffinity(0)) // 2)
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt")) == [
        "step_00000008.pt",
        "step_00000016.pt",
        "step_00000024.pt",
    ]


def test_same_seed_same_weights(default_run: Path, local_profile: Path, sample_root: Path) -> None:
    first = default_run
    # DDP's bucket settings change how gradients travel, not their values; a loader worker (trainer/loader.py's
    # shared buffers) changes how batches arrive, not what they hold: the default run loads in-process here.
    buckets = ["dist.bucket_cap_mb=0.05", "dist.gradient_as_bucket_view=true", "dist.static_graph=true"]
    second = run_local(local_profile, sample_root, *buckets, "data.num_workers=1")
    assert summary(first)["weights_sha256"] == summary(second)["weights_sha256"]
    assert summary(first)["final_loss"] == summary(second)["final_loss"]
    third = run_local(local_profile, sample_root, "seed=1")
    assert summary(third)["weights_sha256"] != summary(first)["weights_sha256"]


def val_scalars(run_dir: Path) -> dict[int, float]:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {e.step: e.value for e in events.Scalars("val/l1")}  # an evaluation done again after a kill: its last


def test_killed_run_resumes_to_the_same_weights(local_profile: Path, sample_root: Path, tmp_path: Path) -> None:
    """...and evaluates at the same steps with the same numbers: evaluation is part of resume."""
    validated = ["steps=48", "data.val_fraction=0.1", "eval.every=8"]
    reference = run_local(local_profile, sample_root, *validated)
    args = ["--profile", str(local_profile), "--wait", f"data.root={sample_root / 'pix2pix'}", *SMALL, *validated]
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.submit", *args],
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not list((tmp_path / "runs").glob("*/checkpoints/step_00000016.pt.sha256")):
        assert time.monotonic() < deadline and proc.poll() is None, "no checkpoint appeared"
        time.sleep(0.05)
    [interrupted] = [d for d in run_dirs(tmp_path / "runs") if d != reference]
    controller = int(json.loads((interrupted / "job.json").read_text())["job_id"])
    os.killpg(controller, signal.SIGKILL)  # the local controller and both tasks: a session of their own
    os.killpg(proc.pid, signal.SIGKILL)  # the submitter
    proc.wait()
    assert not (interrupted / "summary.json").exists(), "the run finished before it was killed"

    result = submit("--profile", str(local_profile), "--wait", "--resume", str(interrupted))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "resumed from" in result.stdout
    assert summary(interrupted)["weights_sha256"] == summary(reference)["weights_sha256"]
    # Rank 0 alone read the checkpoint; rank 1 got it over the process group (checkpoint.broadcast).
    job = json.loads((interrupted / "job.json").read_text())["job_id"]
    reads = [
        re.search(
            r"checkpoint bytes read by this rank: (\d+)", (interrupted / "logs" / f"{job}_{r}_log.out").read_text()
        )
        for r in (0, 1)
    ]
    assert reads[0] and reads[1] and int(reads[0].group(1)) > 0 and int(reads[1].group(1)) == 0
    assert summary(interrupted)["val_metrics"] == summary(reference)["val_metrics"]
    assert {k: v for k, v in summary(interrupted)["best"].items() if k != "path"} == {
        k: v for k, v in summary(reference)["best"].items() if k != "path"
    }
    assert val_scalars(interrupted) == val_scalars(reference) and sorted(val_scalars(reference)) == [
        8,
        16,
        24,
        32,
        40,
        48,
    ]


def test_local_timeout_signal_saves_requeues_and_resumes(tmp_path: Path, sample_root: Path) -> None:
    """The local controller sends the profile's signal signal_delay_s before its time limit, then restarts the
    tasks. USR1, not submitit's USR2: the profile's signal is the one the tasks wait for."""
    plain = tmp_path / "plain.yaml"
    plain.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'plain'}\n")
    uninterrupted = run_local(plain, sample_root, "steps=200", "checkpoint.every=1000", "log.every=50")
    assert summary(uninterrupted)["restarts"] == 0
    # Time the signal from this machine's own uninterrupted run: half way through training (about 3 s either
    # way: start-up varies from run to run), so the first attempt stops mid-run and the second, which has the
    # other half left, finishes before its own signal.
    [attempt] = json.loads((uninterrupted / "attempts.json").read_text())
    first_step = attempt["started"] - attempt["startup"]["process_start"]
    signal_after = first_step + 0.5 * (attempt["stop"]["time"] - attempt["started"])
    assert signal_after < 55, f"the run is too slow for a 60 s limit: {attempt}"
    profile = tmp_path / "short.yaml"
    profile.write_text(
        f"executor: local\ngpus_per_node: 2\ntimeout_min: 1\nsignal_delay_s: {int(60 - signal_after)}\n"
        f"max_num_timeout: 50\nsignal: USR1\nrun_root: {tmp_path / 'runs'}\n"
    )
    reference = run_local(profile, sample_root, "steps=200", "checkpoint.every=1000", "log.every=50")
    assert summary(reference)["restarts"] >= 1, "the run ended before the signal"
    assert summary(reference)["timeouts"] == summary(reference)["restarts"]
    assert summary(reference)["steps_recomputed"] == 0
    assert summary(reference)["weights_sha256"] == summary(uninterrupted)["weights_sha256"]


def test_logs_follow_streams_rank_0_until_the_job_ends(local_profile: Path, sample_root: Path) -> None:
    # Output to a file, not a pipe: the job's processes inherit it, and a pipe would hold us until they end.
    out = local_profile.parent / "submit.out"
    with out.open("w") as f:
        cmd = [sys.executable, "-m", "jobs.submit", "--profile", str(local_profile), *SMALL]
        result = subprocess.run([*cmd, f"data.root={sample_root / 'pix2pix'}"], cwd=ROOT, stdout=f, timeout=120)
    assert result.returncode == 0, out.read_text()
    [run_dir] = run_dirs(local_profile.parent / "runs")
    assert not (run_dir / "summary.json").exists(), "the job ended before jobs.logs started: make it longer"
    follow = subprocess.run(
        [sys.executable, "-m", "jobs.logs", str(run_dir), "--follow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert follow.returncode == 0, follow.stderr
    # It returned only once the job had ended, with rank 0's last line read.
    assert "done: step 24" in follow.stdout


def test_local_run_inside_another_launcher_trains_as_one_job(
    local_profile: Path, sample_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Submitted from a torchrun worker inside an srun step: the tasks see none of the caller's variables."""
    leaked = {"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "GROUP_RANK": "0"}
    leaked |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "SLURM_JOB_ID": "7", "SLURM_PROCID": "0"}
    leaked |= {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_CPUS_PER_TASK": "1"}
    for key, value in leaked.items():
        monkeypatch.setenv(key, value)
    run_dir = run_local(local_profile, sample_root)
    assert summary(run_dir)["world_size"] == 2
    assert not (run_dir / "errors").exists()


def test_a_cosine_schedule_decays_to_min_lr(local_profile: Path, sample_root: Path) -> None:
    schedule = ["optim.schedule=cosine", "optim.min_lr=0.0001", "optim.warmup_steps=4"]
    run_dir = run_local(local_profile, sample_root, *schedule)
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    lrs = [e.value for e in events.Scalars("train/lr")]  # the rate of the next step, logged every 4 steps
    assert lrs[0] == pytest.approx(2e-3) and lrs[-1] == pytest.approx(1e-4)
    assert all(a > b for a, b in zip(lrs, lrs[1:], strict=False))

"""Real two-process DDP runs (gloo on CPU) through the local profile."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests import ranks
from tests.support import REFERENCE, ROOT, attempts, poll, run_dir_of, run_dirs, submit, summary, val_scalars
from trainer.run.rundir import RunDir

SMALL = ["steps=24", "log.every=4", "log.image_every=12", "checkpoint.every=8", "batch_size=4"]


def run_local(profile: Path, sample_root: Path, *extra: str, timeout: float = 300) -> Path:
    args = ["--profile", str(profile), "--wait", f"data.root={sample_root / 'pix2pix'}", *SMALL, *extra]
    result = submit(*args, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir_of(result)


def test_a_two_process_run_writes_scalars_images_checkpoints_validation_and_summary(reference_run: Path) -> None:
    run_dir = reference_run
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    assert {"train/loss", "train/lr", "perf/samples_per_s", "perf/step_time_s", "perf/data_wait_s"} <= set(
        tags["scalars"]
    )
    assert [e.step for e in events.Scalars("train/loss")] == list(range(4, 49, 4))
    images = events.Images("images/input_target_output")
    assert [e.step for e in images] == [24, 48] and images[0].width == 3 * 64 + 4 * 2  # input | target | output
    result = summary(run_dir)
    assert result["world_size"] == 2 and result["final_step"] == 48 and len(result["weights_sha256"]) == 64
    # The summary's train loss is the last log interval's mean (4 steps), the value TensorBoard shows at 48.
    assert result["final_loss"] == pytest.approx(events.Scalars("train/loss")[-1].value, rel=1e-6)
    train_samples = 256 - round(0.1 * 256)  # data.val_fraction=0.1 of the 256 sample pairs held out
    assert [e.value for e in events.Scalars("train/epoch")][-1] == pytest.approx(48 / (train_samples // 2 // 4))
    # The hash is reproducible for a given thread count (reductions split by threads), so it is recorded.
    assert result["torch_threads"] == max(1, len(os.sched_getaffinity(0)) // 2)
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step_*.pt")) == [
        "step_00000032.pt",
        "step_00000040.pt",
        "step_00000048.pt",
    ]
    # Validation on the held-out pairs, every 8 steps: in --wait's output and in summary.json.
    printed = (run_dir.parents[1] / "submit.out").read_text()
    assert all(f"validation at step {step}: l1=" in printed for step in range(8, 49, 8)), printed
    assert set(result["val_metrics"]) == {"l1", "psnr"} and result["val_metrics"]["psnr"] > 0
    assert sorted(val_scalars(run_dir)) == list(range(8, 49, 8))
    # The cosine schedule reaches the optimizer: the rate of the next step, logged every 4 steps, decays to min_lr.
    lrs = [e.value for e in events.Scalars("train/lr")]
    assert lrs[0] == pytest.approx(2e-3) and lrs[-1] == pytest.approx(1e-4)
    assert all(a > b for a, b in zip(lrs, lrs[1:], strict=False))


def test_same_seed_same_weights(reference_run: Path, tmp_path: Path, sample_root: Path) -> None:
    """The ranks forked here train what the submitted job trained, bit for bit."""
    data = f"data.root={sample_root / 'pix2pix'}"
    # DDP's bucket settings change how gradients travel, not their values; a loader worker (torch's DataLoader)
    # changes how batches arrive, not what they hold: the reference loads in-process. The ranks meet through a
    # file in the run directory (dist.init_method=file) rather than TCP: how they meet, not what they train.
    buckets = ["dist.bucket_cap_mb=0.05", "dist.gradient_as_bucket_view=true", "dist.static_graph=true"]
    second = ranks.train(
        tmp_path / "second", data, *REFERENCE, *buckets, "data.num_workers=1", "dist.init_method=file"
    ).run_dir
    assert summary(reference_run)["weights_sha256"] == summary(second)["weights_sha256"]
    assert not list((second / "rendezvous").glob("store_*"))  # the attempt's file, gone with it
    assert summary(reference_run)["final_loss"] == summary(second)["final_loss"]
    third = ranks.train(tmp_path / "third", data, *REFERENCE, "seed=1").run_dir
    assert summary(third)["weights_sha256"] != summary(reference_run)["weights_sha256"]


def test_killed_run_resumes_to_the_same_weights(reference_run: Path, sample_root: Path, tmp_path: Path) -> None:
    """...and evaluates at the same steps with the same numbers: evaluation is part of resume."""
    args = [f"data.root={sample_root / 'pix2pix'}", *REFERENCE]
    interrupted = tmp_path / "run"
    started = ranks.start(interrupted, *args)
    checkpoint = interrupted / "checkpoints" / "step_00000016.pt.sha256"
    poll("checkpoint 16", lambda: checkpoint.exists() or any(p.exitcode is not None for p in started.processes))
    started.kill()  # both ranks, SIGKILL: as a lost node or the OOM killer ends them
    assert not RunDir(interrupted).finished(), "the run finished before it was killed"

    resumed = ranks.train(interrupted, *args)  # the same folder again: what a requeued job does
    first, *_, last = attempts(interrupted)
    assert first["resumed_step"] == 0 and last["resumed_step"] >= 16  # the restart resumed from a checkpoint
    assert summary(interrupted)["weights_sha256"] == summary(reference_run)["weights_sha256"]
    # Rank 0 alone read the checkpoint; rank 1 got it over the process group (checkpoint.broadcast).
    reads = [re.search(r"checkpoint bytes read by this rank: (\d+)", resumed.log(r)) for r in (0, 1)]
    assert reads[0] and reads[1] and int(reads[0].group(1)) > 0 and int(reads[1].group(1)) == 0
    assert summary(interrupted)["val_metrics"] == summary(reference_run)["val_metrics"]
    assert {k: v for k, v in summary(interrupted)["best"].items() if k != "path"} == {
        k: v for k, v in summary(reference_run)["best"].items() if k != "path"
    }
    assert val_scalars(interrupted) == val_scalars(reference_run)


def test_a_run_over_four_ranks_resumes_to_the_same_weights(sample_root: Path, tmp_path: Path) -> None:
    """Over more than two ranks a gradient's sum depends on where it sits in DDP's bucket. DDP lays its buckets
    out again after its first backward, so a resumed attempt, whose first step came before that, trained
    differently from the uninterrupted run (2 ranks add in either order to the same bits; 4 do not)."""
    args = [f"data.root={sample_root / 'pix2pix'}", "steps=12", "batch_size=2", "log.every=4", "log.image_every=0"]
    args += ["checkpoint.every=6", "data.num_workers=0"]
    reference = ranks.train(tmp_path / "reference", *args, world=4).run_dir
    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    for path in (reference / "checkpoints").glob("step_00000006.pt*"):
        (resumed / "checkpoints" / path.name).write_bytes(path.read_bytes())
    ranks.train(resumed, *args, world=4)
    assert [a["resumed_step"] for a in attempts(resumed)] == [6]  # from the one checkpoint there
    assert summary(resumed)["weights_sha256"] == summary(reference)["weights_sha256"]


@pytest.mark.slow  # its signal is timed from this machine's own uninterrupted run
def test_local_timeout_signal_saves_requeues_and_resumes(tmp_path: Path, sample_root: Path) -> None:
    """The local controller sends the profile's signal signal_delay_s before its time limit, then restarts the
    tasks. USR1, not submitit's USR2: the profile's signal is the one the tasks wait for."""
    plain = tmp_path / "plain.yaml"
    plain.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'plain'}\n")
    uninterrupted = run_local(plain, sample_root, "steps=200", "checkpoint.every=1000", "log.every=50")
    assert summary(uninterrupted)["restarts"] == 0
    # Time the signal from this machine's own run: under half way through training (less when the start-up is
    # slow: the signal must come within the minute), so the first attempt stops mid-run; a later attempt that is
    # signalled too saves and is requeued again: each stop is a timeout. Each attempt takes the full minute, and a
    # slower machine needs more of them: its wait is not the usual 300 s. The other workers' load varies: a run
    # that went faster than the one it was timed from and ended before the signal times the next try.
    timed_from = uninterrupted
    for attempt_at in range(3):
        [attempt] = json.loads((timed_from / "attempts.json").read_text())
        first_step = attempt["started"] - attempt["startup"]["process_start"]
        training = attempt["stop"]["time"] - attempt["started"]
        fraction = min(0.45, (50 - first_step) / training)
        assert fraction >= 0.2, f"the run is too slow for a 60 s limit: {attempt}"
        signal_after = first_step + fraction * training
        profile = tmp_path / f"short{attempt_at}.yaml"
        profile.write_text(
            f"executor: local\ngpus_per_node: 2\ntimeout_min: 1\nsignal_delay_s: {int(60 - signal_after)}\n"
            f"max_num_timeout: 50\nsignal: USR1\nrun_root: {tmp_path / f'runs{attempt_at}'}\n"
        )
        reference = run_local(profile, sample_root, "steps=200", "checkpoint.every=1000", "log.every=50", timeout=900)
        if summary(reference)["restarts"]:
            break
        timed_from = reference
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
    assert not RunDir(run_dir).finished(), "the job ended before jobs.logs started: make it longer"
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


def test_timing_the_all_reduces_changes_no_bit_of_the_weights_on_three_ranks(tmp_path: Path, sample_root: Path) -> None:
    """The straggler figures' comm hook scales gradients as DDP's own path does (a multiply by 1/3 differs from
    a divide by 3 in the last bit): the same weights with log.stragglers on and off."""
    args = [f"data.root={sample_root / 'pix2pix'}", "steps=6", "batch_size=2", "log.every=2", "log.image_every=0"]
    on = ranks.train(tmp_path / "on", *args, "log.stragglers=true", world=3).run_dir
    off = ranks.train(tmp_path / "off", *args, "log.stragglers=false", world=3).run_dir
    assert summary(on)["weights_sha256"] == summary(off)["weights_sha256"]

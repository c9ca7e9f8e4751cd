"""Pure parts of save-on-signal and resume: time-left parsing, stop reasons, attempts, checkpoints."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support import ROOT, poll
from tests.support import state as checkpoint_state
from trainer import checkpoint
from trainer.supervise.attempts import Attempts, parse_time_left, stop_reason


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0:29", 29),
        ("1:00", 60),
        ("12:34:56", 45296),
        ("2-01:00:00", 176400),
        ("UNLIMITED", None),
        ("", None),
        ("INVALID", None),
    ],
)
def test_parse_squeue_time_left(text: str, seconds: int | None) -> None:
    assert parse_time_left(text) == seconds


@pytest.mark.parametrize(
    ("time_left", "delay", "reason"),
    [
        (30, 30, "timeout"),
        (55, 30, "timeout"),
        (120, 30, "preempted"),
        (100, 120, "timeout"),
        (3600, 120, "preempted"),
        (None, 120, "preempted"),
        (200, 300, "timeout"),
    ],
)
def test_stop_reason_asks_how_much_time_is_left(time_left: int | None, delay: int, reason: str) -> None:
    # A 5-minute job preempted at minute 1 is a preemption, although submitit would count a timeout.
    assert stop_reason(time_left, delay) == reason


def test_attempts_count_restarts_and_recomputed_steps(tmp_path: Path) -> None:
    first = Attempts(tmp_path)
    first.start(resumed_step=0, restart_count=0)
    first.stop("preempted", step=40)
    second = Attempts(tmp_path)  # a new process reads the history back
    assert second.start(resumed_step=40, restart_count=1)["steps_recomputed"] == 0
    (tmp_path / "progress.json").write_text(json.dumps({"step": 70, "time": 0}))  # then it dies at step 70
    third = Attempts(tmp_path)
    assert third.start(resumed_step=60, restart_count=2)["steps_recomputed"] == 10
    third.stop("timeout", step=80)
    totals = Attempts(tmp_path).totals()
    assert {k: totals[k] for k in ("restarts", "preemptions", "failures", "timeouts", "steps_recomputed")} == {
        "restarts": 2,
        "preemptions": 1,
        "failures": 1,
        "timeouts": 1,
        "steps_recomputed": 10,
    }


def test_newest_valid_checkpoint_wins_and_broken_ones_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for step in (5, 10, 15):
        checkpoint.Writer(background=False).save(tmp_path, step, checkpoint_state(step), keep=3)
    newest = tmp_path / "step_00000015.pt"
    newest.write_bytes(newest.read_bytes()[:50])  # torn
    (tmp_path / "step_00000020.pt").write_bytes(b"no checksum beside it")  # killed before its checksum
    state, path = checkpoint.load_latest(tmp_path, torch.device("cpu"))  # type: ignore[misc]
    assert path.name == "step_00000010.pt" and state["model"]["w"][0].item() == 10
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and str(newest) in err and "step_00000020.pt" in err


def test_only_the_newest_k_are_kept(tmp_path: Path) -> None:
    for step in range(1, 6):
        checkpoint.Writer(background=False).save(tmp_path, step, {"step": step}, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_00000004.pt",
        "step_00000004.pt.sha256",
        "step_00000005.pt",
        "step_00000005.pt.sha256",
    ]


@pytest.mark.job
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_full_disk_is_a_clear_error_and_keeps_the_previous_checkpoint(tmp_path: Path, sample_root: Path) -> None:
    args = [f"data.root={sample_root / 'pix2pix'}", "checkpoint.every=2", "steps=4", "log.image_every=0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def train(run_dir: Path) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "trainer", f"run_dir={run_dir}", *args]
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)

    probe = train(tmp_path / "probe")
    assert probe.returncode == 0, probe.stderr
    size = (tmp_path / "probe" / "checkpoints" / "step_00000002.pt").stat().st_size
    small = tmp_path / "small"
    small.mkdir()
    # Room for one checkpoint and the small files beside it, not for a second one.
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={int(size * 1.6) + 256 * 1024}", "tmpfs", str(small)], check=True
    )
    try:
        result = train(small / "run")
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: no space left writing ") and "step_00000004.pt" in result.stderr
        assert result.stderr.count("\n") == 1
        state = checkpoint.load_latest(small / "run" / "checkpoints", torch.device("cpu"))
        assert state is not None and state[1].name == "step_00000002.pt"
        assert not list((small / "run" / "checkpoints").glob(".*tmp"))  # no torn temporary left behind
    finally:
        subprocess.run(["umount", str(small)], check=True)


@pytest.mark.job
def test_a_disk_too_full_for_any_record_is_still_one_line(tmp_path: Path, sample_root: Path) -> None:
    """The run's disk fills up (another writer) while it trains: no rank can write its error, the controller
    not even its exit codes; --wait and jobs.status still say why, naming the folder and its free space."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(disk)], check=True)
    try:
        profile = tmp_path / "p.yaml"
        profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {disk / 'runs'}\n")
        args = [f"data.root={sample_root / 'pix2pix'}", "steps=100000", "log.every=1", "checkpoint.every=100000"]
        cmd = [sys.executable, "-m", "jobs.submit", "--profile", str(profile), "--wait", *args, "log.image_every=0"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        waiting = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        poll("training", lambda: list(disk.glob("runs/*/progress.json")), timeout=120)
        filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)  # everything that is left (unbuffered:
        try:  # a buffered file would raise again as it closes)
            while True:
                os.write(filler, b"\0" * (1 << 20))
        except OSError:
            pass
        finally:
            os.close(filler)
        _, stderr = waiting.communicate(timeout=120)
        [run_dir] = [p.parent for p in disk.glob("runs/*/config.yaml")]
        assert waiting.returncode == 1, stderr
        # No rank could record its error; or one could, in the few bytes a rank's exit freed (its heartbeat
        # file): either way one line, naming the disk and its free space.
        nowhere = f"error: no space left in {run_dir} (0.0 MiB free on its disk): no rank could record its error there"
        recorded = re.compile(
            rf"error: rank \d on \S+: no space left writing {re.escape(str(run_dir))}/\S+ \(0\.0 MiB free"
        )
        line = stderr.splitlines()[0] if stderr else ""
        assert stderr.count("\n") == 1 and (line.startswith(nowhere) or recorded.match(line)), stderr
        status = subprocess.run(
            [sys.executable, "-m", "jobs.status", str(run_dir)], env=env, capture_output=True, text=True
        )
        assert line in status.stdout, status.stdout
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_the_requeue_module_copied_alone_into_a_project_works(tmp_path: Path) -> None:
    """README: trainer/requeue/__init__.py is a few lines you may copy instead of importing the project. The
    copy, alone in a folder and with the project not installed (-S), imports and takes the profile's signal."""
    import shutil

    shutil.copy(ROOT / "trainer" / "requeue" / "__init__.py", tmp_path / "requeue.py")
    script = "import os, signal, requeue\nrequeue.install()\nos.kill(os.getpid(), signal.SIGUSR1)\nprint(requeue.requested())\n"
    done = subprocess.run(
        [sys.executable, "-S", "-c", script], cwd=tmp_path, capture_output=True, text=True,
        env={"REQUEUE_SIGNAL": "USR1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout == "True\n", done.stdout + done.stderr


def test_a_peer_error_as_the_job_stops_for_a_requeue_is_the_stops_consequence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank's command failed on its lost peer before its task saw the requeue signal (a peer's task saw it
    first and stopped its command): once the signal's file is there, the rank stopped for the requeue, not
    failed. Without the signal, or with an error of its own, it failed."""
    from trainer.supervise import attempt as attempts
    from trainer.supervise.launcher import DistEnv
    from trainer.supervise.script import Ended, after_the_signal

    attempt = str(tmp_path / "attempt_5_0")
    env = DistEnv("slurm", 0, 0, 2, 1, 0, 2, "node1", 20005, "5", 1, attempt=attempt)
    monkeypatch.setattr(attempts, "node_local", lambda name: tmp_path / "node.signal")
    gloo = Ended(1, error="RuntimeError: [gloo/transport/tcp/pair.cc:534] Read error: Connection reset by peer")
    own = Ended(1, error="ValueError: bad batch at step 3")
    assert after_the_signal(gloo, env, wait_s=0.2) == gloo
    (tmp_path / "node.signal").touch()
    stopped = after_the_signal(gloo, env, wait_s=0.2)
    assert stopped.signalled and (stopped.code, stopped.error) == (1, "")
    assert after_the_signal(own, env, wait_s=0.2) == own

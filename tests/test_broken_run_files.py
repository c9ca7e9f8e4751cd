"""An empty or corrupt file in a run directory is one line naming it and the fix, never a traceback or a guess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, submit
from tests.messages import Golden, raises, refused
from trainer.entry import record_error
from trainer.env.launcher import resolve
from trainer.errors import UserError
from trainer.run.prepare import load_config_file
from trainer.supervise.attempts import Attempts

BROKEN = {"empty": "", "torn": '{"job_id": "12', "misshapen": '{"x": 1}'}


def status(target: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "jobs.status", str(target)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A finished local run, as jobs.status sees it."""
    run = tmp_path / "runs" / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("steps: 20\n")
    record = {"job_id": "999999999", "executor": "local", "log": str(run / "logs" / "1_0_log.out"), "tasks": 2}
    (run / "job.json").write_text(json.dumps(record))
    (run / "progress.json").write_text(json.dumps({"step": 20, "time": 0}))
    return run


@pytest.mark.parametrize("text", ["", "steps: [20\n", "- steps\n"], ids=["empty", "corrupt", "a-list"])
def test_resume_refuses_a_broken_config(golden: Golden, text: str, run_dir: Path, local_profile: Path) -> None:
    # An empty config.yaml must not resume with the defaults and the sample data.
    (run_dir / "config.yaml").write_text(text)
    result = submit("--profile", str(local_profile), "--resume", str(run_dir))
    refused(result, golden, str(run_dir / "config.yaml"))
    assert not (run_dir / "logs").exists()  # nothing was submitted


def test_an_empty_config_is_refused(golden: Golden, tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("\n")
    with raises(golden, str(tmp_path / "config.yaml")):
        load_config_file(tmp_path)


@pytest.mark.parametrize("name", ["job.json", "progress.json", "summary.json"])
@pytest.mark.parametrize("kind", BROKEN)
def test_status_names_a_broken_file(golden: Golden, name: str, kind: str, run_dir: Path) -> None:
    (run_dir / name).write_text(BROKEN[kind])
    refused(status(run_dir), golden, f"{run_dir / name} is ")


def test_status_shows_the_newest_checkpoint_with_a_checksum(run_dir: Path) -> None:
    folder = run_dir / "checkpoints"
    for name in ("step_00000010.pt", "step_00000010.pt.sha256", "step_00000020.pt"):  # 20: torn by a kill
        (folder / name).write_text("x")
    result = status(run_dir)
    assert result.returncode == 0, result.stderr
    assert f"last checkpoint: {folder / 'step_00000010.pt'}\n" in result.stdout


@pytest.mark.parametrize("kind", BROKEN)
def test_broken_attempts_history_is_one_line_in_error_txt(golden: Golden, kind: str, tmp_path: Path) -> None:
    (tmp_path / "attempts.json").write_text(BROKEN[kind])
    with pytest.raises(UserError) as raised:
        Attempts(tmp_path)
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'attempts.json'} is ")
    golden(message)
    record_error(tmp_path, resolve({}), raised.value)  # what the task does with it
    lines = (tmp_path / "error.txt").read_text().splitlines()
    assert len(lines) == 1 and lines[0].endswith(message)


@pytest.mark.job
def test_trainer_stops_on_a_broken_attempts_history(golden: Golden, tmp_path: Path, sample_root: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "attempts.json").write_text("")
    cmd = [sys.executable, "-m", "trainer", f"run_dir={run}", f"data.root={sample_root / 'pix2pix'}", "steps=2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    refused(result, golden, str(run / "attempts.json"))
    assert (run / "error.txt").read_text().count("\n") == 1
    assert (run / "attempts.json").read_text() == ""  # kept for the user to look at


@pytest.mark.parametrize("kind", BROKEN)
def test_a_torn_progress_json_does_not_stop_the_next_attempt(kind: str, tmp_path: Path) -> None:
    """progress.json is written without fsync: after a node's crash it may be empty or torn. The next attempt
    starts, and records the crashed one as stopped where it started (no later progress known)."""
    first = Attempts(tmp_path)
    first.start(10, 0)
    (tmp_path / "progress.json").write_text(BROKEN[kind])
    second = Attempts(tmp_path)
    second.start(10, 1)
    stop = second.items[0]["stop"]
    assert (stop["reason"], stop["step"], stop["time"]) == ("failure", 10, first.items[0]["started"])

"""An empty or corrupt file in a run directory is one line naming it and the fix, never a traceback or a guess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.tracking import run_settings
from tests.messages import Golden, raises, refused
from tests.support import ROOT, submit
from trainer.entry.task import record_error
from trainer.errors import UserError
from trainer.run import ledger
from trainer.run.atomic import json_or_none, read_json
from trainer.run.prepare import load_config_file
from trainer.run.rundir import RunDir, summary_verdict
from trainer.supervise.attempts import Attempts
from trainer.supervise.launcher import resolve

BROKEN = {"empty": "", "torn": '{"job_id": "12', "misshapen": '{"x": 1}'}


def command(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`python -m ARGS` as a user runs it; a reader that hangs on a run file fails the test by its timeout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", *map(str, args)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def status(target: Path) -> subprocess.CompletedProcess[str]:
    return command("jobs.status", target)


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


# summary.json as the probe found it read four ways: its "finished" neither true nor false, cut short, empty, a
# list, a FIFO (None) in its place.
DAMAGED_SUMMARIES = {
    "finished-a-string": '{"finished": "yes", "final_step": 20}',
    "finished-null": '{"finished": null, "final_step": 20}',
    "truncated": '{"finished": true, "final_st',
    "empty": "",
    "a-list": "[20]",
    "a-fifo": None,
}


def put(path: Path, text: str | None) -> None:
    """`text` into `path`, or a FIFO there (None): what a reader that opens it blocks on for ever."""
    path.unlink(missing_ok=True)
    if text is None:
        os.mkfifo(path)
    else:
        path.write_text(text)


@pytest.mark.parametrize("kind", DAMAGED_SUMMARIES)
def test_every_reader_of_a_damaged_summary_says_the_same_line(
    golden: Golden, kind: str, run_dir: Path, local_profile: Path
) -> None:
    """One verdict on summary.json: jobs.status, jobs.wait and --resume refuse with the same line naming the
    file (never "finished", exit 0, or a traceback), and jobs.list shows the run damaged with its words."""
    path = run_dir / "summary.json"
    put(path, DAMAGED_SUMMARIES[kind])
    line = refused(status(run_dir), golden, str(path))
    for result in (
        command("jobs.wait", run_dir),
        submit("--profile", str(local_profile), "--resume", str(run_dir), "--dry-run", timeout=60),
    ):
        assert (result.returncode, result.stderr.strip()) == (2, line), result.stdout + result.stderr
    row = command("jobs.list", "--root", run_dir.parent).stdout.splitlines()[1]
    assert row.split()[3] == "damaged" and line.removeprefix("error: ").split("; ")[0] in row, row


@pytest.mark.parametrize(
    ("text", "finished"),
    [
        (None, False),  # no summary yet
        ('{"finished": false, "step": 3}', False),  # the live one, as the run goes
        ('{"finished": true, "final_step": 20}', True),
        ('{"final_step": 20}', True),  # an older version's finished run: no key
        ('{"finished": true, "command": ["python", "train.py"], "exit_code": 0}', True),  # a script's
    ],
)
def test_a_summary_that_can_be_read_is_finished_or_not(text: str | None, finished: bool, tmp_path: Path) -> None:
    if text is not None:
        (tmp_path / "summary.json").write_text(text)
    verdict = summary_verdict(tmp_path / "summary.json")
    assert (verdict.finished, verdict.damage) == (finished, "")
    assert RunDir(tmp_path).finished() is finished


def test_a_fifo_in_place_of_any_run_file_hangs_no_reader(run_dir: Path) -> None:
    """The run folder is data: its readers open regular files only. A finished run with a FIFO in place of
    every file but job.json and summary.json: jobs.status, .list, .top, .wait and .logs each answer (a
    refusal at most: a FIFO is no progress.json), none hangs or prints a traceback."""
    (run_dir / "summary.json").write_text('{"finished": true, "final_step": 20}')
    (run_dir / "logs").mkdir()
    (run_dir / "errors").mkdir()
    (run_dir / "provenance").mkdir()
    names = ["config.yaml", "attempts.json", "progress.json", "error.txt", "errors/rank_0.json"]
    names += ["provenance/submit.json", "logs/999999999_0_log.out", "logs/999999999_0_log.err"]
    for name in names:
        put(run_dir / name, None)
    for args in (["jobs.status"], ["jobs.top", "--once"], ["jobs.wait"], ["jobs.logs"], ["jobs.list", "--root"]):
        result = command(*args, run_dir if args[0] != "jobs.list" else run_dir.parent)
        assert result.returncode in (0, 2) and "Traceback" not in result.stderr, (args, result.stderr)


def test_a_binary_config_is_no_traceback_in_jobs_top(run_dir: Path) -> None:
    (run_dir / "config.yaml").write_bytes(b"\xff\xfe\x00steps: 20\n")
    assert run_settings(RunDir(run_dir)) == {}
    result = command("jobs.top", "--once", run_dir)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr


def test_a_non_finite_number_is_no_figure(golden: Golden, tmp_path: Path) -> None:
    """A hand-edited attempts.json with NaN (or 1e999, an infinity): the ledger is not computed from it (no
    `nan s`), the tolerant reader sees no number there, and the history's own reader refuses it in one line."""
    attempts = [{"started": float("nan"), "stop": {"reason": "finished", "step": 20, "time": 1e999}}]
    (tmp_path / "attempts.json").write_text(json.dumps(attempts))
    assert ledger.read(tmp_path, state="COMPLETED") is None
    assert json_or_none(tmp_path / "attempts.json") == [{"started": None, "stop": attempts[0]["stop"] | {"time": None}}]
    with raises(golden, str(tmp_path / "attempts.json"), "NaN"):
        read_json(tmp_path / "attempts.json", "move it aside")

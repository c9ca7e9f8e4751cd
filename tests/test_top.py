"""jobs.top's table from heartbeats and run folders (the live flow is on the real cluster: tests/slurm)."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.ops import live as top_live
from jobs.tracking import Target
from tests.messages import Golden
from tests.support import ROOT

NOW = 1000.0


def beat(rank: int, step: int, written: float, section: str = "step", data_s: float = 0.005) -> dict:
    stats = {"step_s": 0.1, "step_s_median": 0.1, "data_share": 0.05, "data_s": data_s, "loss": 0.25,
             "host_mem_mb": 800.0}  # fmt: skip
    return {"rank": rank, "host": f"node{rank + 1}", "step": step, "section": section, "since": written,
            "written": written, "progressed": written - 0.5, "stats": stats}  # fmt: skip


def test_a_row_per_rank_with_stragglers_and_stopped_ranks_marked(tmp_path: Path) -> None:
    target = Target("7", "local", tmp_path, tmp_path)
    # Rank 2 waits 80 ms a step for its batch, the others 5 ms (its step time is theirs: DDP's all-reduce)
    beats = [beat(2, 40, NOW - 1, data_s=0.08), beat(0, 42, NOW), beat(1, 12, NOW - 30), beat(3, 41, NOW - 2)]
    rows = top_live._rows(target, beats, "RUNNING", NOW, stale_s=11.0)
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert [r["state"] for r in rows] == ["training", "hung", "training", "training"]
    assert [r.get("mark") for r in rows] == [None, "hung", "straggler", None]
    frame = {
        "head": {"job": "7", "state": "RUNNING", "attempt": 2, "restarted_in_job": 1, "goodput": 0.5},
        "rows": rows,
    }
    head, header, *lines = top_live.text(frame).splitlines()
    assert head == "job 7: RUNNING  attempt 2, restarted in the job 1x  goodput 50%"
    assert header.split() == list(top_live.COLUMNS)
    assert lines[1].split()[:4] == ["1", "node2", "hung", "12"] and "30.0" in lines[1].split()  # seen 30 s ago
    assert lines[2].split()[:5] == ["2", "node3", "training", "(straggler)", "40"]


def test_a_login_nodes_cells_are_printed_as_plain_text() -> None:
    row = {"rank": 0, "node": "n1\x1b[2J\nrm", "state": "training", "loss": "\x07"}
    assert top_live.cells(row)[1] == "n1?[2J?rm" and top_live.cells(row)[7] == "?"


def test_a_script_runs_rows_come_from_its_folder(tmp_path: Path) -> None:
    """No heartbeats from a -- COMMAND run's ranks: their nodes from provenance, the age of their logs."""
    (tmp_path / "provenance" / "ranks").mkdir(parents=True)
    for rank in (0, 1):
        (tmp_path / "provenance" / "ranks" / f"rank_{rank}.json").write_text(json.dumps({"rank": rank, "host": "vm"}))
        (tmp_path / f"7_{rank}_log.out").write_text("x")
    rows = top_live._rows(Target("7", "local", tmp_path, tmp_path), [], "RUNNING", NOW * 10**7, stale_s=11.0)
    assert [(r["rank"], r["node"], r["state"]) for r in rows] == [(0, "vm", "running"), (1, "vm", "running")]
    assert all(r["idle_s"] > 0 for r in rows)


@pytest.mark.parametrize(("args", "said"), [(["x", "--every", "0"], "--every 0 is out of range"),
                                            (["nowhere-run"], "nowhere-run")])  # fmt: skip
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], said: str) -> None:
    cmd = [sys.executable, "-m", "jobs.top", *args, "--once"]
    result = subprocess.run(cmd, cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and result.stderr.startswith("error: ") and said in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


def test_with_the_straggler_timing_a_rank_is_marked_by_its_own_work() -> None:
    """log.stragglers on: each rank's own data and compute time per step (its all-reduce wait left out)."""
    beats = [beat(r, 40, NOW) for r in range(3)]
    for rank, own in enumerate((0.05, 0.05, 0.09)):
        beats[rank]["stats"]["own_s"] = own
    rows = top_live._rows(Target("7", "local", None, None), beats, "RUNNING", NOW, stale_s=11.0)
    assert [r.get("mark") for r in rows] == [None, None, "straggler"]
    beats[1]["written"] = "garbage"  # a damaged beat: left out, the others shown
    assert [r["rank"] for r in top_live._rows(Target("7", "local", None, None), beats, "RUNNING", NOW, 11.0)] == [0, 2]


@pytest.mark.parametrize(
    ("config", "refused"),
    [("hang:\n  enabled: false\n", True), ("hang:\n  enabled: true\n", False), ("{broken", False), (None, False)],
)
def test_a_save_now_is_refused_where_no_watchdog_thread_reads_it(
    tmp_path: Path, config: str | None, refused: bool
) -> None:
    """Rank 0's watchdog threads take jobs.top's save request: with hang.enabled=false there are none, and the
    request would wait forever. A config.yaml that is missing or unreadable does not refuse it."""
    from jobs.ops import act
    from trainer.errors import UserError

    if config is not None:
        (tmp_path / "config.yaml").write_text(config)
    target = Target("7", "local", tmp_path, tmp_path)
    if refused:
        with pytest.raises(UserError, match=r"runs with hang.enabled=false: .*requeue it instead"):
            act._heartbeats_on(target)
    else:
        act._heartbeats_on(target)


def test_a_second_requeue_request_waits_for_the_next_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, golden: Golden
) -> None:
    """--requeue-now (r) twice within a second: the second is refused in one line, nothing sent, until the
    attempt the first one stopped has a successor in attempts.json (the ranks died of a second signal once)."""
    from jobs.ops import act
    from trainer.errors import UserError
    from trainer.supervise import live

    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(act, "_running", lambda target, between=None: target)
    monkeypatch.setattr(act.os, "kill", lambda pid, signum: sent.append((pid, signum)))
    target = Target("7", "local", tmp_path, tmp_path)
    attempts = tmp_path / "attempts.json"
    attempts.write_text(json.dumps([{"started": time.time() - 60}]))
    act.requeue_now(target)
    assert sent == [(7, signal.SIGUSR2)] and live.asked(tmp_path, "requeue")  # the signal sent, the request recorded
    with pytest.raises(UserError) as refused:
        act.requeue_now(target)
    asked = time.strftime("%H:%M:%S", time.localtime(live.asked(tmp_path, "requeue")))
    golden(str(refused.value), when=asked)  # one line, naming the job, the signal and when it went
    assert sent == [(7, signal.SIGUSR2)]
    attempts.write_text(json.dumps([{"started": time.time() - 60}, {"started": time.time() + 1}]))
    act.requeue_now(target)  # the job started again: a new request is its own
    assert len(sent) == 2
    (tmp_path / "top.request").write_text("{broken")  # a damaged request record refuses nothing
    act.requeue_now(target)
    assert len(sent) == 3


def test_every_command_finds_a_run_by_its_name_under_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """jobs.wait NAME, jobs.status NAME, ... as jobs.top NAME: the folder of that name under ./runs."""
    from jobs.tracking import find, find_all

    run_dir = tmp_path / "runs" / "px-pre"
    run_dir.mkdir(parents=True)
    (run_dir / "job.json").write_text(json.dumps({"job_id": "42", "executor": "slurm", "log": str(run_dir / "l")}))
    monkeypatch.chdir(tmp_path)
    assert find("px-pre").run_dir == run_dir.resolve() and find_all("px-pre")[0][1].job_id == "42"
    (tmp_path / "px-pre").mkdir()  # a folder of that name here that is no run does not hide it
    assert find("px-pre").run_dir == run_dir.resolve()
    (tmp_path / "px-pre" / "job.json").write_text(json.dumps({"job_id": "43", "executor": "slurm", "log": "l"}))
    assert find("px-pre").job_id == "43"  # a run here, given as a path, is that run

"""The goodput ledger from attempts.json: each second of the wall time in one part (trainer/run/ledger.py)."""

import json
import time
from pathlib import Path

import pytest

from jobs.tracking import progress
from tests.support import TIMELINE
from trainer.run import ledger
from trainer.run.ledger import PARTS
from trainer.run.rundir import RunDir
from trainer.supervise import attempts as attempts_module
from trainer.supervise.attempts import Attempts


def test_each_interval_goes_to_its_part_and_the_parts_add_up_to_the_wall_time() -> None:
    parts = ledger.ledger(0.0, TIMELINE, 344.0, ranks=4)
    assert parts["queued"] == 10 + 60  # before the first start, and the requeue's wait
    assert parts["starting"] == 5 + 6 + 4
    assert parts["checkpointing"] == 4 + 2
    assert parts["hung"] == 30  # last progress (200) to the hang named (230)
    assert parts["restarting"] == 10  # named (230) to the next process (240), in the allocation
    assert parts["recomputed"] == pytest.approx(20 * 100 / 100)  # 20 steps at attempt 3's pace (1 s a step)
    assert parts["training"] == pytest.approx((85 - 4) + 34 + (100 - 2 - 20))
    assert parts["wall"] == 344
    assert sum(parts[k] for k in PARTS) == pytest.approx(parts["wall"])
    assert parts["goodput"] == pytest.approx(parts["training"] / 344, abs=1e-4)
    assert parts["gpu_hours"] == pytest.approx(4 * (344 - 70) / 3600, abs=1e-4)


def test_a_run_still_going_counts_up_to_now_and_a_wait_after_a_requeue_is_queued() -> None:
    first = dict(TIMELINE[0])
    parts = ledger.ledger(0.0, [first], 130.0, ranks=4)
    assert (parts["queued"], parts["wall"]) == (10 + 30, 130)  # 100 to 130: back in the queue
    running = {k: v for k, v in first.items() if k != "stop"}
    parts = ledger.ledger(0.0, [running], 50.0, ranks=4)
    assert (parts["training"], parts["checkpointing"], parts["wall"]) == (31, 4, 50)
    assert sum(parts[k] for k in PARTS) == pytest.approx(50)


def test_a_sweeps_ledger_is_its_points_added_up() -> None:
    one = ledger.ledger(0.0, TIMELINE, 344.0, ranks=4)
    both = ledger.total([one, one])
    assert both["wall"] == 688 and both["goodput"] == one["goodput"]


def test_status_reads_the_summarys_ledger_else_attempts_and_none_from_a_damaged_record(tmp_path: Path) -> None:
    (tmp_path / "attempts.json").write_text(json.dumps(TIMELINE))
    (tmp_path / "provenance").mkdir()
    (tmp_path / "provenance" / "submit.json").write_text(json.dumps({"time": 0.0}))
    assert ledger.read(tmp_path, state="COMPLETED")["wall"] == 344  # type: ignore[index]
    now = time.time()
    assert ledger.read(tmp_path, state="RUNNING")["wall"] >= now - 0.01  # type: ignore[index]  (rounded to ms)
    finished = ledger.ledger(0.0, TIMELINE, 344.0, ranks=4)
    (tmp_path / "summary.json").write_text(json.dumps({"final_step": 12, "ledger": finished | {"wall": 345.0}}))
    assert ledger.read(tmp_path, state="COMPLETED")["wall"] == 345  # type: ignore[index]
    (tmp_path / "summary.json").write_text(json.dumps({"final_step": 12, "ledger": {"wall": 1.0}}))  # no parts
    assert ledger.read(tmp_path, state="COMPLETED") is None
    (tmp_path / "summary.json").unlink()
    (tmp_path / "attempts.json").write_text('[{"started": "soon"}]')
    assert ledger.read(tmp_path, state="COMPLETED") is None
    (tmp_path / "attempts.json").write_text("{not json")
    assert ledger.read(tmp_path, state="COMPLETED") is None


def test_the_status_line_names_goodput_and_the_largest_losses() -> None:
    line = ledger.line(ledger.ledger(0.0, TIMELINE, 344.0, ranks=4))
    assert line.startswith("56% of 344 s trained (queued 70 s, hung 30 s, recomputed 20 s, starting 15 s)"), line


def test_an_attempt_that_died_unrecorded_trains_only_up_to_its_last_progress(tmp_path: Path) -> None:
    """The last attempt recorded no stop (its ranks were killed): while the job is not running (failed, or
    pending after a requeue) it counts as training up to its last progress, not up to now."""
    crashed = [{k: v for k, v in TIMELINE[0].items() if k != "stop"}]
    (tmp_path / "attempts.json").write_text(json.dumps(crashed))
    (tmp_path / "progress.json").write_text(json.dumps({"step": 60, "time": 70.0}))
    (tmp_path / "provenance").mkdir()
    (tmp_path / "provenance" / "submit.json").write_text(json.dumps({"time": 0.0}))
    failed = ledger.read(tmp_path, state="FAILED")
    assert failed is not None and (failed["wall"], failed["training"]) == (70, 70 - 15 - 4)
    pending = ledger.read(tmp_path, state="PENDING")
    assert pending is not None and pending["training"] == 70 - 15 - 4 and pending["queued"] > 10
    running = ledger.read(tmp_path, state="RUNNING")
    assert running is not None and running["training"] > 1000  # up to now: it trains


def test_summary_json_carries_the_ledger_as_the_run_goes_and_says_finished_only_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0's Attempts writes summary.json with `"finished": false` and the ledger so far at each attempt's
    start and stop, and from the loop at most once a LIVE_SUMMARY_S; only the finished run's says true. The
    readers take the live one for what it is: not a finished run, not its last step."""
    (tmp_path / "provenance").mkdir()
    (tmp_path / "provenance" / "submit.json").write_text(json.dumps({"time": time.time() - 30}))
    files, record = RunDir(tmp_path), Attempts(tmp_path)
    record.start(0, 0)
    live = json.loads(files.summary.read_text())
    assert live["finished"] is False and set(PARTS) <= set(live["ledger"]) and live["ledger"]["queued"] >= 29
    assert not files.finished() and live["restarts"] == 0
    (tmp_path / "progress.json").write_text(json.dumps({"step": 10, "time": time.time()}))
    assert progress(tmp_path)[0] == 10  # progress.json's step, not the live summary's (it has no final_step)
    assert ledger.read(tmp_path, state="RUNNING")["wall"] >= live["ledger"]["wall"]  # type: ignore[index]

    record.items[-1]["started"] -= 10  # ten seconds of training so far
    record.summarise_every(10, blocked_s=0.5)  # under a minute since the last: not rewritten
    assert json.loads(files.summary.read_text())["as_of"] == live["as_of"]
    monkeypatch.setattr(attempts_module, "LIVE_SUMMARY_S", 0.0)
    record.summarise_every(10, blocked_s=0.5)
    again = json.loads(files.summary.read_text())
    assert again["step"] == 10 and again["ledger"]["checkpointing"] == 0.5 and again["ledger"]["training"] >= 9
    assert sum(again["ledger"][k] for k in PARTS) == pytest.approx(again["ledger"]["wall"], abs=0.01)

    record.stop("preempted", 10)
    stopped = json.loads(files.summary.read_text())
    assert stopped["finished"] is False and stopped["preemptions"] == 1 and not files.finished()
    files.summary.write_text(json.dumps({"finished": True, "final_step": 12, "ledger": stopped["ledger"]}))
    assert files.finished() and progress(tmp_path)[0] == 12
    assert ledger.read(tmp_path, state="COMPLETED") == stopped["ledger"]
    after = Attempts(tmp_path)  # a requeue after the end (a preemption during finish): nothing to train
    after.start(12, 1, live=False)
    assert files.finished() and json.loads(files.summary.read_text())["final_step"] == 12  # kept, not replaced
    files.summary.write_text(json.dumps({"final_step": 12}))  # an older version's: no key, finished
    assert files.finished()


def test_a_live_summary_that_cannot_be_written_does_not_stop_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 0 alone writes it, mid-training: an error there would leave its peers waiting. It is said instead."""
    record = Attempts(tmp_path)
    record.start(0, 0)
    assert json.loads((tmp_path / "summary.json").read_text())["step"] == 0  # where the attempt resumed
    (tmp_path / "summary.json").unlink()
    (tmp_path / "summary.json").mkdir()  # cannot be replaced
    record.summarised = -1e9
    assert record.summarise_every(10, blocked_s=0.0) is None
    assert "summary.json's ledger not written" in capsys.readouterr().err


def test_a_sweeps_status_has_a_goodput_column_and_sums_its_points(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from jobs.ops import state
    from jobs.tracking import JobInfo, Target

    points = []
    for name, job in (("0-0", "1"), ("1-1", "2")):
        (tmp_path / name / "provenance").mkdir(parents=True)
        (tmp_path / name / "provenance" / "submit.json").write_text(json.dumps({"time": 0.0}))
        (tmp_path / name / "attempts.json").write_text(json.dumps(TIMELINE))
        points.append((name, Target(job, "local", tmp_path / name, None)))
    monkeypatch.setattr(state, "infos", lambda targets: [JobInfo("COMPLETED", 2, "")] * len(targets))
    monkeypatch.setattr(state, "failure_line", lambda target: None)
    header, columns, *rows, total = state.sweep_table(tmp_path, points).splitlines()
    assert columns.split() == ["point", "job", "state", "step", "goodput", "validation"]
    assert [r.split()[:5] for r in rows] == [
        ["0-0", "1", "COMPLETED", "-", "56%"],
        ["1-1", "2", "COMPLETED", "-", "56%"],
    ]
    assert total.startswith("goodput, all points: 56% of 688 s trained (queued 140 s, ")


@pytest.mark.parametrize(
    ("reasons", "state", "said"),
    [
        (["preempted", "timeout", "finished"], "COMPLETED", "restarts: 2 (1 preempted, 1 timeout)"),
        (["preempted", None], "RUNNING", "restarts: 1 (1 preempted)"),
        (["preempted", "preempted"], "PENDING", "restarts: 2 (2 preempted)"),  # requeued: it starts again
        (["failure"], "FAILED", "restarts: 0"),
    ],
)
def test_status_counts_restarts_as_the_runs_attempts_do(
    tmp_path: Path, reasons: list[str | None], state: str, said: str
) -> None:
    """jobs.status and summary.json give one count (Slurm's requeue count of one job id is not the run's: it
    misses restarts in the allocation and --resume's new jobs, and a local job has none)."""
    from jobs.ops.state import restarts_line
    from jobs.tracking import JobInfo, Target

    attempts = [{"started": float(i)} | ({"stop": {"reason": r}} if r else {}) for i, r in enumerate(reasons)]
    (tmp_path / "attempts.json").write_text(json.dumps(attempts))
    assert restarts_line(Target("7", "slurm", tmp_path, None), JobInfo(state, 5, "")) == said
    (tmp_path / "attempts.json").write_text("{torn")
    assert restarts_line(Target("7", "slurm", tmp_path, None), JobInfo(state, 5, "")) == "restarts: 5"


def test_a_stop_whose_next_step_nobody_reported_makes_recomputed_unknown_never_zero() -> None:
    """A script preempted and started again without reporting its step: the work done again is unknown (the
    ledger says so, goodput is an upper bound); with its steps reported, measured."""
    script = [
        {"started": 1.0, "resumed_step": None, "stop": {"reason": "preempted", "step": None, "time": 50.0}},
        {"started": 60.0, "resumed_step": None, "stop": {"reason": "finished", "step": None, "time": 100.0}},
    ]
    parts = ledger.ledger(0.0, script, 100.0, 2)
    assert parts["recomputed_known"] is False and parts["recomputed"] == 0
    assert ledger.line(parts).startswith("at most ") and "recomputed unknown" in ledger.line(parts)
    assert ledger.goodput_text(parts).startswith("<=")
    reported = [dict(script[0], stop=dict(script[0]["stop"], step=22), cost={"steps_recomputed": 23})]
    reported += [dict(script[1], resumed_step=-1, stop=dict(script[1]["stop"], step=60))]
    measured = ledger.ledger(0.0, reported, 100.0, 2)
    assert "recomputed_known" not in measured and measured["recomputed"] > 0


def test_attempts_learn_a_scripts_first_step_and_count_what_was_done_again(tmp_path: Path) -> None:
    """resumed_at: the first step the command reported in an attempt says what the previous one's stop cost."""
    attempts = Attempts(tmp_path)
    attempts.start(None, 0)
    (tmp_path / "progress.json").write_text(json.dumps({"step": 22, "time": time.time()}))
    attempts.stop("preempted", None)  # a script's: its last reported step
    attempts.start(None, 1)
    assert attempts.totals()["steps_recomputed"] is None  # not yet reported: unknown
    attempts.resumed_at(-1)  # started again from step 0
    assert attempts.items[0]["stop"]["step"] == 22 and attempts.totals()["steps_recomputed"] == 23


def test_the_supervisor_closes_a_hung_attempt_and_the_ledger_counts_the_hang(tmp_path: Path) -> None:
    """No rank recorded a stop (a hang named, the ranks killed): close() gives the attempt its stop at the last
    progress, the hang's moment, and a final summary whose ledger has the hang in it."""
    from trainer.run import failures

    attempts = Attempts(tmp_path)
    attempts.start(0, 0)
    began = attempts.items[0]["started"]
    (tmp_path / "progress.json").write_text(json.dumps({"step": 40, "time": began + 2}))
    failures.record(tmp_path, failures.Failure(began + 9, 1, "n1", "", "hung: no step for 7 s", False))
    attempts_module.close(tmp_path, "failure", final=True, now=began + 10)
    stop = json.loads((tmp_path / "attempts.json").read_text())[0]["stop"]
    assert stop | {"error": ""} == {"reason": "failure", "step": 40, "time": began + 2, "hung_at": began + 9,
                                    "error": "", "final": True}  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ended"] == "failure" and summary["finished"] is False
    assert summary["ledger"]["hung"] == pytest.approx(7, abs=0.01), summary
    assert ledger.read(tmp_path, state="FAILED") == summary["ledger"]  # the readers take the ended run's own
    assert ledger.read(tmp_path, state="PENDING") != summary["ledger"]  # a --resume's job: up to now
    attempts_module.close(tmp_path, "cancelled", final=True)  # a second word changes nothing it said
    assert json.loads((tmp_path / "attempts.json").read_text())[0]["stop"]["reason"] == "failure"


@pytest.mark.parametrize(
    ("states", "requeues"),
    [
        (["REQUEUED", "PENDING"], 1),
        (["REQUEUED", "RUNNING"], 1),
        (["REQUEUED", "FAILED"], 1),  # the job's end is not another requeue
        (["PREEMPTED", "REQUEUED", "COMPLETED"], 2),
        (["REQUEUED"], 1),  # the next attempt not listed yet
        (["FAILED"], 0),
    ],
)
def test_requeues_are_counted_as_they_happened_before_and_after_the_jobs_end(states: list[str], requeues: int) -> None:
    from jobs.tracking import requeued_records

    records = [[f"2026-11-28T10:0{k}:00", state, "node1"] for k, state in enumerate(states)]
    assert len(requeued_records(records)) == requeues


def test_a_hand_edited_record_with_a_negative_figure_shows_no_ledger(tmp_path: Path) -> None:
    edited = [dict(TIMELINE[0], checkpoint_s=-50.0)]
    (tmp_path / "attempts.json").write_text(json.dumps(edited))
    assert ledger.read(tmp_path, state="FAILED") is None
    (tmp_path / "attempts.json").write_text(json.dumps(TIMELINE[:1]))
    assert ledger.read(tmp_path, state="FAILED") is not None

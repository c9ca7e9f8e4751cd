"""jobs.rehearse: its refusals (one line, exit 2, nothing run), and the verdict a run's records give (pure)."""

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from jobs.ops import rehearse as rehearse_ops
from jobs.ops.rehearse import SAVE_S, Facts, Plan, judge, markdown, reached, steps_for_limit, time_limit, too_short
from jobs.ops.remote_submit import CERTIFICATE
from tests.messages import Golden, refused
from tests.support import cli
from trainer.errors import UserError


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--faults", "preempt,meteor"], "meteor"),
        (["--faults", ","], "--faults"),
        (["--compare", "../x.pt", "--", "python", "train.py"], "--compare"),
        (["--compare", "/etc/passwd", "--", "python", "train.py"], "--compare"),
        (["--compare", "final.pt"], "--compare"),
        (["--name", "x"], "--name"),
        (["--resume", "runs/x"], "--resume"),
        (["--steps", "2"], "--steps"),
        (["--steps", "9", "--", "python", "train.py"], "--steps"),
        (["--wai", "--na", "x"], "--name"),
        (["--profile", "debug"], "debug"),
        (["--profile", "nowhere.yaml"], "nowhere.yaml"),
        (["--hang-s", "5", "--", "python", "train.py"], "--hang-s"),
    ],
    ids=[
        "unknown-fault",
        "no-fault",
        "compare-up",
        "compare-absolute",
        "compare-trainer",
        "name",
        "resume",
        "steps",
        "steps-script",
        "abbreviated",
        "debug",
        "no-profile",
        "hang-s",
    ],
)
def test_bad_rehearsals_are_refused_in_one_line(golden: Golden, tmp_path: Path, args: list[str], named: str) -> None:
    result = cli("jobs.rehearse", *args)
    refused(result, golden, named)
    assert "reference run" not in result.stdout


REFERENCE = Facts(finished=True, end="a", first_steps=[100.0])


def test_a_run_that_went_on_from_its_checkpoint_to_the_same_weights_is_certified() -> None:
    facts = Facts(
        finished=True, restarts=1, requeues=1, went_on_from=[26], recomputed=0, first_steps=[100.0, 130.0], end="a"
    )
    verdict = judge("preempt", facts, REFERENCE, fault_at=120.0, fault_step=26, script=False)
    assert (verdict.verdict, verdict.recovered, verdict.went_on_from, verdict.lost_s) == (
        "certified",
        "requeued 1x",
        "step 26",
        10.0,
    )
    assert verdict.passes and not verdict.fix


@pytest.mark.parametrize(
    ("facts", "script", "verdict", "fix"),
    [
        (
            Facts(finished=False, error="rank 1 on n1: killed by signal 9 (SIGKILL)"),
            False,
            "failed",
            "restarts_in_job: 1",
        ),
        (Facts(finished=True, restarts=1, went_on_from=[0], end="a"), True, "lost work", "save to $RUN_DIR"),
        (Facts(finished=True, restarts=1, went_on_from=[0], end="a"), False, "lost work", "lower checkpoint.every"),
        (
            Facts(finished=True, restarts=1, went_on_from=[None], first_steps=[90.0]),
            True,
            "lost work",
            "(30 s of training lost)",
        ),
        (Facts(finished=True, restarts=1, went_on_from=[20], end="b"), False, "survived, not exact", "random streams"),
    ],
    ids=["failed", "script-from-0", "trainer-from-0", "script-says-no-steps", "not-exact"],
)
def test_each_verdict_short_of_certified_ends_with_its_fix(facts: Facts, script: bool, verdict: str, fix: str) -> None:
    got = judge("kill", facts, REFERENCE, fault_at=120.0, fault_step=30, script=script, saved=False)
    assert got.verdict == verdict and fix in got.fix, got
    assert not got.passes
    assert f"| kill | {verdict} |" in markdown([got])


def test_a_script_without_a_file_to_compare_survives_as_far_as_can_be_known() -> None:
    facts = Facts(finished=True, restarts=1, went_on_from=[None])
    got = judge("preempt", facts, Facts(finished=True), fault_at=120.0, fault_step=None, script=True, saved=True)
    assert (got.verdict, got.exact, got.passes) == ("survived, not comparable", "not comparable", True)


@pytest.mark.parametrize(
    ("startup", "training", "check_s", "minutes", "signal_at"),
    [(10.0, 60.0, 0, 2, 40.0), (20.0, 150.0, 0, 3, 95.0), (0.0, 3.0, 0, 1, 2.0), (20.0, 150.0, 30, 3, 130.0)],
)
def test_the_time_limits_signal_comes_halfway_through_the_references_training(
    startup: float, training: float, check_s: int, minutes: int, signal_at: float
) -> None:
    attempt = {"started": 1000.0, "startup": {"process_start": 1000.0 - startup}, "stop": {"time": 1000.0 + training}}
    got_minutes, delay = time_limit(attempt, check_s)
    assert got_minutes == minutes
    # From the process's start; on Slurm, whose check may send it check_s early, due 5 s later still.
    assert abs((minutes * 60 - delay) - signal_at) < 1
    assert delay >= SAVE_S  # time left to save and requeue
    # A script's attempt has no start-up record: its command's start counts.
    script = {"started": 1000.0, "stop": {"time": 1000.0 + training}}
    assert time_limit(script)[1] == int(time_limit(script)[0] * 60 - max(2.0, training / 2))


def test_a_run_shorter_than_slurms_time_limit_check_is_given_more_steps_or_not_the_fault() -> None:
    attempt = {"started": 1000.0, "stop": {"time": 1075.0}}
    assert too_short(attempt, 0) == ""  # the local controller signals on time
    assert "trains for only 75 s: make it train longer, so that it trains for over 80 s" in too_short(attempt, 30)
    assert "give it --steps 960, so that" in too_short(attempt, 30, steps=600)
    assert too_short({"started": 1000.0, "stop": {"time": 1081.0}}, 30) == ""
    # The trainer's time-limit run is given the steps that train for 120 s at that pace instead.
    assert (steps_for_limit(attempt, 30, 600), steps_for_limit(attempt, 0, 600)) == (960, 600)


def test_a_trainer_run_too_short_for_slurms_check_gets_a_longer_reference_and_is_timed_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def ran(run_dir: Path, started: float, stop: float, step: int) -> Path:
        run_dir.mkdir()
        attempt = {"started": started, "startup": {"process_start": started - 5.0}, "stop": {"time": stop}}
        (run_dir / "attempts.json").write_text(json.dumps([attempt]))
        (run_dir / "progress.json").write_text(json.dumps({"step": step}))
        (run_dir / "summary.json").write_text(json.dumps({"finished": True}))
        return run_dir

    reference = ran(tmp_path / "reference", 1000.0, 1010.0, 60)  # 60 steps in 10 s
    submitted = []

    def submit_run(plan: Plan, name: str, fault: str | None) -> Path:
        submitted.append((name, fault, plan.steps))
        steps = plan.steps or 0
        return ran(tmp_path / name, 2000.0, 2000.0 + steps * 100 / 720, steps)  # 720 in 100 s: a faster pace

    monkeypatch.setattr(rehearse_ops, "submit_run", submit_run)
    monkeypatch.setattr(rehearse_ops, "wait_run", lambda run_dir, timeout: None)
    plan = Plan([], [], ["preempt", "timeout"], 60, None, "s", "local", check_s=30)
    (name, fault, timed), against = rehearse_ops.time_limit_run(plan, tmp_path, reference, False, lambda line: None)
    # 120 s at the reference's pace; its limit timed from that longer run: signal due after 5 + 50 + 35 s.
    assert submitted == [("s-timeout-reference", None, 720)] and against == tmp_path / "s-timeout-reference"
    assert (name, fault, timed.steps, timed.time_min) == ("s-timeout", "timeout", 720, 2)
    assert yaml.safe_load(Path(timed.profiles["timeout"]).read_text())["signal_delay_s"] == 120 - 90
    # A script's length is its own: not rehearsed, and said why; nothing run.
    verdict, against = rehearse_ops.time_limit_run(plan, tmp_path, reference, True, lambda line: None)
    assert verdict.verdict == "not rehearsed" and "trains for only 10 s" in verdict.fix and against is None
    assert len(submitted) == 1
    # A longer run still too short (its pace much faster than the reference's): not rehearsed, with --steps.
    slower = ran(tmp_path / "slower", 1000.0, 1040.0, 60)  # 60 steps in 40 s: 180 steps asked for, 100 s run
    verdict, against = rehearse_ops.time_limit_run(replace(plan, stamp="t"), tmp_path, slower, False, str)
    assert submitted[-1] == ("t-timeout-reference", None, 180) and verdict.verdict == "not rehearsed", verdict
    assert "trains for only 25 s: give it --steps 864," in verdict.fix and against == tmp_path / "t-timeout-reference"


def test_the_time_limit_faults_run_alone_gets_its_limit_and_profile() -> None:
    plan = Plan(["--profile", "p.yaml", "lr=1"], [], ["timeout"], 60, None, "s", "p.yaml", {"timeout": "t.yaml"}, 2)
    # After the submit line's own words, so that they win over its --profile and any --time.
    assert plan.argv("s-timeout", "timeout") == [
        *["--profile", "p.yaml", "lr=1", "--profile", "t.yaml", "--time", "2", "steps=60", "--name", "s-timeout"]
    ]
    assert plan.argv("s-reference", None) == ["--profile", "p.yaml", "lr=1", "steps=60", "--name", "s-reference"]


def test_a_run_the_fault_never_reached_is_not_rehearsed_not_certified() -> None:
    verdict = judge("kill", Facts(finished=True, end="a", first_steps=[100.0]), REFERENCE, 150.0, 30, script=False)
    assert verdict.verdict == "not rehearsed" and not verdict.passes
    assert verdict.fix == "the run ended before the fault took hold: give it more steps"


def test_a_login_node_it_cannot_reach_is_one_line(golden: Golden, tmp_path: Path) -> None:
    """From a laptop the rehearsal runs on the login node: one it cannot reach ends in one line, nothing run."""
    (tmp_path / "site.yaml").write_text("executor: slurm\nlogin: nobody@unreachable.invalid\nremote_root: /r\n")
    result = cli("jobs.rehearse", "--profile", "site.yaml", cwd=tmp_path, timeout=60)
    refused(result, golden, "unreachable.invalid", outside=r"cannot reach \S+: (.*); check")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("certificate: /s/runs/rehearse-20261206-061222/rehearsal.md (and rehearsal.json)", "rehearse-20261206-061222"),
        ("certificate: /../rehearsal.md (and rehearsal.json)", None),
        ("certificate: /s/\x1b]0;x\x07/rehearse-20261206-061222/rehearsal.md (and rehearsal.json)", None),
        ("certificate: /a\x1c/b/rehearse-20261206-061222/rehearsal.md (and rehearsal.json)", None),
        ("certificate: /s/runs/mine/rehearsal.md (and rehearsal.json)", None),
    ],
    ids=["its-own", "dot-dot", "escape", "separator", "other-folder"],
)
def test_only_a_rehearsals_own_certificate_line_from_a_login_node_is_acted_on(line: str, name: str | None) -> None:
    """What the login node prints is data: the laptop copies a certificate back only from a folder named as the
    rehearsal names its own, in plain characters (and, in rehearse_there, under the cluster's run root)."""
    found = CERTIFICATE.fullmatch(line.strip())
    assert (found.group(2) if found else None) == name


def test_a_fault_waits_for_its_runs_own_start_then_its_step_or_time(tmp_path: Path) -> None:
    """The fault comes at a step, or (a script that reports none) a time after the run's first attempt began, so
    time in the queue never counts; a run that ended is reached at once. The live summary.json is not an end."""
    (tmp_path / "summary.json").write_text(json.dumps({"finished": False, "ledger": {}}))
    assert not reached(tmp_path, 0, 10.0)  # not started: queued
    attempt = {"started": time.time() - 5, "resumed_step": None}
    (tmp_path / "attempts.json").write_text(json.dumps([attempt]))
    assert not reached(tmp_path, 0, 10.0) and reached(tmp_path, 0, 4.0)
    (tmp_path / "progress.json").write_text(json.dumps({"step": 6}))
    assert not reached(tmp_path, 7, 0.0) and reached(tmp_path, 6, 0.0)
    (tmp_path / "summary.json").write_text(json.dumps({"finished": False, "ended": "failed", "ledger": {}}))
    assert reached(tmp_path, 99, 999.0)


def test_on_slurm_the_runs_queue_once_the_time_limits_signal_came_and_an_error_cancels_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []

    def submit_run(plan: Plan, name: str, fault: str | None) -> Path:
        events.append(("submit", name))
        (tmp_path / name).mkdir()
        return tmp_path / name

    def run(item: tuple[str, str, Plan], run_dir: Path) -> tuple[Path, str]:
        if item[1] == "timeout":  # its first attempt trains a while, then stops on the signal
            time.sleep(0.3)
            events.append(("signal", item[0]))
            (run_dir / "attempts.json").write_text(json.dumps([{"started": 1.0, "stop": {"time": 2.0}}]))
        if item[1] == "stop":
            raise UserError("srun could not reach a node")
        return run_dir, item[1]

    cancelled: list[str] = []
    monkeypatch.setattr(rehearse_ops, "submit_run", submit_run)
    monkeypatch.setattr(rehearse_ops, "cancel", lambda run_dir: cancelled.append(str(run_dir)))
    plan = Plan([], [], [], 60, None, "s", "local")
    runs = [("s-timeout", "timeout", plan), ("s-kill", "kill", plan)]
    assert [fault for _, fault in rehearse_ops.run_all(runs, run)] == ["timeout", "kill"]
    assert events.index(("signal", "s-timeout")) < events.index(("submit", "s-kill")), events
    assert not cancelled
    with pytest.raises(UserError):
        rehearse_ops.run_all([("t-kill", "kill", plan), ("t-stop", "stop", plan)], run)
    assert sorted(cancelled) == [str(tmp_path / "t-kill"), str(tmp_path / "t-stop")]

"""A rehearsal: the job a submit line would queue, run once without faults and once per fault, each fault made
by the same means the world uses (the requeue signal to the job, SIGKILL and SIGSTOP to a rank's process), and
each run judged from its own records against the reference: how it recovered, where it went on from, the time
it lost, whether it ended where the reference did. The plan and the judging are pure; `rehearse` acts."""

import hashlib
import json
import math
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from jobs.ops.act import poll, requeue_now, signal_ranks
from jobs.tracking import find
from trainer.errors import UserError
from trainer.run.atomic import json_or_none, write_text
from trainer.run.checkpoint_names import TEMPORARY
from trainer.run.rundir import RunDir
from trainer.supervise.stacks import ranks_of

FAULTS = {
    "preempt": "preempted: the requeue signal to the job, as when a job of higher priority takes its nodes",
    "timeout": "the time limit: a limit whose signal comes halfway through training, at each start",
    "kill": "one rank killed (SIGKILL) mid-step",
    "kill-checkpoint": "one rank killed (SIGKILL) while a checkpoint is written",
    "stop": "one rank frozen (SIGSTOP)",
    "frozen": "every rank frozen at once (SIGSTOP)",
}
HANG_S = 15  # the hang budgets (hang.floor_s, script_hang_s) of the runs that freeze a rank
SCRIPT_HANG_S = 60  # a script's other runs': one that hangs by itself is named in a minute, not the profile's
SAVE_S = 30  # the time limit's signal comes at least this long before the limit: the stop's save and requeue
# Slurm sends a time limit's signal from a check every 30 s (slurmctld's PERIODIC_TIMEOUT), up to that long
# before it is due, and counts the limit from the job's start, a few seconds before its processes'. The local
# controller sends it on time.
CHECK_S = {"slurm": 30, "local": 0}
FIX = {
    "failed": "set restarts_in_job: 1 (a restart in the allocation) or requeue_on_failure: 1 in the profile",
    "lost": "save to $RUN_DIR and load it when it is there (README.md, Your script)",
    "inexact": "save every state the run depends on (optimizer, scheduler, random streams, data order) and load "
    "it all: trainer/README.md, Checkpoints",
}


@dataclass
class Facts:
    """What a run's records say (summary.json, attempts.json, errors/)."""

    finished: bool = False
    restarts: int = 0
    requeues: int = 0  # preemptions, time limits and requeues after a failure
    in_job: int = 0  # restarts in the allocation
    went_on_from: list[int | None] = field(default_factory=list)  # each later attempt's first step, if known
    recomputed: int | None = None
    first_steps: list[float] = field(default_factory=list)  # each attempt's first step, epoch seconds
    hang: str = ""  # the first failure's line, where a hang was named
    named_at: float | None = None
    end: str | None = None  # the weights' hash, or the --compare file's
    ledger: dict[str, float] = field(default_factory=dict)
    error: str = ""


@dataclass
class Verdict:
    fault: str
    verdict: str  # certified | survived, not comparable | survived, not exact | lost work | failed | not rehearsed
    recovered: str
    went_on_from: str
    recomputed: str
    lost_s: float | None
    named: str
    exact: str
    fix: str = ""
    ledger: dict[str, float] = field(default_factory=dict)
    run_dir: str = ""

    @property
    def passes(self) -> bool:
        return self.verdict in ("certified", "survived, not comparable")


def facts_of(run_dir: Path, compare: str | None) -> Facts:
    files = RunDir(run_dir)
    summary = json_or_none(files.summary) or {}
    attempts = json_or_none(files.attempts) or []
    attempts = [a for a in attempts if isinstance(a, dict)] if isinstance(attempts, list) else []
    facts = Facts(finished=bool(summary.get("finished")), ledger=dict(summary.get("ledger") or {}))
    facts.restarts = int(summary.get("restarts") or max(0, len(attempts) - 1))
    facts.requeues = sum(int(summary.get(k) or 0) for k in ("preemptions", "timeouts", "requeues"))
    facts.in_job = int(summary.get("in_job_restarts") or 0)
    facts.went_on_from = [a.get("resumed_step") for a in attempts[1:]]
    facts.recomputed = summary.get("steps_recomputed")
    facts.first_steps = [float(a["started"]) for a in attempts if isinstance(a.get("started"), int | float)]
    # The first failure an attempt stopped on (error.txt goes once a restart finishes the run).
    stops = [a["stop"] for a in attempts if isinstance(a.get("stop"), dict) and a["stop"].get("error")]
    if stops:
        facts.error = str(stops[0]["error"])
        if "hung" in facts.error:
            facts.hang = facts.error
            named = stops[0].get("hung_at", stops[0].get("time"))
            facts.named_at = float(named) if isinstance(named, int | float) else None
    elif files.error.exists():
        facts.error = files.error.read_text().strip()
    if compare is not None:
        target = run_dir / compare
        facts.end = hashlib.sha256(target.read_bytes()).hexdigest() if target.is_file() else None
    else:
        facts.end = summary.get("weights_sha256")
    return facts


def judge(
    fault: str,
    facts: Facts,
    reference: Facts,
    fault_at: float,
    fault_step: int | None,
    script: bool,
    saved: bool = True,
) -> Verdict:
    """A fault's verdict from the run's records and the reference's (pure). `saved`: a script had written a file
    of its own by the fault (one that says no steps is judged by it: nothing saved, nothing to go on from)."""
    if facts.restarts == 0 and not facts.hang and facts.finished:
        how = "nothing to recover: the run ended before the fault took hold"
    elif facts.restarts:
        how = (
            ", ".join(
                f"{what} {n}x"
                for what, n in (("requeued", facts.requeues), ("restarted in the allocation", facts.in_job))
                if n
            )
            or f"started again {facts.restarts}x"
        )
    else:
        how = "failed"
    went_on = facts.went_on_from
    went_on_text = ", ".join("unknown" if s is None else f"step {s}" for s in went_on) or "-"
    after = [t for t in facts.first_steps if t > fault_at]
    lost = round(after[0] - fault_at, 1) if after else None
    named = f"{facts.named_at - fault_at:.0f} s: {facts.hang}" if facts.hang and facts.named_at else "-"
    if reference.end is None or facts.end is None:
        exact = "not comparable" if reference.end is None else "no end to compare"
    else:
        exact = "equal" if facts.end == reference.end else "differs"
    recomputed = "unknown" if facts.recomputed is None else str(facts.recomputed)
    verdict = Verdict(fault, "", how, went_on_text, recomputed, lost, named, exact, ledger=facts.ledger)
    if not facts.finished:
        verdict.verdict, verdict.fix = "failed", f"{facts.error or 'the run did not finish'}; {FIX['failed']}"
    elif facts.restarts == 0 and not facts.hang:  # ended unharmed: the fault proved nothing
        verdict.verdict, verdict.fix = "not rehearsed", "the run ended before the fault took hold: give it more steps"
    elif facts.restarts and went_on and went_on[0] == 0 and (fault_step or 0) > 0:
        verdict.verdict = "lost work"
        fix = FIX["lost"] if script else "save more often: lower checkpoint.every"
        verdict.fix = f"after the {fault} at step {fault_step} the run started again from step 0: {fix}"
    elif script and facts.restarts and went_on and went_on[0] is None and not saved:
        verdict.verdict = "lost work"
        lost = f"{fault_at - facts.first_steps[0]:.0f} s of training" if facts.first_steps else "its work"
        verdict.fix = (
            f"your script had saved nothing when the {fault} came, so it began again ({lost} lost): {FIX['lost']}"
        )
    elif exact == "differs":
        verdict.verdict, verdict.fix = "survived, not exact", f"the end differs from the reference's: {FIX['inexact']}"
    elif exact == "equal":
        verdict.verdict = "certified"
    else:
        verdict.verdict = "survived, not comparable"
    return verdict


@dataclass(frozen=True)
class Plan:
    """What to run: the submit line's own words, the faults, where each run lands."""

    submit: list[str]  # jobs.submit's flags and settings, without --name/--wait
    command: list[str]  # after --; empty: the trainer
    faults: list[str]
    steps: int | None
    compare: str | None
    stamp: str
    profile: str = "local"  # the submit line's profile, copied with a fault's own settings where it needs some
    profiles: dict[str, str] = field(default_factory=dict)  # fault, or "reference" (every run): a copy of it
    time_min: int | None = None  # the time-limit fault's limit (after any --time of the submit line's)
    check_s: int = 0  # how late the time limit's signal may come (CHECK_S, by the profile's executor)
    together: bool = False  # the fault runs queued at once, the time limit's alone until its signal (run_all)

    def argv(self, name: str, fault: str | None) -> list[str]:
        words = list(self.submit)
        if copy := self.profiles.get(fault or "reference", self.profiles.get("reference")):
            words += ["--profile", copy]
        if fault == "timeout" and self.time_min is not None:
            words += ["--time", str(self.time_min)]
        if not self.command:
            words += [f"steps={self.steps}"] if self.steps else []
            words += [f"hang.floor_s={HANG_S}"] if fault in ("stop", "frozen") else []
        return [*words, "--name", name] + (["--", *self.command] if self.command else [])


def profile_copy(profile: str, path: Path, **settings: Any) -> str:
    """The profile's YAML with a fault's own settings, written to `path` (the rehearsal's folder)."""
    from jobs.profiles import find_profile, read_yaml

    data = read_yaml(find_profile(profile), "profile")
    assert isinstance(data, dict)
    write_text(path, yaml.safe_dump({**data, **settings}))
    return str(path)


def time_limit(attempt: dict[str, Any], check_s: int = 0) -> tuple[int, int]:
    """The time limit (minutes) and signal_delay_s that signal a run like the reference's `attempt` halfway
    through its training, counted from its process's start, with SAVE_S or more left to save and requeue.
    Halfway: the next start has at most half the training left, so it usually ends before its own signal. A signal
    that may come `check_s` early (Slurm's) is due that much later, and 5 s more for the job's own start."""
    began = (attempt.get("startup") or {}).get("process_start", attempt["started"])  # a script's: its command's
    signal_after = float(attempt["started"]) - float(began) + max(2.0, trained_s(attempt) / 2)
    signal_after += check_s + 5 if check_s else 0
    minutes = max(1, math.ceil((signal_after + SAVE_S) / 60))
    return minutes, int(minutes * 60 - signal_after)


def trained_s(attempt: dict[str, Any]) -> float:
    """Seconds from an attempt's first step to its stop."""
    return float((attempt.get("stop") or {}).get("time", attempt["started"])) - float(attempt["started"])


def need_s(check_s: int) -> int:
    """The training a run needs to be given a signal that may come `check_s` early as it trains: due check_s
    + 5 s after halfway, the second half must outlast that, and the save after it."""
    return 2 * (check_s + 10) if check_s else 0


def steps_for_limit(attempt: dict[str, Any], check_s: int, steps: int) -> int:
    """The steps a run like `attempt` (of `steps`) needs to be given the time limit's signal as it trains."""
    # A short run's pace counts its first steps' set-up too: half as much again, so that a faster pace still needs them.
    need, trained = need_s(check_s), trained_s(attempt)
    return steps if trained >= need else math.ceil(steps * 1.5 * need / max(trained, 1.0))


def too_short(attempt: dict[str, Any], check_s: int, steps: int = 0) -> str:
    """Why a run like `attempt` cannot be given the time limit's signal as it trains ("" where it can); for the
    trainer's run of `steps`, with the --steps that would."""
    need, trained = need_s(check_s), trained_s(attempt)
    if trained >= need:
        return ""
    more = f"give it --steps {steps_for_limit(attempt, check_s, steps)}" if steps > 0 else "make it train longer"
    return (
        f"Slurm sends the time limit's signal from a check every {check_s} s, and the run trains for only "
        f"{trained:.0f} s: {more}, so that it trains for over {need} s"
    )


TIMEOUT_TRIES = 3


def last_attempt(run_dir: Path) -> dict[str, Any]:
    return json.loads(RunDir(run_dir).attempts.read_text())[-1]


def timed_from(plan: Plan, folder: Path, run_dir: Path) -> Plan:
    """The plan with the time-limit fault's limit timed from `run_dir`'s last attempt (a profile copy)."""
    attempt = last_attempt(run_dir)
    minutes, delay = time_limit(attempt, plan.check_s)
    copy = profile_copy(plan.profile, folder / "timeout.yaml", signal_delay_s=delay, max_num_timeout=20)
    return replace(plan, profiles={**plan.profiles, "timeout": copy}, time_min=minutes)


def submit_run(plan: Plan, name: str, fault: str | None) -> Path:
    cmd = [sys.executable, "-m", "jobs.submit", *plan.argv(name, fault)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"the rehearsal's {name} was refused: {(done.stderr.strip() or done.stdout.strip())[-400:]}")
    for line in done.stdout.splitlines():
        if line.startswith("run directory: "):
            return Path(line.removeprefix("run directory: ").strip())
    raise UserError(f"jobs.submit printed no run directory for {name}: {done.stdout[-400:]}")


def wait_run(run_dir: Path, timeout: float) -> None:
    """Until the run ends; one still going after `timeout` is cancelled (its verdict: failed, unfinished)."""
    try:
        subprocess.run([sys.executable, "-m", "jobs.wait", str(run_dir)], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        cancel(run_dir)


def cancel(run_dir: Path) -> None:
    subprocess.run([sys.executable, "-m", "jobs.cancel", str(run_dir)], capture_output=True, timeout=300)


def tools_own(run_dir: Path) -> set[str]:
    """What the tool itself keeps in a run directory (RunDir names each), and the tool's copy and old code."""
    files = RunDir(run_dir)
    paths = [getattr(files, name) for name in dir(RunDir) if isinstance(getattr(RunDir, name), property)]
    return {p.name for p in paths if isinstance(p, Path) and p.parent == run_dir} | {"tool", "superseded"}


def saved_anything(run_dir: Path) -> bool:
    """Whether a script wrote a file of its own in its run directory, or beside its code (code/'s new files)."""
    # Hidden names are the tool's writes in flight (trainer.run.atomic's `.NAME.XXXX.tmp`).
    own = tools_own(run_dir)
    if any(p.name not in own and not p.name.startswith(".") for p in run_dir.iterdir()):
        return True
    listed = json_or_none(run_dir / "provenance" / "code_files.json")
    code = run_dir / "code"
    if not isinstance(listed, list) or not code.is_dir():
        return False
    ours = set(map(str, listed))
    return any(p.is_file() and str(p.relative_to(code)) not in ours for p in code.rglob("*"))


def step_of(run_dir: Path) -> int:
    record = json_or_none(RunDir(run_dir).progress)
    return int(record["step"]) if isinstance(record, dict) and isinstance(record.get("step"), int) else -1


def first_attempt(run_dir: Path) -> dict[str, Any]:
    """The first attempt's record, once there is one ({} before)."""
    attempts = json_or_none(RunDir(run_dir).attempts)
    return attempts[0] if isinstance(attempts, list) and attempts and isinstance(attempts[0], dict) else {}


def first_stop(run_dir: Path) -> dict[str, Any] | None:
    """The first attempt's stop, once recorded."""
    stop = first_attempt(run_dir).get("stop")
    return stop if isinstance(stop, dict) else None


def reached(run_dir: Path, at_step: int, at_s: float) -> bool:
    """Whether the run trained to `at_step` (0: ran `at_s` seconds since its first attempt began), or ended."""
    first = first_attempt(run_dir)
    if first.get("stop") or RunDir(run_dir).error.exists() or RunDir(run_dir).ended_summary():
        return True  # summary.json is there as the run goes: only an ended one counts
    if at_step > 0:
        return step_of(run_dir) >= at_step
    began = first.get("started")
    return isinstance(began, int | float) and time.time() >= began + at_s


def inject(fault: str, run_dir: Path, script: bool, at_step: int, at_s: float) -> tuple[float, int | None, bool]:
    """Make `fault` happen once the run trained to `at_step` (0, a script that reports no steps: `at_s` seconds
    after it began, queued time not counted); when it happened, at which step, whether a script saved anything."""
    poll(lambda: reached(run_dir, at_step, at_s), 3600, 0.1)
    if fault == "timeout":  # the limit's signal comes by itself: when the first attempt stopped on it
        stop = poll(lambda: first_stop(run_dir), 3600, 0.5) or {}
        if stop.get("reason") != "timeout":
            return time.time(), None, True  # the run ended before its time limit's signal
        return float(stop.get("signal_time") or stop["time"]), stop.get("step"), not script or saved_anything(run_dir)
    saved = not script or saved_anything(run_dir)
    target = find(str(run_dir))
    ranks = sorted(r["rank"] for r in ranks_of(run_dir, None))
    if fault == "kill-checkpoint":  # rank 0, as it writes one (trainer.run.atomic's temporary name)
        if not signal_ranks(target, [0], signal.SIGKILL, script, (RunDir(run_dir).checkpoints, TEMPORARY)):
            return time.time(), None, saved  # no checkpoint write was seen
    elif fault == "preempt":  # jobs.top's r: the profile's signal, as the scheduler sends it
        requeue_now(target)
    elif fault in ("kill", "stop"):
        signal_ranks(target, ranks[-1:], signal.SIGKILL if fault == "kill" else signal.SIGSTOP, script)
    elif fault == "frozen":
        signal_ranks(target, ranks, signal.SIGSTOP, script)
    return time.time(), step_of(run_dir), saved


NOT_REHEARSED = {
    "kill-checkpoint": "no checkpoint write was seen: give the run more steps",
    "timeout": "the run ended before its time limit's signal: give it more steps",
}


def rehearse(plan: Plan, folder: Path, say: Callable[[str], None], script: bool) -> tuple[Facts, list[Verdict]]:
    """The reference, then each fault's run, judged; rehearsal.json and rehearsal.md written into `folder`.
    The time limit's run goes first. On Slurm, for the trainer (`plan.together`), it goes alone, and once its
    signal came the other runs are queued at once: a requeued run waits out Slurm's hold (cred_expire, 2
    minutes by default) while the others run."""
    say(f"reference run (no fault) in {plan.stamp}-reference")
    began = time.monotonic()
    ref_dir = submit_run(plan, f"{plan.stamp}-reference", None)
    wait_run(ref_dir, 1800)
    reference = facts_of(ref_dir, plan.compare)
    if not reference.finished:
        hint = (
            "; or, if it goes long without progress on purpose, give --hang-s more" if script and reference.hang else ""
        )
        raise UserError(
            f"the reference run did not finish ({reference.error or 'see ' + str(ref_dir)}); fix it first{hint}"
        )
    final = step_of(ref_dir)  # a script that reports no steps: -1, its fault timed from its start
    at_step = max(1, final // 3) if final > 0 else 0
    ran_s = trained_s(last_attempt(ref_dir))
    runs: list[Run] = [(f"{plan.stamp}-{fault}", fault, plan) for fault in plan.faults if fault != "timeout"]
    limit, limit_dir = time_limit_run(plan, folder, ref_dir, script, say) if "timeout" in plan.faults else (None, None)
    runs = [limit, *runs] if isinstance(limit, tuple) else runs

    def run(item: Run, run_dir: Path | None = None) -> tuple[Path, tuple[float, int | None, bool, str]]:
        name, fault, its = item
        run_dir = run_dir or submit_run(its, name, fault)
        say(f"{fault}: {FAULTS[fault]}, in {name}")
        return fault_run(its, folder, fault, run_dir, script, at_step, ran_s / 2, say)

    done = run_all(runs, run) if plan.together else [run(item) for item in runs]
    ended = {item[1]: result for item, result in zip(runs, done, strict=True)}
    verdicts = []
    for fault in plan.faults:
        if fault == "timeout" and isinstance(limit, Verdict):
            verdicts.append(limit)
            continue
        run_dir, (fault_at, fault_step, saved, why) = ended[fault]
        against = facts_of(limit_dir, plan.compare) if fault == "timeout" and limit_dir else reference
        verdict = judge(fault, facts_of(run_dir, plan.compare), against, fault_at, fault_step, script, saved)
        if fault_step is None:
            verdict.verdict, verdict.fix = "not rehearsed", why
        verdict.run_dir = str(run_dir)
        verdicts.append(verdict)
    record: dict[str, Any] = {"reference": {"run_dir": str(ref_dir), "ledger": reference.ledger}}
    if limit_dir:
        record["timeout_reference"] = {"run_dir": str(limit_dir), "ledger": facts_of(limit_dir, None).ledger}
    record |= {
        "faults": [asdict(v) for v in verdicts],
        "seconds": round(time.monotonic() - began, 1),  # the whole rehearsal, the reference's run included
    }
    write_text(folder / "rehearsal.json", json.dumps(record, indent=2) + "\n")
    write_text(folder / "rehearsal.md", markdown(verdicts))
    return reference, verdicts


Run = tuple[str, str, Plan]  # a run's name, its fault, its plan


def time_limit_run(
    plan: Plan, folder: Path, ref_dir: Path, script: bool, say: Callable[[str], None]
) -> tuple[Run | Verdict, Path | None]:
    """The time limit's run, its limit timed from a run of its steps alone, and that run where it is not the
    reference; or the fault's verdict, not rehearsed. Slurm checks time limits every check_s: a trainer's run
    too short for that is given the steps it needs, and a reference of them, run now; a script is not."""
    attempt, final, source = last_attempt(ref_dir), step_of(ref_dir), None
    if not script and final > 0 and too_short(attempt, plan.check_s):
        steps = steps_for_limit(attempt, plan.check_s, final)
        plan, name = replace(plan, steps=steps), f"{plan.stamp}-timeout-reference"
        say(f"timeout: Slurm checks time limits every {plan.check_s} s, so a run of {steps} steps, after {name}")
        source = submit_run(plan, name, None)
        wait_run(source, 3600)
        if not (facts := facts_of(source, None)).finished:
            why = f"its reference of {steps} steps did not finish ({facts.error or 'see ' + str(source)})"
            return not_rehearsed("timeout", why, source), source
        attempt = last_attempt(source)
    if why := too_short(attempt, plan.check_s, 0 if script else plan.steps or final):
        return not_rehearsed("timeout", why, source), source
    return (f"{plan.stamp}-timeout", "timeout", timed_from(plan, folder, source or ref_dir)), source


def not_rehearsed(fault: str, why: str, run_dir: Path | None = None) -> Verdict:
    return Verdict(fault, "not rehearsed", "-", "-", "-", None, "-", "-", why, run_dir=str(run_dir or ""))


def run_all(runs: list[Run], run: Callable[[Run, Path], Any]) -> list[Any]:
    """`run` of each, each submitted here and queued at once (Slurm's queue orders them), but the time limit's
    alone until its signal: its limit was timed from a run alone (a retry of it runs among the others). On an
    error or an interrupt the runs submitted are cancelled."""
    pool, submitted, futures = ThreadPoolExecutor(max(1, len(runs))), [], []
    try:
        for name, fault, its in runs:
            submitted.append(submit_run(its, name, fault))
            futures.append(pool.submit(run, (name, fault, its), submitted[-1]))
            if fault == "timeout" and len(futures) == 1:
                poll(lambda: futures[0].done() or reached(submitted[0], 0, math.inf), 3600, 0.5)
        return [future.result() for future in futures]
    except BaseException:
        for run_dir in submitted:
            cancel(run_dir)
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def fault_run(
    plan: Plan, folder: Path, fault: str, run_dir: Path, script: bool, at_step: int, at_s: float, say: Callable
) -> tuple[Path, tuple[float, int | None, bool, str]]:
    """`fault` made in the submitted run `run_dir`, which is waited for; its run, and when the fault happened, at
    which step (None: not made, why), whether a script had saved anything. A time limit whose run ended before
    its signal is tried again, timed from that run."""
    for again in range(TIMEOUT_TRIES if fault == "timeout" else 1):
        if again:
            run_dir = submit_run(plan, f"{plan.stamp}-{fault}-{again + 1}", fault)
        why = NOT_REHEARSED.get(fault, "")
        try:
            fault_at, fault_step, saved = inject(fault, run_dir, script, at_step, at_s)
        except (UserError, OSError) as exc:  # the run ended first, srun could not reach a node
            fault_at, fault_step, saved, why = time.time(), None, True, f"the fault could not be made: {exc}"
        wait_run(run_dir, 3600)
        if fault != "timeout" or fault_step is not None:
            break
        # It went faster than the run its limit was timed from (a machine's load varies): timed from it.
        say(f"{fault}: the run ended before the signal; its limit timed again from that run")
        plan = timed_from(plan, folder, run_dir)
    return run_dir, (fault_at, fault_step, saved, why)


COLUMNS = ("fault", "verdict", "recovered", "went_on_from", "recomputed", "lost_s", "named", "exact")


def markdown(verdicts: list[Verdict]) -> str:
    rows = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    rows += ["| " + " | ".join(str(getattr(v, c)).replace("|", "/") for c in COLUMNS) + " |" for v in verdicts]
    fixes = [f"- {v.fault}: {v.fix}" for v in verdicts if v.fix]
    return "# Rehearsal\n\n" + "\n".join(rows) + "\n" + ("\n## Fixes\n\n" + "\n".join(fixes) + "\n" if fixes else "")

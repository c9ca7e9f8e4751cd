"""Why a run stopped, the history of its attempts, and the requeue (torch-free: scripts' tasks use it too)."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trainer.errors import UserError
from trainer.run import failures, ledger
from trainer.run.atomic import json_or_none, read_json, write_text
from trainer.run.rundir import RunDir
from trainer.supervise.attempt import Attempt, mark_stopped
from trainer.supervise.launcher import DistEnv
from trainer.supervise.signals import JobSettings

TIMEOUT_SLACK_S = 30  # Slurm checks time limits periodically: the signal can come a little late
LIVE_SUMMARY_S = 60.0  # summary.json's ledger as the run goes: rewritten at most this often between attempts' edges


def parse_time_left(text: str) -> int | None:
    """squeue's %L (`[D-]HH:MM:SS`, `MM:SS`, `UNLIMITED`) in seconds; None when unknown or unlimited."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text.strip())
    if not match:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def slurm_time_left(job_id: str) -> int | None:
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_time_left(out.stdout)


def stop_reason(time_left_s: int | None, signal_delay_s: int) -> str:
    """A signal with about signal_delay_s left is the time limit; with more left, a preemption.

    Asked of Slurm, not guessed from elapsed time the way submitit does (it counts every signal of a
    job shorter than 10 minutes as a timeout).
    """
    if time_left_s is None:
        return "preempted"
    return "timeout" if time_left_s <= signal_delay_s + TIMEOUT_SLACK_S else "preempted"


class Attempts:
    """The history of a run's attempts (`attempts.json`, written by rank 0 alone)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = RunDir(run_dir).attempts
        self.progress_path = RunDir(run_dir).progress
        self.summarised = 0.0  # when summary.json last got the ledger (monotonic)
        self.live = True  # this attempt trains: summary.json is its to rewrite (start's `live`)
        self.items: list[dict[str, Any]] = (
            read_json(
                self.path,
                f"move it aside (mv {self.path} {self.path}.broken) and resubmit with --resume {run_dir}; "
                "restarts are then counted from that attempt on",
                lambda items: isinstance(items, list) and all(isinstance(a, dict) and "started" in a for a in items),
            )
            if self.path.exists()
            else []
        )

    def _write(self) -> None:
        write_text(self.path, json.dumps(self.items, indent=1) + "\n")
        self.summarise()

    def summarise(self, step: int | None = None) -> dict[str, float] | None:
        """summary.json as the run goes: `"finished": false`, the attempts' counts and the goodput ledger up to
        now (an unfinished attempt training until now). At every attempt's start and stop, and from the
        training loop at most once a LIVE_SUMMARY_S. The finished run's summary (trainer.train, trainer.supervise.script)
        replaces it with `"finished": true`: only that one says the run is done (RunDir.finished). Not by an
        attempt that has nothing to train (start's `live`): the finished summary stays. `step`: the loop's, else
        where this attempt stopped or resumed."""
        if not self.live:
            return None
        now, last = time.time(), self.items[-1]
        step = step if step is not None else (last.get("stop") or {}).get("step", last.get("resumed_step"))
        live = {"finished": False, "as_of": round(now, 3)} | ({"step": step} if step is not None else {})
        parts = self.write_summary(live, now)
        self.summarised = time.monotonic()
        return parts

    def write_summary(self, head: dict[str, Any], until: float) -> dict[str, float]:
        """summary.json: `head`, the attempts' counts, and the goodput ledger up to `until`; the ledger."""
        parts = ledger.of_run(self.run_dir, self.items, until, int(self.items[-1].get("world_size") or 1))
        write_text(RunDir(self.run_dir).summary, json.dumps(head | self.totals() | {"ledger": parts}, indent=2) + "\n")
        return parts

    def summarise_every(self, step: int, blocked_s: float) -> dict[str, float] | None:
        """summary.json's ledger from the training loop (rank 0, at a log interval), at most once a
        LIVE_SUMMARY_S: an atomic write of a small file, off most steps' path. The ledger when written."""
        if time.monotonic() - self.summarised < LIVE_SUMMARY_S:
            return None
        self.blocked_on_checkpoints(blocked_s)
        try:
            return self.summarise(step)
        except (OSError, UserError) as exc:  # rank 0 alone: a failure here would leave its peers waiting
            self.summarised = time.monotonic()  # said once a LIVE_SUMMARY_S at most
            print(f"warning: summary.json's ledger not written ({exc}); training goes on", file=sys.stderr)
            return None

    def start(
        self,
        resumed_step: int | None,
        restart_count: int,
        warnings: list[str] | None = None,
        startup: dict[str, float] | None = None,
        env: DistEnv | None = None,
        cause: failures.Failure | None = None,
        live: bool = True,
    ) -> dict[str, float]:
        """Record this attempt, its warnings and where its start-up went (trainer.run.startup); returns what the
        previous attempt cost (time lost, steps recomputed). `env` tells why a previous attempt that recorded
        no stop ended (unrecorded_stop). `live`: it has steps to train (summary.json as the run goes is its)."""
        self.live = live
        cost = {"time_lost_s": 0.0, "steps_recomputed": 0.0}
        if self.items:
            previous = self.items[-1]
            stop = previous.get("stop")
            if stop is None:  # it ended without saving: killed, node failure, crash, or requeued from outside
                reached = last_progress(self.progress_path)
                if env and env.in_job_restart and previous.get("slurm_restart_count", 0) == restart_count:
                    why = {"reason": "failure"}  # the supervisor (or local controller) starts again only after one
                else:
                    why = unrecorded_stop(env, previous.get("slurm_restart_count", 0)) if env else {"reason": "failure"}
                stop = why | {
                    "step": reached.get("step", resumed_step),
                    "time": reached.get("time", previous["started"]),
                }
                unrecorded(previous, stop, reached, cause)
            # After a finished attempt, or one that ended the run (a failure, a cancel: the supervisor closed it),
            # the wait for this one (a --resume) is the user's, not lost.
            lost = 0.0 if stop["reason"] == "finished" or stop.get("final") else time.time() - stop["time"]
            cost = {"time_lost_s": lost, "steps_recomputed": recomputed(stop, resumed_step)}
            previous["cost"] = cost
        attempt = {"started": time.time(), "resumed_step": resumed_step, "slurm_restart_count": restart_count}
        attempt |= {"world_size": env.world_size} if env else {}
        attempt |= {"in_job_restart": env.in_job_restart} if env and env.in_job_restart else {}
        attempt |= {"startup": startup} if startup else {}
        self.items.append(attempt | ({"warnings": list(warnings)} if warnings else {}))
        self._write()
        return cost

    def stop(self, reason: str, step: int | None, signalled_at: float | None = None) -> None:
        """Record why and where this attempt stopped; `time` is when the checkpoint was on disk. A script's step
        (None) is the last it reported, if it did."""
        step = step if step is not None else last_progress(self.progress_path).get("step")
        self.items[-1]["stop"] = {"reason": reason, "step": step, "time": time.time(), "signal_time": signalled_at}
        self._write()

    def resumed_at(self, step: int) -> None:
        """A script's first reported step (trainer.requeue.progress(step)): where this attempt went on from, and
        so what the one before had done that it does again."""
        attempt = self.items[-1]
        attempt["resumed_step"] = step
        if len(self.items) > 1 and "cost" in (previous := self.items[-2]):
            previous["cost"]["steps_recomputed"] = recomputed(previous.get("stop") or {}, step)
        self._write()

    def blocked_on_checkpoints(self, seconds: float) -> None:
        """This attempt's steps were blocked this long by saves so far (the ledger's checkpointing); written
        with the attempt's stop."""
        self.items[-1]["checkpoint_s"] = round(seconds, 3)

    def count(self, reason: str) -> int:
        return sum(1 for a in self.items if (a.get("stop") or {}).get("reason") == reason)

    def wall_time_s(self) -> float:
        return time.time() - self.items[0]["started"]

    def totals(self) -> dict[str, float | None]:
        costs = [a["cost"] for a in self.items if "cost" in a]
        unknown = not ledger.recompute_known(self.items)
        return {
            "restarts": len(self.items) - 1,
            "timeouts": self.count("timeout"),
            "preemptions": self.count("preempted"),
            "failures": self.count("failure"),
            "requeues": self.count("requeued"),
            "requested": self.count("requested"),
            "in_job_restarts": sum(1 for a in self.items if a.get("in_job_restart")),
            "time_lost_s": round(sum(c["time_lost_s"] for c in costs), 3),
            "steps_recomputed": None if unknown else sum(int(c["steps_recomputed"] or 0) for c in costs),
            "cancelled": self.count("cancelled"),
        }


def recomputed(stop: dict[str, Any], resumed_step: int | None) -> int | None:
    """The steps an attempt does again after `stop`: None when either side's step is unknown (a script that
    reports none)."""
    if stop.get("step") is None or resumed_step is None:
        return None
    return max(0, int(stop["step"]) - resumed_step)


REQUEUES = ("preempted", "timeout", "requested", "requeued")  # stops rank 0 records as it requeues the job


def requeued_by_rank_0(run_dir: Path) -> bool:
    """The last attempt's stop is one rank 0 recorded as it requeued the job (record_stop)."""
    items = json_or_none(RunDir(run_dir).attempts)
    last = items[-1] if isinstance(items, list) and items and isinstance(items[-1], dict) else {}
    return isinstance(stop := last.get("stop"), dict) and stop.get("reason") in REQUEUES


def close(run_dir: Path, reason: str, final: bool, now: float | None = None) -> None:
    """The supervisor's word on the attempt whose tasks just ended (both backends, after every start): its stop,
    where rank 0 recorded none (a failure, a hang, a cancel, a time limit that killed the tasks), with the
    first failure's line and, for a hang, when it was named. `final`: no job runs the run any more, and
    summary.json says how it ended (`"ended"`), its ledger up to that end, instead of one as it goes."""
    if not RunDir(run_dir).attempts.exists():
        return  # no attempt began (cancelled in the queue, a start that failed before rank 0 recorded one)
    attempts = Attempts(run_dir)
    if not attempts.items:
        return
    now = time.time() if now is None else now
    last = attempts.items[-1]
    stop = last.get("stop")
    if stop is None:
        reached = last_progress(attempts.progress_path)
        first = failures.root_cause([f for f in failures.read(run_dir) if f.time >= last["started"] - 1])
        hung_at = first.time if first is not None and first.message.startswith("hung") else None
        # A hang stopped at its last progress (the ledger counts the rest as hung); anything else when the
        # tasks ended, or when the first failure was recorded.
        when = first.time if first is not None and not hung_at else now
        if hung_at:
            when = reached["time"] if last["started"] <= reached.get("time", -1) <= hung_at else hung_at
        stop = {"reason": reason, "step": reached.get("step", last.get("resumed_step")), "time": when}
        unrecorded(last, stop, reached, first)
    elif stop.get("reason") == "finished" or not final:
        return  # closed by rank 0 already: a finished run has its own summary; a requeue's history goes on
    stop["final"] = final
    write_text(attempts.path, json.dumps(attempts.items, indent=1) + "\n")
    if final:
        ended = {"finished": False, "ended": stop["reason"], "as_of": round(now, 3), "step": stop["step"]}
        attempts.write_summary(ended, max(stop["time"], stop.get("hung_at") or 0.0))


def unrecorded(
    attempt: dict[str, Any], stop: dict[str, Any], reached: dict[str, Any], cause: failures.Failure | None
) -> None:
    """`stop` made `attempt`'s, which recorded none, with the first failure's line (error.txt's) and when a hang
    was named; and the ledger's checkpoint_s, what that attempt's saves blocked as last logged."""
    if cause is not None:
        stop["error"] = cause.line()
        stop |= {"hung_at": cause.time} if cause.message.startswith("hung") else {}
    if "checkpoint_s" in reached:
        attempt["checkpoint_s"] = reached["checkpoint_s"]
    attempt["stop"] = stop


def last_progress(path: Path) -> dict[str, Any]:
    """progress.json's step, time and checkpoint_s; {} when there is none or it cannot be read. It is written
    without fsync (on the step's path), so a node's crash can leave it empty or torn: a hint for the history,
    never a reason to refuse the restart (the checkpoints say where the run resumes)."""
    reached = json_or_none(path)
    return {k: v for k, v in reached.items() if isinstance(v, int | float)} if isinstance(reached, dict) else {}


def unrecorded_stop(env: DistEnv, restart_count: int) -> dict[str, str]:
    """Why the attempt at `restart_count` ended without recording a stop: "requeued" when Slurm requeued it from
    outside (a hand `scontrol requeue`), "preempted" when Slurm says so, else "failure" (a crash, a killed task,
    a lost node, or srun failing and the supervisor requeueing the job: requeue_on_failure), with Slurm's own
    state of that attempt where accounting has it (NODE_FAIL: a lost node)."""
    if not env.slurm_job_id or not env.attempt:
        return {"reason": "failure"}
    if Attempt.of(env.attempt).earlier(restart_count).failed.exists():
        return {"reason": "failure"}
    try:
        out = subprocess.run(
            ["sacct", "-j", env.slurm_job_id, "-D", "-X", "-n", "-P", "-o", "Start,State"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):  # no accounting on this cluster
        return {"reason": "failure"}
    records = sorted(line.split("|") for line in out.stdout.splitlines() if "|" in line)  # one per attempt
    state = records[restart_count][1].split(" ")[0] if len(records) > restart_count else ""
    reason = {"REQUEUED": "requeued", "PREEMPTED": "preempted"}.get(state, "failure")
    return {"reason": reason} | ({"slurm_state": state} if state else {})


class RequeueExit(SystemExit):
    """Leave the task without a result, so the job is requeued rather than reported finished."""


def record_stop(
    env: DistEnv,
    attempts: Attempts,
    settings: JobSettings,
    step: int | None,
    run_dir: Path,
    signalled_at: float | None,
    requeue_now: bool = True,
) -> bool:
    """Rank 0: record why the run stopped at `step` (None: a script, whose steps are its own) and requeue the
    job (unless `requeue_now` is False: the caller does, with requeue()), unless past max_num_timeout. Returns
    whether the run goes on (requeued).

    Without a signal the command asked for it (a script's exit 144): "requested", counted against the same
    budget as time limits, so a script that always asks cannot loop for ever."""
    slurm_job = _slurm_job(env)
    if signalled_at is None and step is None:
        reason = "requested"
    elif slurm_job:
        reason = stop_reason(slurm_time_left(slurm_job), settings.signal_delay_s)
    else:
        # No Slurm job to ask. The local controller signals only before its time limit; a signal to
        # torchrun outside Slurm is counted the same way (it, too, ends with a requeue or a stop).
        reason = "timeout"
    attempts.stop(reason, step, signalled_at)
    count = attempts.count(reason)
    if reason in BUDGETED and count > settings.max_num_timeout:
        what = BUDGETED[reason]
        where = f" at step {step} with a checkpoint" if step is not None else ""
        fix = " and a longer --time" if reason == "timeout" else ""
        message = (
            f"{what} {count} time(s), more than max_num_timeout={settings.max_num_timeout}: "
            f"stopped{where}; resubmit with --resume {run_dir}{fix}"
        )
        failures.record(run_dir, failures.Failure(time.time(), env.rank, env.node_name, "", message, False))
        print(f"error: {message}", file=sys.stderr, flush=True)
        return False
    print(f"{reason}: saved at step {step}, requeueing" if step is not None else f"{reason}: requeueing", flush=True)
    if requeue_now:
        requeue(env)
    return True


def _slurm_job(env: DistEnv) -> str | None:
    """The Slurm job, however the ranks were started in it (srun tasks, or torchrun inside a task)."""
    return env.slurm_job_id if env.source in ("slurm", "torchrun") else None


def requeue(env: DistEnv) -> None:
    """Ask Slurm to requeue the job (the local controller restarts on the tasks' exit code instead). Slurm then
    ends every task: the ranks must have agreed to stop first, or one still talking to its peers fails."""
    if slurm_job := _slurm_job(env):
        # Under PreemptMode=REQUEUE Slurm requeues by itself; asking again is then harmless.
        subprocess.run(["scontrol", "requeue", slurm_job], capture_output=True, timeout=60)


# Stops counted against max_num_timeout, and how the message names them.
BUDGETED = {"timeout": "time limit reached", "requested": "requeue asked for by the command (exit 144, no signal)"}


def leave(env: DistEnv, requeued: bool) -> SystemExit:
    """The exit each rank takes after a stop: requeued, or stopped for good (exit 3)."""
    if not requeued:
        mark_stopped(env.attempt)
        return SystemExit(3)
    # submitit's local controller restarts tasks exiting with its code (torch-free, but not the standard library:
    # imported here, so the Slurm step's supervisor, which imports this module, needs nothing beyond it)
    from submitit.local.local import LOCAL_REQUEUE_RETURN_CODE

    return RequeueExit(LOCAL_REQUEUE_RETURN_CODE if env.source == "submitit-local" else 0)

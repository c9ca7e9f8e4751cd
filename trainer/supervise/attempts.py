"""Why a run stopped, the history of its attempts, and the requeue (torch-free: scripts' tasks use it too)."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from submitit.local.local import LOCAL_REQUEUE_RETURN_CODE  # the local controller restarts tasks exiting with it

from trainer.env.launcher import DistEnv
from trainer.errors import UserError
from trainer.run import failures, ledger
from trainer.run.atomic import json_or_none, read_json, write_text
from trainer.run.rundir import RunDir
from trainer.supervise.relay import earlier_attempt, mark_stopped
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
        training loop at most once a LIVE_SUMMARY_S. The finished run's summary (trainer.train, trainer.script)
        replaces it with `"finished": true`: only that one says the run is done (RunDir.finished). Not by an
        attempt that has nothing to train (start's `live`): the finished summary stays. `step`: the loop's, else
        where this attempt stopped or resumed."""
        if not self.live:
            return None
        now, last = time.time(), self.items[-1]
        step = step if step is not None else (last.get("stop") or {}).get("step", last.get("resumed_step"))
        parts = ledger.of_run(self.run_dir, self.items, now, int(last.get("world_size") or 1))
        live = {"finished": False, "as_of": round(now, 3)} | ({"step": step} if step is not None else {})
        write_text(RunDir(self.run_dir).summary, json.dumps(live | self.totals() | {"ledger": parts}, indent=2) + "\n")
        self.summarised = time.monotonic()
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
                    why = {"reason": "failure"}  # the batch script (or controller) starts again only after one
                else:
                    why = unrecorded_stop(env, previous.get("slurm_restart_count", 0)) if env else {"reason": "failure"}
                stop = why | {
                    "step": reached.get("step", resumed_step),
                    "time": reached.get("time", previous["started"]),
                }
                if "checkpoint_s" in reached:  # the ledger's: what that attempt's saves blocked, as last logged
                    previous["checkpoint_s"] = reached["checkpoint_s"]
                if cause:
                    stop["error"] = cause.line()  # the first failure's line (error.txt's, then)
                    stop |= {"hung_at": cause.time} if cause.message.startswith("hung") else {}
                previous["stop"] = stop
            # After a finished attempt the wait for this one (a --resume with more steps) is the user's, not lost.
            lost = 0.0 if stop["reason"] == "finished" else time.time() - stop["time"]
            known = stop["step"] is not None and resumed_step is not None  # a script's steps are its own
            cost = {"time_lost_s": lost, "steps_recomputed": max(0, stop["step"] - resumed_step) if known else None}
            previous["cost"] = cost
        attempt = {"started": time.time(), "resumed_step": resumed_step, "slurm_restart_count": restart_count}
        attempt |= {"world_size": env.world_size} if env else {}
        attempt |= {"in_job_restart": env.in_job_restart} if env and env.in_job_restart else {}
        attempt |= {"startup": startup} if startup else {}
        self.items.append(attempt | ({"warnings": list(warnings)} if warnings else {}))
        self._write()
        return cost

    def stop(self, reason: str, step: int | None, signalled_at: float | None = None) -> None:
        """Record why and where this attempt stopped; `time` is when the checkpoint was on disk."""
        self.items[-1]["stop"] = {"reason": reason, "step": step, "time": time.time(), "signal_time": signalled_at}
        self._write()

    def blocked_on_checkpoints(self, seconds: float) -> None:
        """This attempt's steps were blocked this long by saves so far (the ledger's checkpointing); written
        with the attempt's stop."""
        self.items[-1]["checkpoint_s"] = round(seconds, 3)

    def count(self, reason: str) -> int:
        return sum(1 for a in self.items if (a.get("stop") or {}).get("reason") == reason)

    def wall_time_s(self) -> float:
        return time.time() - self.items[0]["started"]

    def totals(self) -> dict[str, float]:
        costs = [a["cost"] for a in self.items if "cost" in a]
        return {
            "restarts": len(self.items) - 1,
            "timeouts": self.count("timeout"),
            "preemptions": self.count("preempted"),
            "failures": self.count("failure"),
            "requeues": self.count("requeued"),
            "requested": self.count("requested"),
            "in_job_restarts": sum(1 for a in self.items if a.get("in_job_restart")),
            "time_lost_s": round(sum(c["time_lost_s"] for c in costs), 3),
            "steps_recomputed": sum(int(c["steps_recomputed"] or 0) for c in costs),
        }


def last_progress(path: Path) -> dict[str, Any]:
    """progress.json's step, time and checkpoint_s; {} when there is none or it cannot be read. It is written
    without fsync (on the step's path), so a node's crash can leave it empty or torn: a hint for the history,
    never a reason to refuse the restart (the checkpoints say where the run resumes)."""
    reached = json_or_none(path)
    return {k: v for k, v in reached.items() if isinstance(v, int | float)} if isinstance(reached, dict) else {}


def unrecorded_stop(env: DistEnv, restart_count: int) -> dict[str, str]:
    """Why the attempt at `restart_count` ended without recording a stop: "requeued" when Slurm requeued it from
    outside (a hand `scontrol requeue`), "preempted" when Slurm says so, else "failure" (a crash, a killed task,
    a lost node, or srun failing and the batch script requeueing the job: requeue_on_failure), with Slurm's own
    state of that attempt where accounting has it (NODE_FAIL: a lost node)."""
    if not env.slurm_job_id or not env.attempt:
        return {"reason": "failure"}
    if os.path.exists(earlier_attempt(env.attempt, env.slurm_job_id, restart_count) + ".failed"):
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
) -> bool:
    """Rank 0: record why the run stopped at `step` (None: a script, whose steps are its own) and requeue the
    job, unless past max_num_timeout. Returns whether the run goes on (requeued).

    Without a signal the command asked for it (a script's exit 144): "requested", counted against the same
    budget as time limits, so a script that always asks cannot loop for ever."""
    # The Slurm job, however the ranks were started in it (srun tasks, or torchrun inside a task).
    slurm_job = env.slurm_job_id if env.source in ("slurm", "torchrun") else None
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
    if slurm_job:
        # Under PreemptMode=REQUEUE Slurm requeues by itself; asking again is then harmless.
        subprocess.run(["scontrol", "requeue", slurm_job], capture_output=True, timeout=60)
    return True


# Stops counted against max_num_timeout, and how the message names them.
BUDGETED = {"timeout": "time limit reached", "requested": "requeue asked for by the command (exit 144, no signal)"}


def leave(env: DistEnv, requeued: bool) -> SystemExit:
    """The exit each rank takes after a stop: requeued, or stopped for good (exit 3)."""
    if not requeued:
        mark_stopped(env.attempt)
        return SystemExit(3)
    return RequeueExit(LOCAL_REQUEUE_RETURN_CODE if env.source == "submitit-local" else 0)

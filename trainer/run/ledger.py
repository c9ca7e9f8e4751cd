"""Where a run's wall time went: the goodput ledger, a pure function of attempts.json (torch-free).

The trainer records, as the run goes, what the ledger needs in each attempt of attempts.json: when its process
started (`startup.process_start`), when it began training (`started`), the seconds its steps were blocked on a
checkpoint (`checkpoint_s`), where and when it stopped (`stop`, with `hung_at` when a hang was named),
and how many steps the next attempt did again (`cost.steps_recomputed`). From those and the submission time
the ledger cuts the wall time into parts that add up to it:

- queued: submission to the first process, and every requeue's wait (the job back in the queue);
- starting: each attempt's process start to its first step (imports, the process group, data, the restore);
- training: steps that count;
- checkpointing: the time steps were blocked on a save;
- recomputed: steps done again after a failure (the steps since the last checkpoint, at the attempt's pace);
- hung: from the last progress to a hang being named;
- restarting: a failure to the next start in the same allocation (an in-job restart).

`goodput` is training / wall; `gpu_hours` counts one GPU per rank over the time the allocation was held (the
wall time less the queue). An attempt's start counts from its first process's start, not from Slurm's
allocation: the batch script's own fraction of a second before srun counts as queued.
"""

import time
from pathlib import Path
from typing import Any

from trainer.run.atomic import json_or_none
from trainer.run.provenance import read_submit
from trainer.run.rundir import RunDir

PARTS = ("queued", "starting", "training", "checkpointing", "recomputed", "hung", "restarting")


def ledger(
    submitted: float, attempts: list[dict[str, Any]], end: float, ranks: int, open_until: float | None = None
) -> dict[str, float]:
    """The ledger of a run submitted at `submitted` whose attempts are `attempts`, up to `end` (its last
    stop when it finished, now while it runs). An attempt with no stop recorded trains up to `open_until` (its
    last progress, when no rank of it runs any more), else up to `end`. Each interval goes to one part, so the
    parts sum to `wall`."""
    parts = dict.fromkeys(PARTS, 0.0)
    cursor = submitted
    previous: dict[str, Any] | None = None
    for attempt in attempts:
        begin = min(max((attempt.get("startup") or {}).get("process_start") or attempt["started"], cursor), end)
        _gap(parts, previous, cursor, begin, restart=bool(attempt.get("in_job_restart")))
        started = min(max(attempt["started"], begin), end)
        parts["starting"] += started - begin
        stop = attempt.get("stop")
        stopped = min(max(stop["time"] if stop else (open_until or end), started), end)
        span = stopped - started
        blocked = min(float(attempt.get("checkpoint_s") or 0.0), span)
        redone = min(_recomputed_s(previous, attempt, span), span - blocked)
        parts["checkpointing"] += blocked
        parts["recomputed"] += redone
        parts["training"] += span - blocked - redone
        previous, cursor = attempt, stopped
    _gap(parts, previous, cursor, end, restart=False)
    wall = end - submitted
    held = wall - parts["queued"]
    result = {k: round(v, 3) for k, v in parts.items()}
    result |= {
        "wall": round(wall, 3),
        "goodput": round(parts["training"] / wall, 4) if wall > 0 else 0.0,
        "gpu_hours": round(ranks * held / 3600, 4),
    }
    return result if recompute_known(attempts) else result | {"recomputed_known": False}


def recompute_known(attempts: list[dict[str, Any]]) -> bool:
    """Whether the steps done again after every stop are known: not after a stop from which the run went on
    at a step nobody reported (a script that does not call trainer.requeue.progress(step)). Its recomputed
    part is then 0 for want of a figure, and training (goodput) an upper bound."""
    for previous, attempt in zip(attempts, attempts[1:], strict=False):
        stop = previous.get("stop") or {}
        if stop.get("reason") == "finished" or stop.get("final"):
            continue  # nothing was done again: the run had ended, a --resume goes on by choice
        if stop.get("step") is None or attempt.get("resumed_step") is None:
            return False
    return True


def _gap(parts: dict[str, float], previous: dict[str, Any] | None, since: float, until: float, restart: bool) -> None:
    """The time between two attempts (or before the first, or after the last): a named hang's share first, the
    rest queued (a requeue) or restarting (in the allocation)."""
    gap = max(until - since, 0.0)
    if previous is None:
        parts["queued"] += gap
        return
    stop = previous.get("stop") or {}
    hung = min(max(stop["hung_at"] - since, 0.0), gap) if stop.get("hung_at") else 0.0
    parts["hung"] += hung
    parts["restarting" if restart else "queued"] += gap - hung


def _recomputed_s(previous: dict[str, Any] | None, attempt: dict[str, Any], span: float) -> float:
    """The seconds this attempt spent on steps the one before had done: their count at this attempt's pace."""
    redo = ((previous or {}).get("cost") or {}).get("steps_recomputed") or 0
    stop, resumed = attempt.get("stop") or {}, attempt.get("resumed_step")
    if not redo or resumed is None or stop.get("step") is None or stop["step"] <= resumed:
        return 0.0
    return redo * span / (stop["step"] - resumed)


def total(ledgers: list[dict[str, float]]) -> dict[str, float]:
    """A sweep's: its points' ledgers added up (goodput of the sum, not the mean of the points')."""
    summed = {k: round(sum(p.get(k, 0.0) for p in ledgers), 3) for k in (*PARTS, "wall", "gpu_hours")}
    unknown = {"recomputed_known": False} if any(p.get("recomputed_known") is False for p in ledgers) else {}
    return summed | {"goodput": round(summed["training"] / summed["wall"], 4) if summed["wall"] > 0 else 0.0} | unknown


def line(parts: dict[str, float]) -> str:
    """One line for jobs.status: goodput and the largest losses."""
    lost = sorted(
        ((parts.get(k, 0.0), k) for k in PARTS if k != "training" and parts.get(k, 0.0) >= 0.05), reverse=True
    )
    where = ", ".join(f"{k} {seconds_text(v)}" for v, k in lost[:4])
    if parts.get("recomputed_known") is False:  # said so: the work done again is not in these figures
        where += (", " if where else "") + "recomputed unknown: the command reports no step"
        return f"at most {parts['goodput']:.0%} of {seconds_text(parts['wall'])} trained ({where})"
    return f"{parts['goodput']:.0%} of {seconds_text(parts['wall'])} trained" + (f" ({where})" if where else "")


def goodput_text(parts: dict[str, float] | None) -> str:
    """A ledger's goodput for a table's column: "<=" before it when the work done again is unknown."""
    if not parts:
        return "-"
    return ("<=" if parts.get("recomputed_known") is False else "") + f"{parts['goodput']:.0%}"


def seconds_text(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def of_run(
    run_dir: Path,
    attempts: list[dict[str, Any]],
    end: float,
    ranks: int | None = None,
    open_until: float | None = None,
) -> dict[str, float] | None:
    """The ledger of the run in `run_dir` up to `end`; None before its first attempt. Submitted: when
    provenance/submit.json says (the sweep's for a point), else the first attempt's process start. Ranks: the
    last attempt's world size unless given."""
    if not attempts:
        return None
    first = attempts[0]
    submitted = read_submit(run_dir).get("time")
    if not isinstance(submitted, int | float):
        submitted = (first.get("startup") or {}).get("process_start") or first["started"]
    ranks = ranks or int(attempts[-1].get("world_size") or 1)
    return ledger(float(min(submitted, first["started"])), attempts, end, ranks, open_until)


def read(run_dir: Path, state: str) -> dict[str, float] | None:
    """A run's ledger for jobs.status, jobs.list, jobs.top and jobs.picture, by its job's Slurm-style `state`:
    summary.json's when the run finished or ended (unless a --resume's job runs it again); else from attempts.json (summary.json's as the run goes may be a
    minute old), up to now
    while the job is pending or running, up to its last recorded moment when it is not. An attempt with no
    stop trains up to now only while the job is RUNNING; else up to its last progress. None when there is
    nothing to read (no attempt yet, or a record that cannot be read)."""
    files = RunDir(run_dir)
    summary = files.ended_summary()
    if (
        summary is not None
        and (state not in LIVE or "ended" not in summary)
        and isinstance(summary.get("ledger"), dict)
    ):
        return sane(summary["ledger"])
    attempts = json_or_none(files.attempts)
    if not isinstance(attempts, list) or not all(isinstance(a, dict) and "started" in a for a in attempts):
        return None
    try:
        reached = json_or_none(files.progress)
        moments = [a["started"] for a in attempts] + [(a.get("stop") or {}).get("time") or 0 for a in attempts]
        moments += [reached.get("time") or 0] if isinstance(reached, dict) else []
        last = max(m for m in moments if isinstance(m, int | float))
        end = time.time() if state in LIVE else last
        return sane(of_run(run_dir, attempts, end, open_until=None if state == "RUNNING" else last))
    except (KeyError, TypeError, ValueError, AttributeError):  # a record from an older version, or hand-edited
        return None


def sane(parts: dict[str, float] | None) -> dict[str, float] | None:
    """`parts` when every figure is a number, none negative, goodput at most 1; else None (a hand-edited record
    must not show a negative part or 140% goodput: no ledger is shown instead)."""
    keys = (*PARTS, "wall", "goodput")
    if not isinstance(parts, dict) or not all(isinstance(parts.get(k), int | float) for k in keys):
        return None
    if any(not 0 <= parts[k] < float("inf") for k in keys) or parts["goodput"] > 1:
        return None
    return parts


LIVE = ("RUNNING", "PENDING", "REQUEUED", "REQUEUE_HOLD", "CONFIGURING", "COMPLETING")  # counted up to now

"""A hang no rank can name: every rank frozen at once (a filesystem stall, a stopped job). Each rank's watchdog
is a thread inside its process and freezes with it, so the supervisor watches from outside, on rank 0's node:
rank 0's watchdog leaves its heartbeat in a node-local file as well (never the shared filesystem), with the
budget of the section it is in. Once that heartbeat is older than the time in which the other ranks would have
named rank 0 (its budget, a peer's extra, the store's silence, a margin), nobody is left to name anything: the
supervisor names it and ends the step. Torch-free, standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from trainer.errors import UserError
from trainer.run.failures import Failure, record

# Beyond the moment the others would have named rank 0: their record, a loaded machine, and a peer's budget a
# little longer than the one rank 0 wrote (each rank's is its own longest step's multiple).
MARGIN_S, MARGIN_SHARE = 4.0, 0.05
STORE_WAIT_S = 5.0  # how long a hang's detector waits for the store's answer: a stopped rank 0 never gives one
CHECK_S = 1.0  # how often a rank's watchdog looks at its budget (trainer.supervise.watchdog)


def write_beat(path: Path, beat: dict) -> None:
    """Rank 0's heartbeat, whole or not at all (a rename on a node-local filesystem)."""
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(beat))
    os.replace(part, path)


def frozen(path: Path, now: float) -> tuple[Failure, str] | None:
    """The failure no rank named, from rank 0's heartbeat; None while it is alive, or absent."""
    try:
        beat = json.loads(path.read_text())
        written, since, budget, beat_s = (float(beat[k]) for k in ("written", "since", "budget", "beat_s"))
        step, section, host, run_dir = int(beat["step"]), str(beat["section"]), str(beat["host"]), str(beat["run_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    silent = now - written
    # A peer waiting on rank 0 has the budget rank 0 wrote (2 beats more than rank 0's own, in a section that
    # waits on peers), looks once a second, then waits for the store's answer; joining the group, there is no
    # store and no peer to wait for: the budget alone.
    peers = 0.0 if section == "rendezvous" else CHECK_S + STORE_WAIT_S
    named_by = since + budget + peers + MARGIN_S + MARGIN_SHARE * budget
    if silent <= 2 * beat_s + 1 or now < named_by:
        return None
    where = f"at step {step}, in section {section}" if step >= 0 else f"in section {section}"
    line = (
        f"hung: every rank stopped: rank 0's heartbeat stopped {silent:.0f} s ago {where}, and no rank named a hang "
        f"(all frozen: a stalled filesystem, a stopped job); seen by the supervisor"
    )
    if section == "rendezvous":
        hint = str(beat.get("hint", ""))
        line = f"hung: the process group did not form in {silent:.0f} s, and no rank could say so (seen by the supervisor){hint}"
    return Failure(now, 0, host, "", line, False), run_dir


def name_and_end(path: Path, now: float) -> bool:
    """Record the hang no rank named, if there is one, in its run's errors/ (error.txt names it); True if so:
    the caller then ends the tasks."""
    found = frozen(path, now)
    if found is None:
        return False
    failure, run_dir = found
    print(f"hang: {failure.line()}", flush=True)
    try:
        record(Path(run_dir), failure)
    except (OSError, ValueError, UserError) as exc:
        print(f"warning: could not record the hang: {exc}", flush=True)
    with contextlib.suppress(OSError):
        path.unlink()  # named once
    return True

"""What jobs.top shows while a run trains: every rank's latest heartbeat, written by rank 0 only while someone
watches (torch-free).

jobs.top touches `top.request` in the run folder about once a second. A thread of rank 0 (Channel, apart from
the watchdog's: a stalled filesystem must not hold the heartbeats) looks at that file's age once a second; while it is fresh
(WATCHED_S), it reads every rank's heartbeat from where the ranks already put them (the job's store, or the
heartbeat files before the group forms) and writes `live.json` beside it. Nobody watching: one stat a second
on rank 0, nothing on the other ranks, no write. With hang.enabled=false no watchdog thread runs: no live view. The other
ranks' rows are as fresh as their heartbeats (hang.beat_s); their figures are those of their last log
interval (log.every), measured by the training loop at no cost of its own (no extra synchronisation).
"""

import contextlib
import faulthandler
import json
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.errors import UserError
from trainer.run import procfs
from trainer.run.atomic import json_or_none, write_text
from trainer.run.rundir import RunDir
from trainer.supervise.stacks import DUMP_SIGNAL

WATCHED_S = 5.0  # a request older than this: nobody watches any more


def request(run_dir: Path, save: bool = False, requeue: bool = False) -> None:
    """jobs.top: ask rank 0 for live.json for the next WATCHED_S seconds, and with `save` for a checkpoint at
    the next vote (dist.stop_check_every steps), training on. `requeue`: the requeue signal was just sent (no
    rank reads it: jobs.ops.act refuses another until the next attempt starts). Earlier asks are kept."""
    now = time.time()
    ask = {what: now if new else asked(run_dir, what) for what, new in (("save", save), ("requeue", requeue))}
    write_text(RunDir(run_dir).top_request, json.dumps({"time": now} | ask) + "\n")


def asked(run_dir: Path, what: str) -> float:
    """When jobs.top last asked for `what` (0: never): "save" (rank 0 reads it only while jobs.top watches), or
    "requeue" (it last sent the requeue signal)."""
    record = json_or_none(RunDir(run_dir).top_request)
    asked = record.get(what) if isinstance(record, dict) else None
    return float(asked) if isinstance(asked, int | float) and asked > 0 else 0.0


# jobs.top's dump key, where py-spy cannot read a rank (trainer.supervise.stacks): each rank of the trainer
# writes every thread's Python stack into its log (stderr) on this signal (faulthandler, in the signal handler: it
# works while the training thread is stuck in C). Its loader workers, forked after, inherit the handler. SIGURG,
# because its default action is to ignore it: a process that did not register (a -- COMMAND, a batch shell) is not
# killed by it.


def dump_stacks_on_signal() -> None:
    faulthandler.register(DUMP_SIGNAL, all_threads=True, chain=False)


def watched(run_dir: Path) -> bool:
    try:
        return time.time() - os.stat(RunDir(run_dir).top_request).st_mtime < WATCHED_S
    except OSError:
        return False


def share(run_dir: Path, beats: list[dict[str, Any]], attempt: str, world_size: int) -> None:
    """Rank 0: every rank's beat as one file for jobs.top."""
    record = {"time": time.time(), "attempt": attempt, "world_size": world_size, "beats": beats}
    write_text(RunDir(run_dir).live, json.dumps(record) + "\n")


def read(run_dir: Path) -> dict[str, Any] | None:
    record = json_or_none(RunDir(run_dir).live)
    return record if isinstance(record, dict) and isinstance(record.get("beats"), list) else None


def host_memory_mb() -> float:
    """This process's resident memory now (Linux's /proc), else its peak (getrusage)."""
    resident = procfs.resident_bytes()
    return resident / 2**20 if resident is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Channel:
    """Rank 0's thread for jobs.top, apart from the heartbeats (a stalled shared filesystem must not stop the
    node-local beat the supervisor reads). Each second, while jobs.top asks (one stat): every rank's beat into
    live.json, and a save asked for counted for the training thread's next vote (take_save). Other ranks'
    channels never start: take_save is False there."""

    run_dir: Path
    beats: Callable[[], list[dict[str, Any]]]  # every rank's latest beat (the watchdog's beats_now)
    attempt: str = ""
    world_size: int = 1
    # Save requests seen and taken (counters: this thread adds, the training thread takes; a request made
    # before this process started is an earlier attempt's, and not taken again).
    _seen: int = 0
    _taken: int = 0
    _asked: float = field(default_factory=time.time)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "Channel":
        self._thread = threading.Thread(target=self._run, name="jobs-top", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)  # one stuck on a hung filesystem is left behind

    def take_save(self) -> bool:
        """Whether jobs.top asked for a save since the last call."""
        seen = self._seen
        asked, self._taken = seen > self._taken, seen
        return asked

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            if not watched(self.run_dir):
                continue
            with contextlib.suppress(
                OSError, UserError, RuntimeError, TimeoutError, ValueError
            ):  # the view waits a second
                share(self.run_dir, self.beats(), self.attempt, self.world_size)
            when = asked(self.run_dir, "save")
            if when > self._asked:
                self._asked, self._seen = when, self._seen + 1

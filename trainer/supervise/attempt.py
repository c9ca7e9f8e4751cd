"""One start of a job's tasks, and every name it goes by, in one format (standard library only: the Slurm batch
step imports it with the node's python3).

A job keeps its id across requeues; Slurm counts them (SLURM_RESTART_COUNT, the local controller its own), and
the supervisor counts the restarts in one allocation. The allocation's marks live in the job's log folder as
`attempt_JOB_REQUEUE.KIND`: `.signal` (the requeue signal came; the batch shell leaves it even before the
supervisor runs), `.stopped` (a rank stopped on purpose: a restart would stop alike), `.failed` (the supervisor
requeued the job after a failure: the next attempt counts this one as a failure). What each start agrees on
anew (its port, its store file, the ranks' exit words) is named by its key, `JOB_REQUEUE_RESTART`, so no start
reads an earlier one's. Rank 0's heartbeat for the supervisor is node-local and per start.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

ATTEMPT = "SLURM_DDP_ATTEMPT"  # every task's: its allocation's prefix in the log folder
IN_JOB_RESTART = "SLURM_DDP_IN_JOB_RESTART"  # every task's: restarts in this allocation before its start
WATCH_BEAT = "SLURM_DDP_WATCH_BEAT"  # rank 0's: the node-local file it leaves its heartbeat in too
NAME = "attempt_{job}_{requeue}"  # the batch script spells it in bash too (jobs.restarts)


def node_local(name: str) -> Path:
    """A file on this node alone (never the shared filesystem): /dev/shm where there is one."""
    return Path("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()) / name


@dataclass(frozen=True)
class Attempt:
    log_dir: Path
    job_id: str
    requeue: int = 0  # Slurm's restart count, or the local controller's own requeues
    in_job: int = 0  # restarts in this allocation before this start
    start: int = 0  # the supervisor's starts before this one (its heartbeat file is per start)

    @property
    def key(self) -> str:
        return f"{self.job_id}_{self.requeue}_{self.in_job}"

    @property
    def prefix(self) -> str:
        return str(self.log_dir / NAME.format(job=self.job_id, requeue=self.requeue))

    @property
    def signal(self) -> Path:
        return Path(self.prefix + ".signal")

    @property
    def stopped(self) -> Path:
        return Path(self.prefix + ".stopped")

    @property
    def failed(self) -> Path:
        return Path(self.prefix + ".failed")

    @property
    def node_signal(self) -> Path:
        """The node-local copy of the signal's file, the same name on every node of the job."""
        return node_local(f"slurm-ddp-{Path(self.prefix).name}.signal")

    @property
    def beat(self) -> Path:
        """Rank 0's node-local heartbeat, read by the supervisor (trainer.supervise.watch); the supervisor's
        pid in it: two supervisors of one job id never share it."""
        return node_local(f"slurm-ddp-beat-{self.job_id}-{os.getpid()}-{self.start}.json")

    def earlier(self, requeue: int) -> Attempt:
        return replace(self, requeue=requeue, in_job=0, start=0)

    def environ(self) -> dict[str, str]:
        """What every task of this start is told."""
        return {ATTEMPT: self.prefix, IN_JOB_RESTART: str(self.in_job), WATCH_BEAT: str(self.beat)}

    @staticmethod
    def of(prefix: str) -> Attempt:
        """The attempt a task was told of (ATTEMPT): `LOG_DIR/attempt_JOB_REQUEUE`."""
        head, _, requeue = Path(prefix).name.removeprefix("attempt_").rpartition("_")
        return Attempt(Path(prefix).parent, head, int(requeue) if requeue.isdigit() else 0)


def mark_stopped(prefix: str | None) -> None:
    """A rank stopped on purpose (a budget spent, bad input): the supervisor then starts no restart."""
    if prefix:
        with contextlib.suppress(OSError):
            Attempt.of(prefix).stopped.touch()


def exit_word(key: str, rank: int, frozen: bool = False) -> str:
    """A script's rank's word to rank 0 in the run's exits/ folder: its command ended, or froze for the requeue."""
    return f"{key}_{'frozen_' if frozen else ''}rank_{rank}"

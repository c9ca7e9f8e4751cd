"""The requeue signal, from the batch shell to the processes that want it (torch-free).

Slurm sends the profile's signal to the batch shell alone (`#SBATCH --signal=B:USR2@N`): sent to the job's
steps, it would reach every process of every task, children included, and a script without a handler (nearly
every script) would die of it instead of being requeued. The supervisor in the batch step
(trainer.supervise.slurm) writes the attempt's `.signal` file (trainer.supervise.attempt) in the job's log folder, which every node sees,
and rank 0 of the trainer watches it. For a `-- COMMAND` script every task watches: on the shared filesystem
that would be 5 stat calls a second from each of thousands of ranks (and NFS may hide a new file for up to a
minute), so the supervisor also leaves a node-local copy on every node of the job (`srun --overlap ... touch`),
which the tasks watch; the shared file, looked at every FALLBACK_S, covers an srun that could not start.
The trainer's handler then saves at the next step boundary; a script's task passes the signal on only to
the processes of its command that catch it (`SigCgt` in /proc/PID/status) and stops a command in
which none does. Under the local profile the controller signals the task processes themselves, never their
children, so the same handlers run without a file.
"""

import contextlib
import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from trainer.run import procfs

POLL_S = 0.2
FALLBACK_S = 10.0  # a task's look at the shared signal file: 0.1 metadata calls a second
PR_SET_PDEATHSIG = 1


# Leaves the file, and removes it when the job ends its steps (SIGTERM, as a requeue or the job's end does) or
# after KEEP_S: the tasks read it within POLL_S, and a node's /dev/shm is not left a file per signal.
KEEP_S = 120
FAN_OUT = f"""f=$1; trap 'rm -f "$f"; exit 0' TERM INT; touch "$f"; sleep {KEEP_S} & wait $!; rm -f "$f" """


def fan_out_command(node_file: Path, job_id: str, nodes: int) -> list[str]:
    """srun's command that leaves the node-local signal file on each of the job's nodes for as long as the
    job runs: a step of its own beside the running one (--overlap), one task per node."""
    n = str(max(nodes, 1))
    step = ["srun", "--overlap", f"--jobid={job_id}", "-N", n, "--ntasks", n, "--ntasks-per-node=1"]
    return [*step, "--kill-on-bad-exit=0", "-o", "/dev/null", "bash", "-c", FAN_OUT, "bash", str(node_file)]


def fan_out_environment(environ: dict[str, str]) -> dict[str, str]:
    """The batch step's environment less what srun reads as the running step's options (its task count, CPUs,
    GPUs per task): the fan-out asks for one task per node, nothing else."""
    return {k: v for k, v in environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_")) or k == "SLURM_CONF"}


def watch(
    path: Path | None, signum: int, every: float = POLL_S, fallback: Path | None = None
) -> threading.Thread | None:
    """Raise `signum` in this process once `path` exists, or `fallback` (looked at every FALLBACK_S) does (a
    daemon thread; nothing without a path)."""
    if not path:
        return None

    def run() -> None:
        looked = -FALLBACK_S  # the shared file at once (a task started after the copy went), then every FALLBACK_S
        while not os.path.exists(path):
            if fallback and time.monotonic() - looked >= FALLBACK_S:
                looked = time.monotonic()
                if os.path.exists(fallback):
                    break
            time.sleep(every)
        os.kill(os.getpid(), signum)

    thread = threading.Thread(target=run, name="requeue-signal-watch", daemon=True)
    thread.start()
    return thread


def until(done: Callable[[], bool], seconds: float, pause: float) -> bool:
    """Whether `done()` came true within `seconds`: asked at once, then every `pause` seconds."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
    return True


def tree(pid: int) -> list[int]:
    """`pid` and every process below it (torchrun's workers run in sessions of their own: a process group
    would miss them)."""
    children, found, todo = procfs.children(), [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler installed for `signum` (its SigCgt mask)."""
    try:
        return bool(int(procfs.status(pid, "SigCgt") or "0", 16) >> (signum - 1) & 1)
    except ValueError:
        return False


def signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def stop_tree(pid: int, wait_s: float = 3.0) -> None:
    """SIGTERM and SIGCONT to `pid` and everything below it, SIGKILL to what is left after `wait_s`. SIGTERM
    first: a stopped process without a handler for it ends without running again (a frozen rank would
    otherwise wake to its peer's lost connection and fail on it); one with a handler wakes to run it."""
    end(tree(pid), wait_s)


def end(pids: list[int], wait_s: float) -> None:
    """SIGTERM and SIGCONT to `pids` (in that order: see stop_tree), SIGKILL to those left after `wait_s`."""
    signal_all(pids, signal.SIGTERM)
    signal_all(pids, signal.SIGCONT)
    until(lambda: not any(procfs.alive(p) for p in pids), wait_s, 0.05)
    signal_all([p for p in pids if procfs.alive(p)], signal.SIGKILL)


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphans below this process (a daemon a command forked off, a helper whose parent died) are reparented
    to it instead of init, so that tree(os.getpid()) still finds them: an end of the job ends them too, as the
    end of a Slurm step does. Whether the kernel agreed (Linux 3.4 on)."""
    try:
        return ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
    except (OSError, AttributeError):
        return False


def end_descendants(grace_s: float) -> None:
    """Every process below this one ended (end), then the zombies reaped: only once this process's own
    subprocesses were waited for (a reap here would take their exit codes from subprocess)."""
    me = os.getpid()
    end([p for p in tree(me) if p != me], grace_s)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """A child's preexec_fn: the kernel SIGKILLs it when its parent dies (Linux); a parent killed by SIGKILL
    (a failed peer, a cancel, a killed controller) cannot pass anything on itself."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass

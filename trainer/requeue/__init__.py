"""For your own script run by `python -m jobs.submit ... -- python train.py`: save on the requeue signal.

    from trainer import requeue

    requeue.install()                      # once, early: the profile's signal sets a flag
    for step in range(start, steps):
        ...train one step...
        requeue.progress(step)             # optional: the hang check waits on these calls, the
                                           # records learn where each attempt went on from
        if requeue.requested():            # under DDP, agree first: all_reduce the flag (MAX)
            save(os.environ["RUN_DIR"])    # your checkpoint, in the run directory
            requeue.exit_for_requeue()     # exit code 144: the job is requeued and the script starts again

Torch-free, standard library only and a few lines on purpose: copy this file into your project (as
requeue.py, say) if you would rather not import this one.

The rest of the requeue signal's way (its one spelling, the trainer's flag, the relay from the batch shell to
the tasks) is trainer.supervise's, with the rest of the job's supervision.
"""

import os
import signal
import sys
from typing import Any, NoReturn

SIGNAL_ENV = "REQUEUE_SIGNAL"  # the profile's signal, as the task names it (USR2): trainer.supervise.signals.ENV
PROGRESS_ENV = "SLURM_DDP_PROGRESS_FILE"  # set by the task that runs your command (trainer.supervise.script)
REQUEUE_EXIT = 144  # submitit's local requeue code, used for Slurm too: one number everywhere
_raised = False
_first: int | None = None  # the first step this process reported: where its attempt went on from


def _handle(signum: int, frame: Any) -> None:
    global _raised
    _raised = True  # only a flag: the step boundary acts on it


def install() -> None:
    """Set the flag on the requeue signal the submitter names in REQUEUE_SIGNAL (the profile's, e.g. USR2)."""
    name = os.environ.get(SIGNAL_ENV, "USR2").upper()
    name = name if name.startswith("SIG") else "SIG" + name
    if not isinstance(getattr(signal, name, None), signal.Signals):
        raise SystemExit(f"error: {SIGNAL_ENV}={name} is not a signal; the tool sets it (e.g. USR2): leave it to it")
    signal.signal(getattr(signal, name), _handle)


def requested() -> bool:
    return _raised


def progress(step: int | None = None) -> None:
    """Say a step was made (once a step, or more often): the run's hang check then waits on these calls alone,
    not on CPU time or output. With `step` (the step just done, numbered as your loop numbers it, the same
    after a resume) the run's records also know where each attempt went on from, and so the work a restart
    did again. A write to node-local memory: microseconds."""
    global _first
    path = os.environ.get(PROGRESS_ENV)
    if path:
        with open(path, "w" if step is not None else "a") as f:
            if step is not None:
                _first = int(step) if _first is None else _first
                f.write(f"{_first} {int(step)}")  # the task reads both, once a second
        os.utime(path)


def exit_for_requeue() -> NoReturn:
    sys.exit(REQUEUE_EXIT)

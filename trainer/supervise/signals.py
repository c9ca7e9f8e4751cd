"""The requeue signal, spelled in one place: its name, its default, and every form it takes on the way.

The profile names it without "SIG" (USR2). From that name come sbatch's `--signal=B:USR2@120`, the batch
shell's `trap ... USR2`, submitit's SUBMITIT_PREEMPT_SIGNAL, the REQUEUE_SIGNAL a script's task reads, and the
number a handler is installed for.
"""

from dataclasses import dataclass, field
from signal import Signals

from trainer.requeue import SIGNAL_ENV

NAMES = ("USR1", "USR2", "TERM", "INT", "HUP", "URG")  # the ones a job can be given and a script can catch
DEFAULT = "USR2"
DEFAULT_DELAY_S = 120
DEFAULT_MAX_NUM_TIMEOUT = 3
ENV = SIGNAL_ENV  # what a task tells your command (and what trainer.requeue reads)
SUBMITIT_ENV = "SUBMITIT_PREEMPT_SIGNAL"  # what submitit and the local controller read


def normalise(name: str) -> str:
    """The profile's spelling (USR2, or SIGUSR2) as the name every other form is made from; a ValueError
    naming the choices for any other."""
    short = name.removeprefix("SIG")
    if short not in NAMES:
        raise ValueError(f"signal {name!r} is unknown; use one of {', '.join(NAMES)}")
    return short


def number(name: str) -> Signals:
    return Signals["SIG" + normalise(name)]


@dataclass(frozen=True)
class JobSettings:
    """What the submitter tells every task about requeueing, from the profile: plain values, sent as a dict."""

    signal: str = DEFAULT  # without "SIG"
    signal_delay_s: int = DEFAULT_DELAY_S  # sent this long before the time limit
    max_num_timeout: int = DEFAULT_MAX_NUM_TIMEOUT  # requeues after a time limit before the job is left to end
    restarts_in_job: int = 0  # after a failed step, the tasks started again in the same allocation (no queue)
    grace_s: float = DEFAULT_DELAY_S - 30  # a -- COMMAND still running this long after the signal is stopped
    # A -- COMMAND's hang detection: the trainer's HangConfig as plain values (HangConfig.for_command of the
    # profile's script_hang_s). Not the type itself: the batch step's supervisor imports this module with the
    # node's own python3, where the config's pyyaml is missing.
    hang: dict[str, float | bool] = field(default_factory=lambda: {"timeout_s": 1800.0})

    @property
    def signum(self) -> Signals:
        return number(self.signal)

    def sbatch(self) -> str:
        """sbatch's --signal: to the batch shell alone (B:), signal_delay_s before the time limit."""
        return f"B:{self.signal}@{self.signal_delay_s}"

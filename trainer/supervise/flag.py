"""The requeue signal's flag (torch-free: installed before the slow imports, so no signal is missed)."""

import signal
import time
from typing import Any

from trainer.supervise import signals


class StopFlag:
    """Set asynchronously by the requeue signal, read by the training loop at step boundaries.

    The handler only sets a flag: no I/O, no collectives, nothing that can block.
    """

    def __init__(self, name: str = signals.DEFAULT) -> None:
        self.raised = False
        self.raised_at: float | None = None  # wall time of the first signal, for attempts.json
        self.signum = signals.number(name)
        # Replaces submitit's handler, which would requeue from inside the handler on rank 0 alone.
        signal.signal(self.signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.raised:
            self.raised_at = time.time()  # a clock read: it cannot block
        self.raised = True

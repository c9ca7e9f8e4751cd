"""Where this process's start-up went: wall-clock marks, kept in attempts.json by rank 0 (torch-free).

benchmarks/startup.py reads them to split RUNNING-to-first-step into its parts; a user reads them to see why
an attempt was slow to start (a torch import from a slow filesystem, a process group waiting for a peer).
"""

import time

from trainer.run.procfs import start_time

MARKS: dict[str, float] = {}


def mark(name: str) -> None:
    """Note that this process has just reached `name` (again: the latest time, as a second train() in one
    process, a benchmark's, reaches each mark again)."""
    MARKS[name] = time.time()


def seconds() -> dict[str, float]:
    """Each mark in seconds after this process started, in the order reached, plus the start itself."""
    start = start_time()
    return {"process_start": round(start, 3)} | {name: round(t - start, 3) for name, t in MARKS.items()}

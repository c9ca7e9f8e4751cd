"""Helpers shared by the benchmarks: timing whole commands, and printing a result line."""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def time_command(cmd: list[str], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


def timed(cmd: list[str], cwd: Path) -> float:
    """Seconds one command takes, run from `cwd` with this checkout's packages importable (as a user's folder)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed in {cwd}: {done.stderr[-2000:]}")
    return took


def report(name: str, value: float, baseline: float, unit: str, target: str, ok: bool) -> None:
    ratio = value / baseline if baseline else float("nan")
    verdict = "meets" if ok else "MISSES"
    print(
        f"{name}: {value:.4g} {unit} vs baseline {baseline:.4g} {unit} -> ratio {ratio:.3f} ({verdict} target {target})"
    )


def median(values: list[float]) -> float:
    return statistics.median(values)


def python() -> str:
    return sys.executable


class StateLog:
    """Polls a job's state in a thread; `transitions` holds (wall time, new state)."""

    def __init__(self, job_id: str, every_s: float = 0.1) -> None:
        self.job_id, self.every_s = job_id, every_s
        self.transitions: list[tuple[float, str]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        from tests.slurm import cluster  # the cluster benchmarks only

        last = None
        while not self.done.is_set():
            state = cluster.squeue_state(self.job_id) or "GONE"
            if state != last:
                self.transitions.append((time.time(), state))
                last = state
            time.sleep(self.every_s)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def gone(self) -> bool:
        """The job has left the queue (its last state seen is GONE)."""
        return bool(self.transitions) and self.transitions[-1][1] == "GONE"

    def first(self, state: str, after: float) -> float:
        return next(t for t, s in self.transitions if s == state and t >= after)

    def first_not(self, states: tuple[str, ...], after: float) -> float:
        return next(t for t, s in self.transitions if s not in states and t >= after)


def until_gone(job_id: str, what: str, timeout: float = 300) -> StateLog:
    """Poll the job's state every 0.1 s until it has left the queue; returns the states it went through."""
    from tests.slurm import cluster  # the cluster benchmarks only

    states = StateLog(job_id)
    try:
        cluster.wait_for(what, states.gone, timeout)
    finally:
        states.stop()
    return states


def submit(*args: str) -> str:
    """`python -m jobs.submit ARGS` as a user runs it; its output, or exit with the end of it on a failure."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "jobs.submit", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode:
        sys.exit(f"submit failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def step_times(run_dir: Path) -> dict[int, float]:
    """Wall time at which each step was first logged (log.every=1), from rank 0's TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from trainer.run.rundir import RunDir

    events = EventAccumulator(str(RunDir(run_dir).tensorboard), size_guidance={"scalars": 0})
    events.Reload()
    times: dict[int, float] = {}
    for event in events.Scalars("train/loss"):
        times.setdefault(event.step, event.wall_time)
    return times


def logged_step_time(folder: Path) -> float:
    """The median of perf/step_time_s in the one run under `folder`/runs (rank 0's events), the first interval
    left out (start-up)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [events] = list(folder.glob("runs/*/tensorboard"))
    accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
    accumulator.Reload()
    return statistics.median(e.value for e in accumulator.Scalars("perf/step_time_s")[1:])


def paired_rounds(
    rounds: int, measure: Callable[[Path, bool], float], said: tuple[str, str]
) -> tuple[list[float], list[float], list[float]]:
    """`rounds` interleaved pairs of measure(folder, True) and measure(folder, False), each in a fresh temporary
    folder; each round printed with `said` (the two sides' words). The with, without and ratio lists."""
    with_it, without, ratios = [], [], []
    for r in range(rounds):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            on, off = measure(Path(a), True), measure(Path(b), False)
        with_it.append(on)
        without.append(off)
        ratios.append(on / off)
        print(
            f"round {r + 1}: step {on * 1000:.2f} ms {said[0]}, {off * 1000:.2f} ms {said[1]}: {on / off:.4f}",
            flush=True,
        )
    return with_it, without, ratios

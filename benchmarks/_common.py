"""Helpers shared by the benchmarks: timing whole commands, and printing a result line."""

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def time_command(cmd: list[str], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return times


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

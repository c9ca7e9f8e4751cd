"""Benchmark 18: the time until each kind of hang is named, against its budget (local profile, 2 ranks, gloo).

Each scenario submits a long run with `--wait`, freezes it the way the hang happens, and times from the
freeze until error.txt names it; the goal is the budget + 15 s. The budgets are the run's own settings:
- one rank frozen (SIGSTOP rank 1, then rank 0, which holds the job's store): the step budget, hang.floor_s=10
  (steps here take far less, so the floor rules);
- every rank frozen at once (a stalled filesystem): the same budget, named by the controller, not a rank;
- a rank frozen before the process group forms: dist.timeout_s=20;
- a damaged store file at the attempt's rendezvous name (dist.init_method=file): dist.timeout_s=20.
Usage: python benchmarks/hang_naming.py [--rounds N] [--only NAME ...]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import HANG, LONG, job_pid, ranks, run_dirs  # noqa: E402

STEP_BUDGET_S, GROUP_TIMEOUT_S = 10.0, 20.0


def poll(what: str, condition: Callable[[], object], timeout: float = 120) -> object:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise SystemExit(f"benchmark failed: timed out waiting for {what}")
        time.sleep(0.05)
    return value


def step_of(run_dir: Path) -> int:
    try:
        return int(json.loads((run_dir / "progress.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return 0


def scenario(name: str, folder: Path, data: Path) -> tuple[float, float, str]:
    """(budget, seconds from the freeze until error.txt named it, the line) for one scenario."""
    folder.mkdir(parents=True)
    profile = folder / "profile.yaml"
    profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {folder / 'runs'}\n")
    extra = {
        "one-rank": HANG,
        "rank-0": HANG,
        "every-rank": HANG,
        "before-group": [f"dist.timeout_s={GROUP_TIMEOUT_S:g}"],
        "store-file": ["dist.init_method=file", f"dist.timeout_s={GROUP_TIMEOUT_S:g}"],
    }[name]
    args = ["--profile", str(profile), "--wait", f"data.root={data}", *LONG, *extra]
    with (folder / "submit.out").open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "jobs.submit", *args], cwd=ROOT, stdout=out, stderr=out)
    try:
        run_dir = poll("the run directory", lambda: (found := run_dirs(folder / "runs")) and found[0])
        assert isinstance(run_dir, Path)
        job = poll("the job", lambda: (run_dir / "job.json").exists() and job_pid(run_dir))
        if name == "store-file":
            store = run_dir / "rendezvous" / f"store_{job}_0_0"
            store.parent.mkdir(exist_ok=True)
            store.write_bytes(bytes(range(256)) * 64)
            frozen = time.monotonic()
        else:
            tasks = poll("its tasks", lambda: len(found := ranks(int(job))) == 2 and found)
            assert isinstance(tasks, dict)
            if name != "before-group":  # the step's own budget, not a first step's (hang.first_s)
                poll("the ranks training", lambda: step_of(run_dir) >= (40 if name == "every-rank" else 2))
            chosen = {"one-rank": [1], "rank-0": [0], "every-rank": [0, 1], "before-group": [1]}[name]
            for rank in chosen:
                os.kill(tasks[rank][0], signal.SIGSTOP)
            frozen = time.monotonic()
        error = run_dir / "error.txt"
        poll("error.txt", error.exists, timeout=600)
        named = time.monotonic() - frozen
        proc.wait(timeout=120)
        budget = GROUP_TIMEOUT_S if name in ("before-group", "store-file") else STEP_BUDGET_S
        return budget, named, error.read_text().strip()
    finally:
        if proc.poll() is None:
            proc.kill()


SCENARIOS = ["one-rank", "rank-0", "every-rank", "before-group", "store-file"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, default=SCENARIOS)
    args = parser.parse_args()
    from trainer.data.sample import ensure_sample_data

    folder = Path(tempfile.mkdtemp(prefix="bench-hangs-"))
    data = ensure_sample_data(folder / "data") / "pix2pix"
    seen: dict[str, list[float]] = {name: [] for name in args.only}
    budgets: dict[str, float] = {}
    for r in range(args.rounds):
        for name in args.only:
            budget, named, line = scenario(name, folder / f"{name}-{r}", data)
            seen[name].append(named)
            budgets[name] = budget
            print(f"round {r + 1} {name}: named after {named:.1f} s (budget {budget:g} s): {line[:110]}")
    print("| hang | budget (s) | named after (s), median | over the budget (s) | goal: budget + 15 s |")
    print("|---|---|---|---|---|")
    for name in args.only:
        named, budget = statistics.median(seen[name]), budgets[name]
        verdict = "met" if named <= budget + 15 else "MISSED"
        print(f"| {name} | {budget:g} | {named:.1f} | {named - budget:+.1f} | {verdict} |")
        print(f"ratio {name} named / budget: {named / budget:.3f}")


if __name__ == "__main__":
    main()

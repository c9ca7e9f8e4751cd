"""Benchmark 4: what a preemption costs, on the project's test cluster.

One training run (the mini profile, 2 nodes x 1 task, pix2pix) is preempted --preemptions times by an
exclusive job in the `urgent` partition, as a busy cluster would. While it runs, this script polls the
job's state every 0.1 s. It reports, per preemption:

- signal to job exit: from the moment rank 0 got the signal (attempts.json) to the job leaving RUNNING,
  split at the moment the checkpoint was on disk;
- start to first resumed step (the trainer's side of a restart: processes, torch import, process group,
  data, model, checkpoint load), against a fresh start's start to first step in the same run;
- steps recomputed (target 0: the trainer saves at the step it stops).

Slurm holds a requeued job for about 120 s before it is eligible again; like the tests, this script moves
its start time to now, so the time between leaving and running again is the cluster's, reported apart.
Usage: python benchmarks/preemption_cost.py [--preemptions N] [--steps N]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import StateLog, step_times  # noqa: E402

from tests.slurm import cluster  # noqa: E402
from trainer.run.rundir import RunDir  # noqa: E402


def attempts(run_dir: Path) -> list[dict]:
    path = RunDir(run_dir).attempts
    return json.loads(path.read_text()) if path.exists() else []


def training(run_dir: Path, attempt: int) -> bool:
    """Attempt `attempt` (0-based) has logged a step past the one it resumed from."""
    items, progress = attempts(run_dir), RunDir(run_dir).progress
    if len(items) <= attempt or not progress.exists():
        return False
    return json.loads(progress.read_text())["step"] > items[attempt]["resumed_step"]


def submit(folder: Path, data: Path, steps: int) -> tuple[Path, str]:
    runs = folder / "runs"
    profile = cluster.mini_profile(folder / "profile.yaml", runs)
    args = ["--profile", str(profile), "--nodes", "2", "--gpus-per-node", "1", f"data.root={data}"]
    args += [f"steps={steps}", "log.every=1", "log.image_every=0", f"checkpoint.every={steps}"]
    result = subprocess.run(
        [sys.executable, "-m", "jobs.submit", *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    run_dir = Path(next(line for line in result.stdout.splitlines() if line.startswith("run directory:")).split()[-1])
    return run_dir, json.loads(RunDir(run_dir).job.read_text())["job_id"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preemptions", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400, help="long enough to be preempted --preemptions times")
    args = parser.parse_args()
    cluster.up_for_benchmark()
    from trainer.data.sample import ensure_sample_data

    folder = Path(tempfile.mkdtemp(prefix="bench-preempt-"))
    data = ensure_sample_data(folder / "data") / "pix2pix"
    run_dir, job_id = submit(folder, data, args.steps)
    states = StateLog(job_id)
    try:
        for attempt in range(args.preemptions):
            cluster.wait_for(f"attempt {attempt} to train", lambda a=attempt: training(run_dir, a))
            cluster.preempt_normal_jobs()
            cluster.release_when_requeued(job_id)
        cluster.wait_for("the run to finish", lambda: RunDir(run_dir).finished(), timeout=600)
    finally:
        states.stop()
    report(run_dir, states)
    print("job states seen: " + ", ".join(f"{s} +{t - states.transitions[0][0]:.2f}s" for t, s in states.transitions))


def report(run_dir: Path, states: StateLog) -> None:
    summary = json.loads(RunDir(run_dir).summary.read_text())
    items, logged = attempts(run_dir), step_times(run_dir)
    fresh = logged[items[0]["resumed_step"] + 1] - states.first("RUNNING", after=0)
    print(f"run {run_dir}: {summary['restarts']} restart(s), world size {summary['world_size']}")
    print(f"fresh start: RUNNING to first step {fresh:.2f} s")
    exits, resumes, requeue_to_step = [], [], []
    for i, (stopped, resumed) in enumerate(zip(items[:-1], items[1:], strict=True)):
        stop = stopped["stop"]
        signal_time = stop.get("signal_time") or stop["time"]
        requeued = states.first_not(("RUNNING",), after=signal_time)
        # COMPLETING lasts until every task on every node has exited and Slurm has cleaned up.
        left = states.first_not(("RUNNING", "COMPLETING"), after=signal_time)
        running = states.first("RUNNING", after=left)
        first_step = logged[resumed["resumed_step"] + 1]
        exits.append(left - signal_time)
        resumes.append(first_step - running)
        requeue_to_step.append(first_step - requeued)
        print(
            f"preemption {i + 1} ({stop['reason']} at step {stop['step']}): signal to checkpoint on disk "
            f"{stop['time'] - signal_time:.2f} s, to requeued {requeued - signal_time:.2f} s, to job exited "
            f"{left - signal_time:.2f} s; pending until running again {running - left:.2f} s (the cluster); "
            f"RUNNING to first resumed step {first_step - running:.2f} s; requeued to first resumed step "
            f"{first_step - requeued:.2f} s"
        )
    if not resumes:
        raise SystemExit("the run was never preempted: give it more --steps")
    ratio = statistics.median(resumes) / fresh
    print(f"signal to job exit: median {statistics.median(exits):.2f} s over {len(exits)} preemption(s)")
    print(
        f"restart to first resumed step: median {statistics.median(resumes):.2f} s vs fresh start {fresh:.2f} s "
        f"-> ratio {ratio:.3f}"
    )
    print(f"requeued to first resumed step (exit, pending, start): median {statistics.median(requeue_to_step):.2f} s")
    recomputed = summary["steps_recomputed"]
    verdict = "meets" if recomputed == 0 else "MISSES"
    print(f"steps recomputed: {recomputed} ({verdict} target 0); time lost in all: {summary['time_lost_s']:.1f} s")


if __name__ == "__main__":
    main()

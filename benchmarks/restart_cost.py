"""Benchmark 14: a failed step's cost, restarted in the job's allocation against requeued, on the test cluster.

Two runs of the mini profile (2 nodes x 1 task, pix2pix), one after the other in this script: the first with
`restarts_in_job: 1`, the second with `requeue_on_failure: 1`. In each, rank 1 is killed (SIGKILL, as the OOM
killer or a lost node does) once it has trained past a checkpoint. Reported for each: from the kill to the
first resumed step, and the steps recomputed. The in-job restart runs srun again at once; the requeue leaves
the allocation, and the job is queued again. On this idle test cluster the requeued job is released as soon as
Slurm has requeued it (as the tests do), so its figure is the requeue's best case: on a busy cluster the queue
wait comes on top. With --as-slurm-holds-it nothing releases it: Slurm's own hold of a requeued job (its
begin time two minutes on, on any cluster) is what a user waits. The ratio is requeue / in-job.
Usage: python benchmarks/restart_cost.py [--steps N] [--rounds N] [--as-slurm-holds-it]
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.slurm import cluster  # noqa: E402
from trainer.run.rundir import RunDir  # noqa: E402

CHECKPOINT_EVERY = 20


def attempts(run_dir: Path) -> list[dict]:
    path = RunDir(run_dir).attempts
    return json.loads(path.read_text()) if path.exists() else []


def run_once(folder: Path, data: Path, extra: str, steps: int, release: bool = True) -> tuple[float, int]:
    """Submit, kill rank 1 past the first checkpoint, wait for the end: (kill to first resumed step, recomputed)."""
    folder.mkdir(parents=True)
    profile = cluster.mini_profile(folder / "profile.yaml", folder / "runs", extra)
    args = ["--profile", str(profile), "--nodes", "2", "--gpus-per-node", "1", f"data.root={data}", f"steps={steps}"]
    args += ["log.every=1", "log.image_every=0", f"checkpoint.every={CHECKPOINT_EVERY}"]
    result = subprocess.run(
        [sys.executable, "-m", "jobs.submit", *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    run_dir = Path(next(line for line in result.stdout.splitlines() if line.startswith("run directory:")).split()[-1])
    job_id = json.loads(RunDir(run_dir).job.read_text())["job_id"]
    checkpoint = RunDir(run_dir).checkpoints / f"step_{CHECKPOINT_EVERY:08d}.pt.sha256"
    cluster.wait_for("a checkpoint", checkpoint.exists, timeout=180)
    log = RunDir(run_dir).logs / f"{job_id}_1_log.out"
    pid = int(re.findall(r"^dist: .* pid=(\d+)", log.read_text(), re.M)[-1])
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    if "requeue_on_failure" in extra and release:
        cluster.release_when_requeued(job_id)
    cluster.wait_for("the run to finish", RunDir(run_dir).finished, timeout=900)
    return first_step_after(run_dir, killed) - killed, json.loads(RunDir(run_dir).summary.read_text())[
        "steps_recomputed"
    ]


def first_step_after(run_dir: Path, when: float) -> float:
    """The wall time of the first step logged after `when` (rank 0's TensorBoard events, log.every=1)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(RunDir(run_dir).tensorboard), size_guidance={"scalars": 0})
    events.Reload()
    return min(e.wall_time for e in events.Scalars("train/loss") if e.wall_time > when)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--as-slurm-holds-it", action="store_true", help="leave the requeued job to Slurm's hold")
    args = parser.parse_args()
    release = not args.as_slurm_holds_it
    cluster.up_for_benchmark()
    from trainer.data.sample import ensure_sample_data

    folder = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    data = ensure_sample_data(folder / "data") / "pix2pix"
    in_job, requeued = [], []
    for r in range(args.rounds):  # interleaved: the machine drifts
        for name, extra, into in (
            ("in-job", "restarts_in_job: 1\n", in_job),
            ("requeue", "requeue_on_failure: 1\n", requeued),
        ):
            seconds, recomputed = run_once(folder / f"{name}-{r}", data, extra, args.steps, release)
            into.append(seconds)
            print(f"round {r + 1} {name}: kill to first resumed step {seconds:.2f} s, steps recomputed {recomputed}")
    a, b = statistics.median(in_job), statistics.median(requeued)
    case = "Slurm's own hold" if args.as_slurm_holds_it else "best case: released at once, no queue wait"
    print(f"kill to first resumed step: in-job restart {a:.2f} s, requeue {b:.2f} s ({case})")
    print(f"ratio requeue / in-job: {b / a:.3f}; in-job / requeue: {a / b:.3f} (goal <= 0.2)")


if __name__ == "__main__":
    main()

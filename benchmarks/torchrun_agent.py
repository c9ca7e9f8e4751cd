"""Benchmark 19: our shape (one Slurm task per rank, trainer.supervise.slurm) against torch's elastic agent
(torchrun, one Slurm task per node, c10d rendezvous), on the test cluster, 2 nodes x 2 ranks, the same trainer.

Each run trains pix2pix on the sample data with a checkpoint every 20 steps; once checkpoint 20 is on disk,
rank 3 is killed (SIGKILL). Ours restarts the tasks in the allocation (`restarts_in_job: 1`); torchrun's agent
restarts its workers (`--max-restarts 1`): both resume from the checkpoint. Reported, per run:
- start: from the job's start (Slurm's StartTime, whole seconds) to the first step (rank 0's TensorBoard event);
- restart: from the kill to the first step after it;
- the final weights' hash (equal: the two shapes train the same run).
Usage: python benchmarks/torchrun_agent.py [--rounds N] [--steps N]
"""

import argparse
import datetime
import json
import os
import re
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

from tests.slurm import cluster  # noqa: E402
from trainer.run.rundir import RunDir  # noqa: E402

CHECKPOINT_EVERY = 20
PORT = 29561

TORCHRUN = """#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1 --cpus-per-task=2 -p normal -o {out} --time=10
export PYTHONPATH={root}
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)
# The first node's agent hosts the rendezvous store: told so, as torch's guess from the host name fails when
# the node names are aliases of this machine's loopback addresses (the test cluster's).
srun bash -c "exec {python} -m torch.distributed.run --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d \\
  --rdzv-endpoint $head:{port} --rdzv-id $SLURM_JOB_ID --rdzv-conf is_host=\\$((SLURM_NODEID == 0)) \\
  --max-restarts 1 -m trainer {args}"
"""


def train_args(data: Path, steps: int) -> list[str]:
    return [f"data.root={data}", f"steps={steps}", "batch_size=4", "log.every=1", "log.image_every=0",
            f"checkpoint.every={CHECKPOINT_EVERY}"]  # fmt: skip


def start_time(job_id: str) -> float:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True).stdout
    found = re.search(r"\bStartTime=(\S+)", out)
    assert found, out
    return datetime.datetime.fromisoformat(found.group(1)).timestamp()


def step_times(run_dir: Path) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(RunDir(run_dir).tensorboard), size_guidance={"scalars": 0})
    events.Reload()
    return sorted(e.wall_time for e in events.Scalars("train/loss"))


def kill_rank_3(find_pid: Callable[[], int | None]) -> float:
    pid = None
    deadline = time.monotonic() + 60
    while pid is None and time.monotonic() < deadline:
        pid = find_pid()
        time.sleep(0.1)
    assert pid, "rank 3's pid was not found"
    os.kill(pid, signal.SIGKILL)
    return time.time()


def measure(run_dir: Path, job_id: str, find_pid: Callable[[], int | None]) -> dict:
    checkpoint = RunDir(run_dir).checkpoints / f"step_{CHECKPOINT_EVERY:08d}.pt.sha256"
    cluster.wait_for("checkpoint 20", checkpoint.exists, timeout=300)
    started = start_time(job_id)
    killed = kill_rank_3(find_pid)
    ended = lambda: RunDir(run_dir).finished() or not cluster.squeue_state(job_id)  # noqa: E731
    cluster.wait_for("the run to end", ended, timeout=600)
    times = step_times(run_dir)
    after = [t for t in times if t > killed]
    if not RunDir(run_dir).finished():  # it did not come back from the kill: say why, as error.txt does
        error = RunDir(run_dir).error.read_text().strip() if RunDir(run_dir).error.exists() else "no error.txt"
        return {"start": times[0] - started, "restart": float("nan"), "weights": f"none (failed: {error[:160]})"}
    summary = json.loads(RunDir(run_dir).summary.read_text())
    return {"start": times[0] - started, "restart": min(after) - killed, "weights": summary["weights_sha256"][:12]}


def ours(folder: Path, data: Path, steps: int) -> dict:
    folder.mkdir(parents=True)
    profile = cluster.mini_profile(folder / "profile.yaml", folder / "runs", "restarts_in_job: 1\n")
    args = ["--profile", str(profile), "--nodes", "2", "--gpus-per-node", "2", *train_args(data, steps)]
    result = subprocess.run([sys.executable, "-m", "jobs.submit", *args], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    run_dir = Path(next(line for line in result.stdout.splitlines() if line.startswith("run directory:")).split()[-1])
    job_id = json.loads(RunDir(run_dir).job.read_text())["job_id"]
    log = RunDir(run_dir).logs / f"{job_id}_3_log.out"

    def pid() -> int | None:
        found = re.findall(r"^dist: .* pid=(\d+)", log.read_text(), re.M) if log.exists() else []
        return int(found[-1]) if found else None

    return measure(run_dir, job_id, pid)


def torchrun(folder: Path, data: Path, steps: int) -> dict:
    folder.mkdir(parents=True)
    run_dir, out = folder / "run", folder / "out.txt"
    script = folder / "job.sh"
    args = " ".join([*train_args(data, steps), f"run_dir={run_dir}"])
    script.write_text(TORCHRUN.format(out=out, root=ROOT, python=sys.executable, port=PORT, args=args))
    job_id = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True)
    job_id = job_id.stdout.strip()

    def pid() -> int | None:
        found = re.findall(r"^dist: .* rank=3 .* pid=(\d+)", out.read_text(), re.M) if out.exists() else []
        return int(found[-1]) if found else None

    return measure(run_dir, job_id, pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    cluster.up_for_benchmark()
    from trainer.data.sample import ensure_sample_data

    folder = Path(tempfile.mkdtemp(prefix="bench-torchrun-"))
    data = ensure_sample_data(folder / "data") / "pix2pix"
    seen: dict[str, list[dict]] = {"ours": [], "torchrun": []}
    for r in range(args.rounds):  # interleaved: the machine drifts
        for name, run in (("ours", ours), ("torchrun", torchrun)):
            result = run(folder / f"{name}-{r}", data, args.steps)
            seen[name].append(result)
            print(f"round {r + 1} {name}: start {result['start']:.2f} s, restart {result['restart']:.2f} s, "
                  f"weights {result['weights']}", flush=True)  # fmt: skip
    for key in ("start", "restart"):
        a = statistics.median(x[key] for x in seen["ours"])
        b = statistics.median(x[key] for x in seen["torchrun"])
        print(f"{key}: ours {a:.2f} s, torchrun {b:.2f} s; ratio ours / torchrun {a / b:.3f}")


if __name__ == "__main__":
    main()

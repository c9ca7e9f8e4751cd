"""Benchmark 12: what a resume reads from the checkpoint folder, 2 nodes x 8 tasks on the test cluster.

One run trains and checkpoints; it is then resumed twice with more steps, once with `checkpoint.broadcast=false`
(every rank reads the checkpoint) and once with the default (rank 0 reads it and sends it over the process
group). Each rank logs the checkpoint bytes it read; the sum is the job's reads of the shared filesystem.
Target: one checkpoint size per job, independent of the number of ranks.
Usage: python benchmarks/resume_scale.py [--nodes 2] [--tasks 8]
"""

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, step_times, submit, until_gone

sys.path.insert(0, str(ROOT))

from tests.slurm import cluster  # noqa: E402


def bytes_read(run_dir: Path, job_id: str, tasks: int) -> list[int]:
    out = []
    for rank in range(tasks):
        log = (run_dir / "logs" / f"{job_id}_{rank}_log.out").read_text()
        found = re.findall(r"checkpoint bytes read by this rank: (\d+)", log)
        out.append(int(found[-1]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--width", type=int, default=32, help="pix2pix.width: the checkpoint's size")
    args = parser.parse_args()
    cluster.up_for_benchmark()
    from trainer.data.sample import ensure_sample_data

    work = Path(tempfile.mkdtemp(prefix="resume_scale_"))
    try:
        data = ensure_sample_data(work / "sample") / "pix2pix"
        profile = cluster.mini_profile(work / "mini.yaml", work / "runs", "mem_gb: 0\n")
        layout = ["--nodes", str(args.nodes), "--gpus-per-node", str(args.tasks)]
        common = [
            f"data.root={data}",
            f"pix2pix.width={args.width}",
            "batch_size=1",
            "log.every=1",
            "log.image_every=0",
        ]
        tasks = args.nodes * args.tasks
        submit("--profile", str(profile), *layout, "--wait", "--name", "r", *common, "steps=2", "checkpoint.every=2")
        run_dir = work / "runs" / "r"
        size = max(p.stat().st_size for p in (run_dir / "checkpoints").glob("step_*.pt"))
        print(f"checkpoint: {size / 2**20:.2f} MiB; {tasks} ranks")
        results = {}
        for broadcast, steps in (("false", 3), ("true", 4)):
            start = time.time()
            resume = ["--resume", str(run_dir), f"steps={steps}", f"checkpoint.broadcast={broadcast}"]
            submit("--profile", str(profile), *layout, *resume)
            job_id = json.loads((run_dir / "job.json").read_text())["job_id"]
            states = until_gone(job_id, "the resumed job to end", 600)
            reads = bytes_read(run_dir, job_id, tasks)
            results[broadcast] = sum(reads)
            attempt = json.loads((run_dir / "attempts.json").read_text())[-1]
            running = states.first("RUNNING", after=start)
            marks = attempt["startup"]
            restored = marks["process_start"] + marks["checkpoint_restored"] - running
            first = step_times(run_dir)[attempt["resumed_step"] + 1] - running
            print(
                f"checkpoint.broadcast={broadcast}: {sum(reads) / 2**20:.2f} MiB read by the job "
                f"({sum(reads) / size:.1f} checkpoint sizes; ranks reading: {sum(1 for r in reads if r)} of {tasks}); "
                f"RUNNING to checkpoint restored {restored:.2f} s, to first resumed step {first:.2f} s "
                f"(rank 0, restore {marks['checkpoint_restored'] - marks['model_ready']:.2f} s of it)"
            )
        ratio = results["true"] / results["false"]
        verdict = "meets" if results["true"] <= 1.01 * size else "MISSES"  # later checkpoints differ by a few bytes
        print(f"reads with broadcast vs every rank reading: ratio {ratio:.3f} ({verdict} target: one checkpoint size)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

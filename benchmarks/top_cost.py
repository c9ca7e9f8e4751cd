"""Benchmark 20: what an open jobs.top costs the job it watches.

The main job's shape (local profile, 2 processes, pix2pix on the sample data), run with `--wait` alone and with
`python -m jobs.top RUN` open beside it from its first step to its end (its live view into a pipe: a table a
second; rank 0 then reads every rank's heartbeat from the store and writes live.json each second), in
interleaved rounds. The viewer runs at nice 19: on a cluster it runs on the login node or a laptop, not beside
the ranks, and on this 2-core machine its own CPU would otherwise be taken from them; its CPU time is printed. Each run's step time is the median of its logged perf/step_time_s (rank 0's TensorBoard
events), the first interval left out. Target: at most 1.01x. This machine's noise between runs of the same
code is a few per cent: read the median of the per-round ratios.
Usage: python benchmarks/top_cost.py [--rounds N] [--steps N]
"""

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from _common import ROOT, logged_step_time, paired_rounds, python, report


def step_time(folder: Path, watched: bool, steps: int) -> float:
    profile = folder / "local.yaml"
    profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {folder}/runs\n")
    cmd = [python(), "-m", "jobs.submit", "--profile", str(profile), "--wait", f"steps={steps}", "log.every=10"]
    cmd += ["log.image_every=0", "checkpoint.every=100000"]
    job = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    top = None
    if watched:
        while not (found := list(folder.glob("runs/*/progress.json"))) and job.poll() is None:
            time.sleep(0.1)  # the first logged step: the job trains
        if found:
            viewer = ["nice", "-n", "19", python(), "-m", "jobs.top", str(found[0].parent)]
            top = subprocess.Popen(viewer, cwd=ROOT, stdout=subprocess.PIPE)
            opened = time.monotonic()
    if job.wait() != 0:
        raise SystemExit(f"the job failed; see {folder}/runs")
    shown = 0
    if top is not None:
        ticks = sum(int(x) for x in Path(f"/proc/{top.pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13])
        cpu = ticks / os.sysconf("SC_CLK_TCK") / (time.monotonic() - opened)
        print(f"  jobs.top used {cpu:.1%} of a core while open", flush=True)
        top.kill()
        out, _ = top.communicate()
        shown = out.decode().count("\nrank ")
        live = json.loads(next(folder.glob("runs/*/live.json")).read_text())
        assert len(live["beats"]) == 2 and shown > 0, "jobs.top saw nothing: the benchmark measured nothing"
    return logged_step_time(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    measure = lambda folder, watched: step_time(folder, watched, args.steps)  # noqa: E731
    with_it, without, ratios = paired_rounds(args.rounds, measure, ("watched", "not"))
    ratio = statistics.median(ratios)
    report("step time with jobs.top open", statistics.median(with_it), statistics.median(without), "s", "<= 1.01",
           ratio <= 1.01)  # fmt: skip
    print(f"median of the per-round ratios: {ratio:.4f}")


if __name__ == "__main__":
    main()

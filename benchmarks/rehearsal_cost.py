"""The rehearsal's cost: `python -m jobs.rehearse` of the built-in task on the local profile (2 processes, a
restart in the allocation allowed), every fault; prints each fault's run against the reference run's wall time,
and the whole rehearsal's. Target (issue 53): every fault within 5 minutes on 2 CPU cores, 10 on the test
cluster. Usage: python benchmarks/rehearsal_cost.py [--steps N] [--faults a,b] [--profile P --nodes N
--gpus-per-node G] (a Slurm profile: the tests' cluster is `python -m tests.slurm.cluster up`)
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import report  # noqa: E402
from jobs.profiles import find_profile, read_yaml  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--faults", default="preempt,timeout,kill,kill-checkpoint,stop,frozen")
    parser.add_argument("--profile", help="a profile to copy (default: the local one, 2 processes)")
    parser.add_argument("--nodes", default="1")
    parser.add_argument("--gpus-per-node", default="2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        base = read_yaml(find_profile(args.profile), "profile") if args.profile else {"executor": "local"}
        profile = {**base, "restarts_in_job": 2, "run_root": f"{folder}/runs"}
        (folder / "p.yaml").write_text(yaml.safe_dump(profile))
        cmd = [sys.executable, "-m", "jobs.rehearse", "--profile", str(folder / "p.yaml"), "--faults", args.faults]
        cmd += ["--nodes", args.nodes, "--gpus-per-node", args.gpus_per_node, "--steps", str(args.steps)]
        cmd += [f"checkpoint.every={max(1, args.steps // 6)}"]
        done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
        found = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("certificate: ")]
        if not found:
            sys.exit(f"the rehearsal failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        record = json.loads((Path(found[0]).parent / "rehearsal.json").read_text())
    reference = record["reference"]["ledger"]["wall"]
    for fault in record["faults"]:
        wall = fault["ledger"].get("wall", float("nan"))
        # On Slurm a short run's time limit has a longer reference of its own (jobs.ops.rehearse.steps_for_limit).
        own = record.get(f"{fault['fault']}_reference", record["reference"])["ledger"].get("wall", float("nan"))
        print(f"{fault['fault']:<16} {fault['verdict']:<26} {wall:7.1f} s, {wall / own:.2f}x its reference's run")
    target = 300 if profile.get("executor") == "local" else 600
    report("the whole rehearsal", record["seconds"], reference, "s", f"{target} s", record["seconds"] <= target)


if __name__ == "__main__":
    main()

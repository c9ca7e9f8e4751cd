"""Benchmark 16: a submit over SSH from a laptop against the same submit on the login node, on the test cluster.

The laptop is a clone of this repository (its code snapshot: git ls-files, plus the project's packages); the
login node is the test harness's sshd (tests/slurm/sshd.py) in front of the two-node cluster, on this same
machine, so the network is loopback: what is measured is the protocol's cost (connections, the agent, the
snapshot's checksums and tar), not a WAN's. Interleaved rounds, each: (a) `jobs.submit` on the login node
(sbatch here, the profile without login); (b) over SSH with the login node's copy of the folder removed first
(every file sent); (c) over SSH again, unchanged (no file sent). Each job is cancelled once submitted.
Reported: median wall times, the ratios b/a and c/a, and the bytes each SSH submit sent.
Usage: python benchmarks/remote_submit.py [--rounds N]
"""

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.slurm import cluster, sshd  # noqa: E402


def submit(folder: Path, profile: str, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jobs.submit", "--profile", profile, "steps=1", "log.image_every=0"],
        cwd=folder, env=env, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the {profile} submit failed: {done.stderr.strip()}")
    took = time.perf_counter() - start
    job = re.search(r"^submitted job (\d+)", done.stdout, re.M)
    if job:
        subprocess.run(["scancel", job.group(1)], env=cluster.env(), check=False)
    return took, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cluster.up_for_benchmark()
    sshd.up()
    base = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    laptop = base / "laptop"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(laptop)], check=True)
    remote_root = base / "cluster-runs"
    mini = yaml.safe_load((ROOT / "cluster_profiles" / "mini.yaml").read_text()) | {"python": sys.executable}
    from trainer.data.sample import ensure_sample_data

    sample = ensure_sample_data(base / "data") / "pix2pix"
    mini["trainer"] = {**mini.get("trainer", {}), "data": {"root": str(sample)}}
    (laptop / "login.yaml").write_text(yaml.safe_dump(mini | {"run_root": str(remote_root)}))
    over = {"login": "root@127.0.0.1", "remote_root": str(remote_root), "ssh_options": sshd.ssh_options()}
    (laptop / "ssh.yaml").write_text(yaml.safe_dump(mini | over))
    here = {**cluster.env(), "PYTHONPATH": str(ROOT)}
    laptop_env = sshd.laptop_env(base) | {"PYTHONPATH": str(ROOT)}
    times: dict[str, list[float]] = {"login node": [], "ssh, first": [], "ssh, unchanged": []}
    sent: dict[str, list[str]] = {"ssh, first": [], "ssh, unchanged": []}
    for _ in range(args.rounds):
        times["login node"].append(submit(laptop, "login.yaml", here)[0])
        shutil.rmtree(remote_root / ".snapshots", ignore_errors=True)
        for kind in ("ssh, first", "ssh, unchanged"):
            took, out = submit(laptop, "ssh.yaml", laptop_env)
            times[kind].append(took)
            sent[kind].append(re.search(r"^sent (.+) to ", out, re.M).group(1))  # type: ignore[union-attr]
    a = statistics.median(times["login node"])
    print(f"| submit | median wall (s) | ratio to the login node's | sent ({args.rounds} rounds) |")
    print("|---|---|---|---|")
    for kind, values in times.items():
        m = statistics.median(values)
        print(f"| {kind} | {m:.2f} | {m / a:.2f} | {'; '.join(sorted(set(sent.get(kind, ['-']))))} |")
    unchanged = {s.split()[0] for s in sent["ssh, unchanged"]}
    print(f"an unchanged submit sends no file again: {'meets' if unchanged == {'0'} else 'MISSES'} ({unchanged})")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

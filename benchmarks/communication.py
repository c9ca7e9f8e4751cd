"""Benchmark 6: gradient all-reduce on the test cluster against the ring formula, and DDP's bucket settings.

For each layout (nodes x tasks per node: 1x1, 1x2, 2x1, 2x2) one Slurm job runs this script under srun
on the project's test cluster; each task reads its rank from Slurm's variables the way the trainer does
(trainer.supervise.launcher), joins a gloo group and measures, for the pix2pix U-Net's gradients:

- the all-reduce of all gradient bytes as one flat buffer, against the ring all-reduce time
  2(n-1)/n x bytes / bandwidth, with the loopback TCP bandwidth measured by this script in the same run;
- one DDP training step with each setting of dist.bucket_cap_mb, dist.gradient_as_bucket_view and
  dist.static_graph (wrapped by the trainer's own trainer.distributed.wrap), and the same step under
  no_sync() (no communication): the difference is the communication a step waits for.

Every node of the test cluster is this machine, so "the network" is loopback and the tasks share its cores.
Usage: python benchmarks/communication.py [--layouts 1x1,1x2,2x1,2x2] [--steps N] [--width W]
"""

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {
    "default (25 MB buckets)": {},
    "bucket_cap_mb=1": {"bucket_cap_mb": 1.0},
    "bucket_cap_mb=100": {"bucket_cap_mb": 100.0},
    "gradient_as_bucket_view": {"gradient_as_bucket_view": True},
    "static_graph": {"static_graph": True},
}


def loopback_bandwidth(total_mb: int = 1024, chunk_mb: int = 4) -> float:
    """Bytes per second through one TCP connection on 127.0.0.1 (a sender thread, a receiver thread)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    chunk = bytearray(chunk_mb << 20)
    total = total_mb << 20

    def receive() -> None:
        conn, _ = server.accept()
        view, got = memoryview(bytearray(chunk_mb << 20)), 0
        while got < total:
            got += conn.recv_into(view)
        conn.sendall(b"k")
        conn.close()

    receiver = threading.Thread(target=receive)
    receiver.start()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        for _ in range(total // len(chunk)):
            conn.sendall(chunk)
        conn.recv(1)  # the receiver has everything
        elapsed = time.perf_counter() - start
    receiver.join()
    server.close()
    return total / elapsed


def ring_seconds(nbytes: int, n: int, bandwidth: float) -> float:
    return 2 * (n - 1) / n * nbytes / bandwidth


def worker(steps: int, width: int, out: Path) -> None:
    """One task of the job: measure, and rank 0 writes the results."""
    import torch
    import torch.distributed as dist

    from trainer.config import DistConfig
    from trainer.distributed import wrap
    from trainer.supervise.launcher import resolve
    from trainer.tasks._pix2pix_nn import UNet

    env = resolve(os.environ)
    torch.set_num_threads(1)  # the tasks share this machine's cores
    device = torch.device("cpu")
    # A group even for one task (the trainer has none then), so that 1x1 measures an all-reduce too.
    dist.init_process_group(
        "gloo", init_method=f"tcp://{env.master_addr}:{env.master_port}", rank=env.rank, world_size=env.world_size
    )
    torch.manual_seed(0)
    variants = VARIANTS if env.distributed else {"one task: no DDP (as the trainer)": {}}
    # wrap() returns the bare model for one task, exactly what the trainer runs.
    models = {name: wrap(UNet(width, 3), env, device, DistConfig(**kw)) for name, kw in variants.items()}
    numel = sum(p.numel() for p in next(iter(models.values())).parameters())
    flat = torch.ones(numel)
    for _ in range(3):
        dist.all_reduce(flat)
    reduce_times, latency_times, tiny = [], [], torch.ones(1)
    for _ in range(steps):
        for tensor, record in ((flat, reduce_times), (tiny, latency_times)):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            record.append(time.perf_counter() - start)

    optimizers = {name: torch.optim.SGD(m.parameters(), lr=1e-3) for name, m in models.items()}
    batch = torch.randn(8, 3, 64, 64)

    def step(name: str, sync: bool) -> float:
        model = models[name]
        dist.barrier()
        start = time.perf_counter()
        with model.no_sync() if not sync and env.distributed else contextlib.nullcontext():
            loss = torch.nn.functional.l1_loss(model(batch), batch)
            optimizers[name].zero_grad(set_to_none=True)
            loss.backward()
        optimizers[name].step()
        return time.perf_counter() - start

    times: dict[str, list[float]] = {name: [] for name in [*variants, "no_sync"]}
    first = next(iter(variants))
    for round_ in range(steps + 2):  # variants interleaved: a slow moment of the machine hits all alike
        for name in variants:
            seconds = step(name, sync=True)
            if round_ >= 2:  # the first two rounds warm up
                times[name].append(seconds)
        seconds = step(first, sync=False)
        if round_ >= 2:
            times["no_sync"].append(seconds)
    if env.is_main:
        result = {
            "world_size": env.world_size,
            "nodes": env.num_nodes,
            "master": f"{env.master_addr}:{env.master_port}",
            "grad_bytes": numel * 4,
            "allreduce_s": statistics.median(reduce_times),
            "latency_s": statistics.median(latency_times),
            "step_s": {name: statistics.median(t) for name, t in times.items()},
        }
        out.write_text(json.dumps(result))
    dist.destroy_process_group()


def run_layout(nodes: int, tasks: int, steps: int, width: int, folder: Path) -> dict:
    """Queue one job of nodes x tasks on the test cluster's normal partition and wait for its result."""
    out = folder / f"{nodes}x{tasks}.json"
    log = folder / f"{nodes}x{tasks}.log"
    worker_cmd = f"{sys.executable} {Path(__file__).resolve()} --worker {out} --steps {steps} --width {width}"
    submitted = subprocess.run(
        [
            "sbatch", "--parsable", "-p", "normal", "-N", str(nodes), f"--ntasks-per-node={tasks}",
            "--cpus-per-task=1", "--time=10", "-o", str(log), "-J", "bench-comm",
            "--wrap", f"srun --kill-on-bad-exit=1 --cpus-per-task=1 {worker_cmd}",
        ],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout
        if not state.strip():
            break
        time.sleep(0.5)
    if not out.exists():
        tail = log.read_text()[-3000:] if log.exists() else "(no log)"
        raise SystemExit(f"job {job_id} ({nodes}x{tasks}) gave no result; its log ends:\n{tail}")
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", default="1x1,1x2,2x1,2x2", help="nodes x tasks per node, comma-separated")
    parser.add_argument("--steps", type=int, default=30, help="timed all-reduces and steps per variant")
    parser.add_argument("--width", type=int, default=16, help="U-Net base channels (the trainer's default is 16)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.width, args.worker)
        return

    from tests.slurm import cluster

    cluster.up_for_benchmark()
    bandwidth = loopback_bandwidth()
    print(f"loopback TCP bandwidth (one connection, measured now): {bandwidth / 1e9:.2f} GB/s")
    folder = Path(tempfile.mkdtemp(prefix="bench-comm-"))
    results = {}
    for layout in args.layouts.split(","):
        nodes, tasks = (int(x) for x in layout.split("x"))
        results[layout] = run_layout(nodes, tasks, args.steps, args.width, folder)
    print_results(results, bandwidth)


def print_results(results: dict[str, dict], bandwidth: float) -> None:
    print("\nall-reduce of all gradients as one buffer, against the ring formula 2(n-1)/n x bytes / bandwidth")
    print("(4-byte all-reduce: the latency the formula leaves out)")
    print(f"{'layout':7s} {'n':>2s} {'MiB':>6s} {'measured ms':>12s} {'ring ms':>8s} {'ratio':>7s} {'4-byte ms':>10s}")
    for layout, r in results.items():
        n, nbytes = r["world_size"], r["grad_bytes"]
        ring = ring_seconds(nbytes, n, bandwidth)
        ratio = f"{r['allreduce_s'] / ring:7.2f}" if ring else "    n/a"
        print(
            f"{layout:7s} {n:2d} {nbytes / 2**20:6.2f} {r['allreduce_s'] * 1e3:12.3f} {ring * 1e3:8.3f} {ratio} "
            f"{r['latency_s'] * 1e3:10.3f}"
        )
    print("\none DDP step (forward, backward, SGD step), median ms; communication waited for = step - no_sync step")
    for layout, r in results.items():
        compute = r["step_s"]["no_sync"]
        print(f"{layout} (n={r['world_size']}): no_sync {compute * 1e3:.1f} ms")
        for name, seconds in r["step_s"].items():
            if name != "no_sync":
                waited = seconds - compute
                print(
                    f"  {name:34s} {seconds * 1e3:8.1f} ms  comm {waited * 1e3:7.1f} ms  ratio {seconds / compute:.3f}"
                )


if __name__ == "__main__":
    main()

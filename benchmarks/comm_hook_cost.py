"""Benchmark 21: what log.stragglers' comm hook costs a DDP step, against DDP's own C++ all-reduce.

log.stragglers replaces DDP's built-in all-reduce with trainer.distributed's Python hook, each bucket timed (CUDA
events on a GPU, the host's clock on gloo). This prices the hook alone, where one GPU can: two DDP copies of the
pix2pix U-Net from one initial state, one plain, one with the hook and its CommTimer read every step (as the
trainer's meter reads it), trained on one fixed batch on the device (no loader: the hook is what is measured),
in alternating blocks of steps in the same processes, each block ending with the device synchronised. Prints the
median of the per-pair ratios (hooked / plain). Target: at most 1.01 (issue 38: log.stragglers may only be on by
default if it costs at most 1% of step time against plain DDP). One rank (one GPU) still all-reduces through
NCCL: DDP runs its reducer and the hook for a world of one.
Usage: python benchmarks/comm_hook_cost.py [--device cpu|cuda] [--nproc N] [--blocks N] [--block-steps N]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH, SIZE = 8, 64


def worker(out: Path, blocks: int, block_steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainer.distributed import CommTimer, _timed_allreduce
    from trainer.tasks._pix2pix_nn import UNet

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world))
    dist.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(0)
    first = UNet(16, 3)
    second = UNet(16, 3)
    second.load_state_dict(first.state_dict())
    ids = [device.index] if cuda else None
    plain = DDP(first.to(device), device_ids=ids)
    timer = CommTimer(device)
    hooked = DDP(second.to(device), device_ids=ids)
    hooked.register_comm_hook(timer, _timed_allreduce)
    generator = torch.Generator().manual_seed(rank)
    source, target = torch.rand(2, BATCH, 3, SIZE, SIZE, generator=generator).to(device)
    optimizers = {id(m): torch.optim.AdamW(m.parameters(), lr=2e-3, weight_decay=0.0) for m in (plain, hooked)}
    timed_s = [0.0]

    def block(model: torch.nn.Module, read_timer: bool) -> float:
        optimizer = optimizers[id(model)]
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(block_steps):
            loss = torch.nn.functional.l1_loss(model(source), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if read_timer:
                timed_s[0] += timer.take()
        if cuda:
            torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / block_steps

    pairs = []
    for index in range(blocks + 1):  # the first pair warms both up and is left out
        order = [(plain, False), (hooked, True)] if index % 2 == 0 else [(hooked, True), (plain, False)]
        times = {id(model): block(model, read) for model, read in order}
        if index:
            pairs.append((times[id(hooked)], times[id(plain)]))
    from trainer.checkpoint import weights_sha256

    same = weights_sha256(first.state_dict()) == weights_sha256(second.state_dict())
    dist.destroy_process_group()
    if rank == 0:
        result = {"pairs": pairs, "same_weights": same, "timed_s": timed_s[0]}
        result["device"] = f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})" if cuda else "cpu"
        (out / "result.json").write_text(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: NCCL, one process per GPU")
    parser.add_argument("--nproc", type=int, default=2, help="processes (on cuda, at most one per GPU)")
    parser.add_argument("--blocks", type=int, default=20, help="pairs of blocks, alternating which goes first")
    parser.add_argument("--block-steps", type=int, default=20, help="steps per block")
    parser.add_argument("--worker", metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker), args.blocks, args.block_steps)
        return
    # torchrun --standalone: its own rendezvous on a free port (a fixed one collides with a second run)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as folder:
        out = Path(folder)
        cmd += [__file__, "--worker", str(out), "--blocks", str(args.blocks), "--block-steps", str(args.block_steps)]
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode:
            sys.exit(
                f"{done.stdout[-3000:]}{done.stderr[-3000:]}\nthe benchmark's ranks failed (exit {done.returncode})"
            )
        result = json.loads((out / "result.json").read_text())
    hooked, plain = zip(*result["pairs"], strict=True)
    ratio = statistics.median(h / p for h, p in result["pairs"])
    backend = "gloo" if args.device == "cpu" else "nccl"
    print(f"{args.nproc} process(es), {backend} on {result['device']}, U-Net {SIZE}x{SIZE} batch {BATCH}")
    print(f"plain DDP:            {statistics.median(plain) * 1000:.3f} ms/step (median of {len(plain)} blocks)")
    print(f"DDP + the comm hook:  {statistics.median(hooked) * 1000:.3f} ms/step")
    verdict = "meets" if ratio <= 1.01 else "MISSES"
    print(f"median of the per-pair ratios {ratio:.4f} ({verdict} target <= 1.01)")
    print(
        f"all-reduce time the hook measured: {result['timed_s']:.3f} s in all; weights equal: {result['same_weights']}"
    )


if __name__ == "__main__":
    main()

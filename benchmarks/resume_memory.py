"""Benchmark: the memory a resume takes on each rank (issue 38, point 3), the checkpoint's bytes broadcast from
rank 0 (`checkpoint.broadcast=true`, the default) against every rank reading the file.

A pix2pix run of `--width` trains one step and saves; then `--nproc` processes (torchrun, gloo) each restore it
with the trainer's own functions (`trainer.checkpoint.broadcast_latest` and `load_latest`, what
`Checkpointer.restore` calls), and each reports what the restore added to its peak memory: host (the process's
peak resident set, `ru_maxrss`) and, with `--device cuda`, the GPU's (`torch.cuda.max_memory_allocated`; all
ranks share GPU 0 there: the bytes travel over gloo, so one GPU shows what each rank's GPU holds). Printed as
MiB and as multiples of the checkpoint file's size. Usage: python benchmarks/resume_memory.py [--width W]
[--nproc N] [--device cpu|cuda]
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("broadcast", "each_reads")


def make_checkpoint(out: Path, width: int) -> Path:
    """One step of a pix2pix run of this width, in this process, saved: its checkpoint folder."""
    from trainer.config import build_config
    from trainer.data.sample import ensure_sample_data
    from trainer.run.rundir import RunDir
    from trainer.supervise.launcher import resolve
    from trainer.train import train

    data = ensure_sample_data(out / "sample") / "pix2pix"
    settings = [f"run_dir={out / 'run'}", f"data.root={data}", "steps=1", "checkpoint.every=1", "log.image_every=0"]
    settings += [f"pix2pix.width={width}", "eval.every=0"]
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29790", "CUDA_VISIBLE_DEVICES": ""}
    train(build_config(settings), resolve(env))
    return RunDir(out / "run").checkpoints


def restore(mode: str, folder: Path, out: Path, cuda: bool) -> None:
    """One rank's restore, and what it added to this process's peaks (a torchrun worker)."""
    import torch
    import torch.distributed as dist

    from trainer.checkpoint import broadcast_latest, load_latest

    dist.init_process_group("gloo")
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats(device)
    gpu_before = torch.cuda.memory_allocated(device) if cuda else 0
    dist.barrier()
    host_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, the peak so far
    if mode == "broadcast":
        found = broadcast_latest(folder, device, print)
    else:
        found = load_latest(folder, device, print)
    assert found is not None, f"no checkpoint restored from {folder}"
    host_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    figures = {"host_mib": (host_peak - host_before) / 1024}
    if cuda:
        figures["gpu_mib"] = (torch.cuda.max_memory_allocated(device) - gpu_before) / 2**20
    (out / f"{mode}_{dist.get_rank()}.json").write_text(json.dumps(figures))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=64, help="the U-Net's base channels: the checkpoint's size")
    parser.add_argument("--nproc", type=int, default=2, help="ranks restoring")
    parser.add_argument("--rounds", type=int, default=3, help="restores of each mode, interleaved")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: the state restored to GPU 0")
    parser.add_argument("--worker", nargs=3, metavar=("MODE", "FOLDER", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        mode, folder, out = args.worker
        restore(mode, Path(folder), Path(out), args.device == "cuda")
        return
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="bench-resume-memory-") as tmp:
        out = Path(tmp)
        folder = make_checkpoint(out, args.width)
        size_mib = max(p.stat().st_size for p in folder.glob("*.pt")) / 2**20
        results: dict[str, list[list[dict[str, float]]]] = {mode: [[] for _ in range(args.nproc)] for mode in MODES}
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        for round_ in range(args.rounds):
            for mode in MODES if round_ % 2 == 0 else MODES[::-1]:
                cmd = [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc-per-node",
                    str(args.nproc),
                ]
                cmd += [__file__, "--device", args.device, "--worker", mode, str(folder), str(out)]
                subprocess.run(cmd, cwd=ROOT, check=True, env=env, stdout=subprocess.DEVNULL)
                for rank in range(args.nproc):
                    results[mode][rank].append(json.loads((out / f"{mode}_{rank}.json").read_text()))
    print(f"checkpoint: {size_mib:.1f} MiB (pix2pix width {args.width}); {args.nproc} ranks, {args.rounds} round(s)")
    for mode in MODES:
        for rank, rounds in enumerate(results[mode]):
            figures = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
            text = ", ".join(
                f"{k.split('_')[0]} +{v:.1f} MiB ({v / size_mib:.2f}x the file)" for k, v in figures.items()
            )
            print(f"{mode:>10}, rank {rank}: peak added by the restore (median of the rounds): {text}")


if __name__ == "__main__":
    main()

"""Benchmark 1: our trainer against a textbook DDP loop and PyTorch Lightning (2 processes, gloo, CPU; or NCCL on
GPUs with --device cuda, one process per GPU).

Same model (the pix2pix U-Net), data, batch size and seed. Prints the median step time of each after
warm-up (means over windows of 10 steps, every cost of a step included: ours' step time runs from one step's end to
the next's, its logging and the GPU work that the logging waits for included), the ratios, and whether our
final weights equal the textbook loop's. Targets: ours within 2% of the textbook loop, and less overhead
than Lightning. On a GPU each variant synchronises the device at the end of each window, as ours does when it
reads the loss. Usage: python benchmarks/trainer_overhead.py [--steps N] [--rounds N] [--skip-lightning]
[--ours KEY=VALUE ...] [--device cpu|cuda] [--nproc N] [--width W] [--image-size S]

A small --width and --image-size make the step launch-bound (dispatch-bound on CPU): the loop's own per-step
cost, which a GPU's short steps expose, then shows on a CPU too.
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
WINDOW = 10
SEED, BATCH, LR = 0, 8, 2e-3


def windows(step_ends: list[float], start: float) -> list[float]:
    """Mean step time over consecutive windows of WINDOW steps, from a list of step end times."""
    times = [b - a for a, b in zip([start, *step_ends[:-1]], step_ends, strict=True)]
    return [sum(times[i : i + WINDOW]) / WINDOW for i in range(0, len(times) - WINDOW + 1, WINDOW)]


def run_ours(steps: int, data: Path, out: Path, settings: list[str], shape: tuple[int, int]) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from trainer.config import build_config
    from trainer.run.rundir import RunDir
    from trainer.supervise.launcher import resolve
    from trainer.train import train

    config = build_config(
        [
            f"run_dir={out / 'ours'}",
            f"data.root={data}",
            f"steps={steps}",
            f"seed={SEED}",
            f"batch_size={BATCH}",
            f"optim.lr={LR}",
            f"log.every={WINDOW}",
            "log.image_every=0",
            f"checkpoint.every={steps}",
            f"pix2pix.width={shape[0]}",
            f"data.image_size={shape[1]}",
            *settings,
        ]
    )
    summary = train(config, resolve(os.environ))
    if summary is None:
        return {}
    events = EventAccumulator(str(RunDir(out / "ours").tensorboard))
    events.Reload()
    return {"windows": [e.value for e in events.Scalars("perf/step_time_s")], "sha": summary["weights_sha256"]}


def textbook_parts(data: Path, shape: tuple[int, int]):  # type: ignore[no-untyped-def]
    import torch

    from trainer.tasks._pix2pix_nn import PairsDataset, UNet
    from trainer.tasks.pix2pix import read_pairs

    torch.manual_seed(SEED)
    import numpy

    sources, targets = (numpy.array([p.encode() for p in side]) for side in read_pairs(data, "pairs.csv"))
    dataset = PairsDataset(str(data), sources, targets, shape[1])
    return dataset, UNet(shape[0], 3)


def loader_kw(cuda: bool) -> dict:
    """The loader ours builds by default: one worker per CPU of the process but one, at most 8 (none on this
    2-core machine with 2 processes; 8 on a 16-core GPU machine, where a loader without workers, decoding in
    the training process, was the textbook loop's bottleneck), pinned memory on a GPU."""
    workers = min(8, max(1, len(os.sched_getaffinity(0)) // int(os.environ["WORLD_SIZE"])) - 1)  # as the trainer
    more = {"prefetch_factor": 2, "persistent_workers": True} if workers > 0 else {}
    return {"num_workers": workers, "pin_memory": cuda, "drop_last": True, **more}


def run_textbook(steps: int, data: Path, out: Path, shape: tuple[int, int]) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from trainer.checkpoint import weights_sha256
    from trainer.tasks._pix2pix_nn import to_unit

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world))  # as the trainer does
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:  # one process trains the bare model, as ours does: DDP with one rank only adds its own cost
        dist.init_process_group("nccl" if cuda else "gloo")
    dataset, model = textbook_parts(data, shape)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=SEED)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler, **loader_kw(cuda))
    ddp = DDP(model.to(device), device_ids=[device.index] if cuda else None) if world > 1 else model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    ends, step, epoch, start = [], 0, 0, time.perf_counter()
    while step < steps:
        sampler.set_epoch(epoch)
        for pairs in loader:
            source, target = to_unit(pairs.to(device, non_blocking=True)).unbind(1)
            loss = torch.nn.functional.l1_loss(ddp(source).float(), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if cuda and step % WINDOW == 0:
                torch.cuda.synchronize(device)  # a window's time is the device's, not the queue's
            ends.append(time.perf_counter())
            if step == steps:
                break
        epoch += 1
    if world > 1:
        dist.destroy_process_group()
    return {"windows": windows(ends, start), "sha": weights_sha256(model.state_dict())} if rank == 0 else {}


def run_lightning(steps: int, data: Path, out: Path, shape: tuple[int, int]) -> dict:
    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    from trainer.tasks._pix2pix_nn import to_unit

    dataset, model = textbook_parts(data, shape)
    ends: list[float] = []

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
            source, target = to_unit(batch).unbind(1)
            return torch.nn.functional.l1_loss(self.net(source).float(), target)

        def configure_optimizers(self):  # type: ignore[no-untyped-def]
            return torch.optim.AdamW(self.parameters(), lr=LR, weight_decay=0.0)

    cuda = torch.cuda.is_available()

    class Clock(L.Callback):
        def on_train_batch_end(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            if cuda and (len(ends) + 1) % WINDOW == 0:
                torch.cuda.synchronize()
            ends.append(time.perf_counter())

    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(os.environ["WORLD_SIZE"])))
    trainer = L.Trainer(
        accelerator="gpu" if cuda else "cpu",
        devices=int(os.environ["WORLD_SIZE"]),
        strategy="ddp",
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Clock()],
        default_root_dir=str(out / "lightning"),
    )
    start = time.perf_counter()
    trainer.fit(Module(), DataLoader(dataset, batch_size=BATCH, shuffle=True, **loader_kw(cuda)))
    return {"windows": windows(ends, start)} if trainer.global_rank == 0 else {}


VARIANTS = {"textbook": run_textbook, "lightning": run_lightning}


def worker(variant: str, steps: int, data: Path, out: Path, settings: list[str], shape: tuple[int, int]) -> None:
    if variant == "ours":
        result = run_ours(steps, data, out, settings, shape)
    else:
        result = VARIANTS[variant](steps, data, out, shape)
    if result:
        (out / f"{variant}.json").write_text(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each variant, interleaved (machine noise)")
    parser.add_argument("--skip-lightning", action="store_true", help="when lightning is not installed")
    parser.add_argument(
        "--ours", action="append", default=[], metavar="KEY=VALUE", help="a trainer setting for ours (what it costs)"
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: NCCL, one process per GPU")
    parser.add_argument("--nproc", type=int, default=2, help="processes (on cuda, at most one per GPU)")
    parser.add_argument("--width", type=int, default=16, help="the U-Net's base channels (pix2pix.width)")
    parser.add_argument("--image-size", type=int, default=64, help="the images' side (data.image_size)")
    parser.add_argument("--worker", nargs=3, metavar=("VARIANT", "DATA", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        variant, data, out = args.worker
        worker(variant, args.steps, Path(data), Path(out), args.ours, (args.width, args.image_size))
        return
    sys.path.insert(0, str(ROOT))
    from trainer.data.sample import ensure_sample_data

    out = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    data = ensure_sample_data(out / "sample") / "pix2pix"
    variants = ["textbook", "ours"] + ([] if args.skip_lightning else ["lightning"])
    windows_of: dict[str, list[float]] = {v: [] for v in variants}
    per_round: dict[str, list[float]] = {v: [] for v in variants}
    hashes: dict[str, str] = {}
    port = 29611
    for round_ in range(args.rounds):
        for variant in variants if round_ % 2 == 0 else variants[::-1]:  # alternate the order: machine noise
            port += 1
            folder = out / f"{variant}{round_}"
            folder.mkdir()
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc)]
            cmd += ["--master-port", str(port)]
            cmd += [__file__, "--steps", str(args.steps), "--worker", variant, str(data), str(folder)]
            cmd += ["--width", str(args.width), "--image-size", str(args.image_size)]
            cmd += [f"--ours={setting}" for setting in args.ours]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            if args.device == "cpu":
                env["CUDA_VISIBLE_DEVICES"] = ""  # every variant on the CPU, a GPU or not
            with open(folder / "output.txt", "w") as output:
                done = subprocess.run(cmd, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, env=env)
            if done.returncode:
                tail = (folder / "output.txt").read_text().splitlines()[-30:]
                sys.exit(
                    "\n".join([*tail, f"the {variant} variant failed (exit {done.returncode}); its output is above"])
                )
            result = json.loads((folder / f"{variant}.json").read_text())
            windows_of[variant] += result["windows"][1:]  # the first window is warm-up
            per_round[variant].append(statistics.median(result["windows"][1:]))
            if "sha" in result:
                hashes[variant] = result["sha"]
    median = {v: statistics.median(w) for v, w in windows_of.items()}
    base, ours = median["textbook"], median["ours"]
    backend = "gloo" if args.device == "cpu" else f"nccl on {gpu_name()}"
    shape = f"{args.nproc} processes, {backend}, batch {BATCH}, U-Net width {args.width} at {args.image_size} px"
    print(f"{args.rounds} interleaved round(s) of {args.steps} steps per variant; {shape}")
    print(f"textbook DDP loop: {base * 1000:.2f} ms/step (median of {WINDOW}-step means after warm-up)")
    verdict = "meets" if ours / base <= 1.02 else "MISSES"
    print(f"our trainer:       {ours * 1000:.2f} ms/step -> ratio {ours / base:.3f} ({verdict} target <= 1.02)")
    if "lightning" in median:
        light = median["lightning"]
        verdict = "ours has less overhead" if ours < light else "ours has MORE overhead"
        print(f"Lightning:         {light * 1000:.2f} ms/step -> ratio {light / base:.3f} ({verdict})")
    # The machine's speed drifts; a round's variants ran back to back, so their ratio cancels most of it.
    for variant in variants[1:]:
        paired = statistics.median(o / b for o, b in zip(per_round[variant], per_round["textbook"], strict=True))
        print(f"{variant}: median of the per-round ratios to the textbook loop {paired:.3f}")
    same = hashes["ours"] == hashes["textbook"]
    print(f"weights after {args.steps} steps: ours {'==' if same else '!='} textbook loop")


def gpu_name() -> str:
    import torch

    return f"{torch.cuda.get_device_name(0)} (torch {torch.__version__})"


if __name__ == "__main__":
    main()

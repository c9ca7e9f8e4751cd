"""The training loop, top to bottom. Rank 0 alone writes logs, TensorBoard and checkpoints.

`train` reads as the loop: set up, resume, then one step after another, each component deciding for itself
whether this step is its turn (logging, images, evaluation, checkpoints, the requeue vote), then finish.
"""

import contextlib
import dataclasses
import json
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import trainer.config.tasks
from trainer import checkpoint, validation
from trainer.config import TrainConfig, config_dict, flat, write_config
from trainer.data.checks import count_bad_images
from trainer.data.loader import batches, make_loader, shutdown, to_device
from trainer.data.order import TrainOrder, files_digest
from trainer.distributed import (
    CommTimer,
    StopVote,
    beat_store,
    decide,
    dump_flight_recorder,
    gather_hosts,
    make_model,
    pick_devices,
    process_group,
    rendezvous_file,
    wrap,
)
from trainer.errors import UserError
from trainer.meter import IntervalMeter, Progress
from trainer.rng import deterministic_kernels, isolated, seed_micro_batch
from trainer.run import failures, ledger, provenance, startup
from trainer.run.atomic import write_text
from trainer.run.checkpoint_names import best_path
from trainer.run.rundir import RunDir
from trainer.schedule import lr_factor
from trainer.state import TrainState
from trainer.stragglers import Stragglers
from trainer.supervise import live
from trainer.supervise.attempts import Attempts, leave
from trainer.supervise.flag import StopFlag
from trainer.supervise.launcher import DistEnv
from trainer.supervise.signals import JobSettings
from trainer.supervise.watchdog import Watchdog
from trainer.tblog import NullLogger, TensorBoardLogger

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Each rank's host and GPU memory figures (jobs.top's row, read each second) are renewed at most this often: a
# short step's log interval can be tens of milliseconds, and torch.cuda.memory_allocated took 172 us on an H100.
# progress.json is written at every interval: where an attempt got to is what the ledger's recomputed work and
# a restarted attempt's record read.
SHARE_EVERY_S = 1.0


def train(
    config: TrainConfig,
    env: DistEnv,
    settings: JobSettings | None = None,
    stop_flag: StopFlag | None = None,
    cause: failures.Failure | None = None,
) -> dict[str, Any] | None:
    """Train to `config.steps`, resuming from the newest valid checkpoint. Rank 0 returns the summary.

    On the requeue signal every rank stops at the same step boundary, saves, and leaves for a requeue.
    `cause`: the previous attempt's first failure (rank 0's), for attempts.json.
    """
    settings = settings or JobSettings()
    stop_flag = stop_flag or StopFlag(settings.signal)
    device = pick_devices(env)[0]
    torch.set_num_threads(env.cpus_per_task)
    with contextlib.ExitStack() as cleanup:
        watchdog, top = join(config, env, device, cleanup)
        run = setup(config, env, device, watchdog)
        resume(run, cause)
        if run.step_samples is not None:
            cleanup.callback(run.step_samples.close)
        model, optimizer, state = run.model, run.optimizer, run.state
        for loader in (run.loader, run.val_loader):
            if loader is not None:
                cleanup.callback(shutdown, loader)  # their workers, on every way out
        data = batches(run.loader, run.order, lambda: (state.epoch, state.batch_in_epoch))
        cleanup.callback(data.close)
        meter = IntervalMeter(device, run.order.global_batch, per_rank=run.stragglers is not None)
        progress = Progress(config.steps, state.step, enabled=env.is_main)
        guard = Supervision(run, settings, stop_flag, top, progress)

        tick = run.started = time.perf_counter()
        first = state.step + 1
        while state.step < config.steps:
            loss, metrics, batch, fetching, loaded = accumulate(run, data, guard)
            if config.optim.grad_clip:
                run.scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.optim.grad_clip)
            run.scaler.step(optimizer)
            run.scaler.update()
            run.scheduler.step()
            if run.step_samples is not None:  # rank 0: which samples the step took, to compare runs by
                run.step_samples.write(step_line(run))
            state.advance()
            step = state.step
            tick = meter.add(loss, metrics, tick, fetching, loaded, run.comm_timer.take() if run.comm_timer else 0.0)
            if step == first and env.is_main:  # torch's environment report: started earlier, it slowed the start
                provenance.report_environment(Path(config.run_dir))

            # Every rank runs what follows at the same steps: the log's means, evaluation and saving are
            # collectives (the image grid alone is rank 0's).
            if step % config.log.every == 0 or step == config.steps:
                log_interval(run, meter, step, progress)
            log_images_if_due(run, step, batch)
            evaluate_if_due(run, step, progress)
            saved = run.checkpoints.save_if_due(state, config.steps)
            guard.after_step(step, saved)  # the stop vote: train on, save now, or save and leave
        guard.enter("finish")
        progress.close()
        run.checkpoints.wait()
        return finish(run)


def join(
    config: TrainConfig, env: DistEnv, device: torch.device, cleanup: contextlib.ExitStack
) -> tuple[Watchdog, live.Channel]:
    """This rank's watchdog and jobs.top's channel started, then the process group joined under the watchdog."""
    # Before the group forms: a rank frozen meanwhile is named by its heartbeat file, not blamed on rank 0.
    watchdog = start_watchdog(config, env)
    cleanup.callback(watchdog.stop)
    top = live.Channel(Path(config.run_dir), watchdog.beats_now, env.attempt_key, env.world_size)
    if env.is_main and watchdog.settings.enabled:  # jobs.top reads the heartbeats: none without the watchdog
        cleanup.callback(top.start().stop)
    watchdog.rendezvous_s = config.dist.timeout_s + 5.0
    if config.dist.init_method == "file" and env.distributed:
        store = rendezvous_file(env, Path(config.run_dir))
        watchdog.rendezvous_hint = f": its store file {store} may be stale or damaged; delete it"
    watchdog.enter("rendezvous")  # its beat written now: the supervisor sees it even if the join holds every thread
    group = process_group(env, config.dist.timeout_s, device, Path(config.run_dir), config.dist.init_method)
    with watchdog.blaming(config.dist.timeout_s):  # a rank absent or frozen is named, not this one's timeout
        cleanup.enter_context(group)
    watchdog.enter("startup")
    startup.mark("process_group_joined")
    if (store := beat_store(env, config.dist.init_method)) is not None:
        watchdog.use_store(store, env.first_node)  # off the shared filesystem from here on
    cleanup.enter_context(watchdog.blaming(config.dist.timeout_s))  # a collective timed out: on whom it waited
    return watchdog, top


def accumulate(run: "Run", data: Iterator[Any], guard: "Supervision") -> tuple[torch.Tensor, Any, Any, float, float]:
    """One step's forward and backward passes: over one micro-batch, or, on fewer processes than the run began
    on, over several, their gradients summed under DDP's no_sync but for the last (each step is the run's global
    batch). Each forward draws from generators seeded by its micro-batch's place in the step, so Dropout masks a
    sample alike on whichever process takes it. The step's loss and metrics (means over its micro-batches), its
    last micro-batch, and when it asked for its data and had it (the waits summed)."""
    parts, step, seed, streams = run.order.accumulation, run.state.step, run.config.seed, run.order.streams
    run.optimizer.zero_grad(set_to_none=True)
    losses: list[tuple[torch.Tensor, Any]] = []
    fetching = waited = 0.0
    for part in range(parts):
        guard.enter("data", step)  # the watchdog's view: where this rank is (no I/O)
        asked = time.perf_counter()
        fetching = fetching or asked
        batch = to_device(next(data), run.device)
        waited += time.perf_counter() - asked
        guard.enter("step")
        if streams:
            seed_micro_batch(seed, step, run.env.rank * parts + part, run.device)
        # One process has the bare model, no DDP: nothing to hold back.
        with run.ddp.no_sync() if part < parts - 1 and run.env.distributed else contextlib.nullcontext():
            with run.autocast:
                loss, metrics = run.task.forward(run.ddp, batch)
            run.scaler.scale(loss / parts if parts > 1 else loss).backward()
        losses.append((loss.detach(), metrics))
    if parts == 1:
        return loss, metrics, batch, fetching, fetching + waited
    mean = sum(loss for loss, _ in losses) / parts
    means = {k: sum(m[k].detach() for _, m in losses) / parts for k in losses[0][1]}
    return mean, means, batch, fetching, fetching + waited


def step_line(run: "Run") -> str:
    """step_samples.jsonl's line for the step being trained: its samples' digest and the processes it ran on."""
    state = run.state
    digest = run.order.digest(state.epoch, state.batch_in_epoch)
    return json.dumps({"step": state.step + 1, "digest": digest, "processes": run.env.world_size}) + "\n"


class Supervision:
    """The loop's supervision behind two hooks: `enter` (the watchdog's sections) and `after_step` (the stop
    vote, with jobs.top's save request).

    The hot path gains no work: `enter` is the watchdog's own bound method (a tuple assignment on purpose), and
    `after_step` costs the one call that replaces building `top.take_save` anew at every step.
    """

    def __init__(
        self, run: "Run", settings: JobSettings, stop_flag: StopFlag, top: live.Channel, progress: Progress
    ) -> None:
        self.run, self.settings, self.stop_flag, self.progress = run, settings, stop_flag, progress
        self.enter = run.watchdog.enter
        self.take_save = top.take_save
        self.vote = StopVote(run.env, run.device, run.config.dist.stop_check_every)

    def after_step(self, step: int, saved: bool) -> None:
        """The stop vote at `step`: train on, save now (jobs.top asked), or save and leave for a requeue."""
        # A collective, started every stop_check_every steps and read a step later: all ranks stop (or save) at
        # the same step. jobs.top's save request is taken when a vote starts.
        if step < self.run.config.steps:
            agreed = self.vote.at(step, self.stop_flag, self.take_save)
        else:  # trained: the vote under way is read on every rank and set aside
            agreed = self.vote.drain() and ""
        if agreed == "save" and not saved:  # asked for with jobs.top: a checkpoint now, and train on
            self.run.checkpoints.save(self.run.state)
            if self.run.env.is_main:
                print(f"saved at step {step}, as jobs.top asked", flush=True)
        if agreed == "stop":
            self.requeue(step, saved)

    def requeue(self, step: int, saved: bool) -> None:
        """Every rank saves at this same step and leaves: for a requeue, or out, as `decide` rules."""
        run, env = self.run, self.run.env
        run.watchdog.enter("requeue")
        self.vote.drain()  # one started at this very step (stop_check_every=1): every rank reads it
        if not saved:
            run.checkpoints.save(run.state)
        run.checkpoints.wait()  # the checkpoint is on disk before anyone leaves
        if run.attempts is not None:
            run.attempts.blocked_on_checkpoints(run.checkpoints.blocked_s)
        requeued = decide(env, run.attempts, self.settings, step, run.files.path, run.device, self.stop_flag.raised_at)
        self.progress.close()
        run.logger.close()
        raise leave(env, requeued)


def start_watchdog(config: TrainConfig, env: DistEnv) -> Watchdog:
    """This rank's hang detection (trainer/supervise/watchdog.py); not in the debug executor's process, where a pdb
    session is no hang."""
    hang = dataclasses.replace(config.hang, enabled=config.hang.enabled and not env.interactive)
    run_dir = Path(config.run_dir)
    dog = Watchdog(hang, run_dir, env.rank, env.node_name, env.world_size, attempt=env.attempt_key)
    if env.is_main and env.watch_beat:  # the supervisor watches it from outside: every rank may freeze at once
        dog.local_beat = Path(env.watch_beat)
    dog.on_hang = lambda: dump_flight_recorder(run_dir, env.rank)  # NCCL runs: before the rank exits
    return dog.start()


@dataclass
class Run:
    """What the loop works with, built by `setup`: the parts, and what the attempt has gathered so far."""

    config: TrainConfig
    env: DistEnv
    device: torch.device
    files: RunDir
    task: Any
    data: validation.Datasets
    loader: Any
    order: TrainOrder
    val_loader: Any
    model: torch.nn.Module
    ddp: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler
    autocast: Any
    state: TrainState
    attempts: Attempts | None  # rank 0's
    watchdog: Watchdog
    comm_timer: CommTimer | None  # the all-reduces' time, for the straggler figures
    stragglers: Stragglers | None
    warn: "Warnings"
    checkpoints: checkpoint.Checkpointer = field(init=False)
    logger: NullLogger = field(default_factory=NullLogger)
    step_samples: Any = None  # rank 0's open step_samples.jsonl (line-buffered)
    final: dict[str, Any] = field(default_factory=dict)  # the last step's train and validation values
    image_batch: Any = None  # fixed validation samples: the same images compared across steps
    eval_s: float = 0.0  # this attempt's time in evaluation, for summary.json: it must not dominate
    started: float = 0.0  # when this attempt's first step began
    shared_at: float = -math.inf  # when the resource figures were last renewed (SHARE_EVERY_S)
    resources: dict[str, float] = field(default_factory=dict)  # this rank's memory figures, as of shared_at


@dataclass
class Warnings:
    """Rank 0's warnings: printed to the output --wait follows, and kept in attempts.json."""

    is_main: bool
    said: list[str] = field(default_factory=list)

    def __call__(self, message: str) -> None:
        if self.is_main:
            self.said.append(message)
            print(f"warning: {message}", flush=True)


def setup(config: TrainConfig, env: DistEnv, device: torch.device, watchdog: Watchdog) -> Run:
    """Data, model, optimizer and state, the same on every rank: seeded, so the initial weights agree."""
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    if config.deterministic:
        deterministic_kernels()
    task = trainer.config.tasks.get(config.task)
    data = validation.datasets(task, config)
    startup.mark("datasets_built")  # the task's decoding imported (torchvision, and with it torch._dynamo)
    loader, order = make_loader(data.train, config, env, device, task)
    val_loader = validation.shard_loader(data.val, config, env, device, task) if data.val else None
    startup.mark("data_ready")
    model = make_model(task, config, data.full, pick_devices(env))
    timer = CommTimer(device) if config.log.stragglers and env.distributed else None
    ddp = wrap(model, env, device, config.dist, timer)
    startup.mark("model_ready")
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, config.steps, config.optim))
    scaler = torch.amp.GradScaler(device.type, enabled=config.amp == "fp16")
    autocast = torch.autocast(device.type, dtype=AMP_DTYPES.get(config.amp), enabled=config.amp != "off")
    state = TrainState(
        model, optimizer, scheduler, scaler, env, device, order, files_digest(data.train), config.data.allow_change
    )  # type: ignore[arg-type]
    state.meta = {"task": config.task, "config": config_dict(config), "classes": getattr(data.full, "classes", [])}
    files = RunDir(Path(config.run_dir))
    run = Run(
        config, env, device, files, task, data, loader, order, val_loader,
        model, ddp, optimizer, scheduler, scaler, autocast, state,
        attempts=Attempts(files.path) if env.is_main else None,
        watchdog=watchdog,
        comm_timer=timer,
        stragglers=Stragglers(gather_hosts(env), config.log.straggler_ratio, config.log.straggler_intervals)
        if timer is not None
        else None,
        warn=Warnings(env.is_main),
    )  # fmt: skip
    # Not a bound method of run: a cycle through it would leave the loader's workers to the garbage collector,
    # whose order of finalizers made their shutdown wait out DataLoader's 5 s timeout at every run's end.
    run.checkpoints = checkpoint.Checkpointer(
        files.checkpoints, config.checkpoint, env.is_main, run.warn, watchdog.section
    )
    return run


def resume(run: Run, cause: failures.Failure | None = None) -> None:
    """The newest valid checkpoint into the state (none: step 0), and this attempt recorded."""
    env, state = run.env, run.state
    resumed_from = run.checkpoints.restore(state)
    startup.mark("checkpoint_restored")
    if (order := run.order).steps_per_epoch == 0:  # the global batch is the checkpoint's, once restored
        raise UserError(
            f"{order.samples} samples give no full global batch of {order.global_batch} "
            f"({order.global_batch // env.world_size} on each of {env.world_size} processes); lower batch_size or add data"
        )
    if resumed_from is not None:  # every rank, in its own log: what resuming cost the shared filesystem
        print(f"checkpoint bytes read by this rank: {checkpoint.BYTES_READ[0]}", flush=True)
    if resumed_from is not None and env.is_main:
        print(f"resumed from {resumed_from} at step {state.step}", flush=True)
    elif resumed_from is None and run.attempts is not None and run.attempts.items:
        run.warn(
            f"an earlier attempt ran, but {run.checkpoints.folder} holds no usable checkpoint: starting from step 0"
        )
    if state.data_change:
        run.warn(state.data_change)
    if not env.is_main or run.attempts is None:
        return
    # Only now: a --resume whose new settings failed left the old one. data.allow_change holds for one resume.
    write_config(
        run.files.path, dataclasses.replace(run.config, data=dataclasses.replace(run.config.data, allow_change=False))
    )
    run.step_samples = open_step_samples(run.files.step_samples, state.step)
    run.logger = TensorBoardLogger(run.files.tensorboard)
    live = state.step < run.config.steps  # else a finished summary.json stays as it is (a requeue after the end)
    cost = run.attempts.start(state.step, env.restart_count, run.warn.said, startup.seconds(), env, cause, live)
    if len(run.attempts.items) > 1:
        restarts = {f"restarts/{k}": v for k, v in run.attempts.totals().items()}
        run.logger.scalars(restarts | {"restarts/last_time_lost_s": cost["time_lost_s"]}, state.step)
        log_ledger(run, state.step)  # where the time went up to this attempt's first step


def open_step_samples(path: Path, step: int) -> Any:
    """step_samples.jsonl for appending, without the steps after `step` an earlier attempt trained and lost."""
    with contextlib.suppress(OSError):
        kept = [line for line in path.read_text().splitlines(keepends=True) if kept_line(line, step)]
        write_text(path, "".join(kept), durable=False)
    # Closed with the run (train's cleanup); line-buffered: each step's line is in the file as it ends.
    return open(path, "a", buffering=1)  # noqa: SIM115


def kept_line(line: str, step: int) -> bool:
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return int(json.loads(line)["step"]) <= step
    return False


def log_ledger(run: Run, step: int, end: float | None = None) -> dict[str, float] | None:
    """Rank 0: the run's goodput ledger up to `end` (now), as goodput/* scalars (trainer.run.ledger)."""
    assert run.attempts is not None
    parts = ledger.of_run(run.files.path, run.attempts.items, end or time.time(), run.env.world_size)
    if parts is not None:
        run.logger.scalars({f"goodput/{k}": v for k, v in parts.items()}, step)
    return parts


def log_interval(run: Run, meter: IntervalMeter, step: int, progress: Progress) -> None:
    """The interval's means to TensorBoard, progress.json and the progress line; a non-finite loss warned of
    or stopped at (the same on every rank: the means are)."""
    config, state, first, names = run.config, run.state, step - meter.steps + 1, list(meter.metrics)
    means = meter.means(run.env)
    now = time.monotonic()
    if step == config.steps or now - run.shared_at >= SHARE_EVERY_S:  # each rank by its own clock
        run.shared_at, run.resources = now, resource_figures(run.device)
    run.watchdog.stats = meter.own | run.resources  # jobs.top's row of this rank
    values = {k: v for k, v in means.items() if k.startswith("train/")} | {
        "train/lr": run.scheduler.get_last_lr()[0],
        "train/epoch": state.epoch + state.batch_in_epoch / run.order.steps_per_epoch,
    }
    values |= {k: v for k, v in means.items() if not k.startswith("train/")}  # perf/*, after: as the line read
    run.logger.scalars(values, step)
    if run.stragglers is not None and run.env.is_main:
        scalars, warnings = run.stragglers.observe(step, meter.per_rank)
        run.logger.scalars(scalars, step)
        for warning in warnings:
            run.warn(warning)
    if not math.isfinite(loss := values["train/loss"]):
        what = f"the training loss was {loss} over steps {first}-{step}"
        if config.log.nonfinite == "stop":
            raise UserError(f"{what}; lower optim.lr or set optim.grad_clip (log.nonfinite=warn trains on)")
        run.warn(f"{what} (log.nonfinite=stop ends the run on it)")
    if run.env.is_main:  # for jobs.status
        reached = {"step": step, "time": time.time(), "val": state.last_val, "checkpoint_s": run.checkpoints.blocked_s}
        write_text(run.files.progress, json.dumps(reached), durable=False)  # on the step's path: no fsync
        if run.attempts is not None and (parts := run.attempts.summarise_every(step, run.checkpoints.blocked_s)):
            run.logger.scalars({f"goodput/{k}": v for k, v in parts.items()}, step)  # the ledger, once a minute
    progress.update(step, values)
    if step == config.steps:  # the summary's train values: this last interval's means
        run.final |= {"loss": finite(loss), "metrics": {k: finite(values[f"train/{k}"]) for k in names}}


def resource_figures(device: torch.device) -> dict[str, float]:
    """This rank's host memory, and its GPU's memory and utilisation where it has one (what torch can tell)."""
    figures = {"host_mem_mb": live.host_memory_mb()}
    if device.type == "cuda":
        figures["gpu_mem_mb"] = torch.cuda.memory_allocated(device) / 2**20
        with contextlib.suppress(Exception):  # torch asks NVML, which may be missing
            figures["gpu_util"] = float(torch.cuda.utilization(device))
    return figures


def log_images_if_due(run: Run, step: int, batch: Any) -> None:
    """Rank 0's image grid (inputs, targets, outputs) of fixed validation samples, else of this batch."""
    every = run.config.log.image_every
    if not every or not run.env.is_main or (step % every and step != run.config.steps):
        return
    with isolated(run.config.seed):  # what logging draws is not the task's stream to give
        if run.val_loader is not None and run.image_batch is None:
            run.image_batch = to_device(next(iter(run.val_loader)), run.device)
        grid = run.task.images(run.model, run.image_batch if run.image_batch is not None else batch)
    if grid is not None:
        run.logger.image("images/input_target_output", grid, step)


def evaluate_if_due(run: Run, step: int, progress: Progress) -> None:
    """A collective: every rank evaluates its shard at the same steps; the best weights kept apart."""
    config = run.config
    if run.val_loader is None or not (step == config.steps or (config.eval.every and step % config.eval.every == 0)):
        return
    evaluating = time.perf_counter()
    # Evaluation draws from streams of its own, the same each time; its budget is its own.
    with isolated(config.seed), run.watchdog.section("eval"):
        val = validation.evaluate(run.model, run.val_loader, run.task, run.env, run.device, run.autocast)
    run.eval_s += time.perf_counter() - evaluating
    run.logger.scalars({f"val/{k}": v for k, v in val.items()}, step)
    progress.line(f"validation at step {step}: " + " ".join(f"{k}={v:.4g}" for k, v in val.items()))
    run.state.last_val = val
    if validation.improves(run.state, val, config) and run.env.is_main:
        checkpoint.save_best(run.files.checkpoints, run.model.state_dict(), run.state.best_meta())
    if step == config.steps:
        run.final["val"] = {k: finite(v) for k, v in val.items()}


def finish(run: Run) -> dict[str, Any] | None:
    """Rank 0: the attempt recorded as finished, summary.json, the hyperparameters with their results."""
    if not run.env.is_main or run.attempts is None:
        return None
    config, state, files = run.config, run.state, run.files
    run.attempts.blocked_on_checkpoints(run.checkpoints.blocked_s)
    run.attempts.stop("finished", state.step)  # a later --resume must not count this attempt as a failure
    parts = log_ledger(run, state.step, end=run.attempts.items[-1]["stop"]["time"])
    final_loss, final_metrics, final_val = run.final.get("loss"), run.final.get("metrics", {}), run.final.get("val")
    summary = (
        {
            "finished": True,  # summary.json as the run went said false (RunDir.finished)
            "task": config.task,
            "final_step": state.step,
            "final_loss": final_loss,  # None when this attempt had no step left to train
            "final_metrics": final_metrics,
            "val_metrics": final_val,  # of the final weights, on the whole validation set; null: none
            "eval_share": round(run.eval_s / (time.perf_counter() - run.started), 4),  # of the last attempt
            "best": state.best and {**state.best, "path": str(best_path(files.checkpoints))},
            "world_size": run.env.world_size,
            "torch_threads": torch.get_num_threads(),  # the hash below is reproducible for this count
            # From the first attempt's start when the run was requeued: the time a user waited.
            "wall_time_s": round(run.attempts.wall_time_s(), 3),
            "weights_sha256": checkpoint.weights_sha256(run.model.state_dict()),
            "bad_images_skipped": count_bad_images(files.bad_images),  # data.bad_images=skip
            "stragglers": run.stragglers.named if run.stragglers else [],  # ranks named slow (log.straggler_ratio)
        }
        | run.attempts.totals()
        | {"ledger": parts}
    )
    hparams = {k: v for k, v in flat(config_dict(config)).items() if k != "run_dir"}
    finals = {"final_loss": final_loss, **final_metrics, **{f"val_{k}": v for k, v in (final_val or {}).items()}}
    run.logger.hparams(hparams, {k: v for k, v in finals.items() if v is not None})
    run.logger.close()
    write_text(files.summary, json.dumps(summary, indent=2, allow_nan=False) + "\n")
    loss_text = f"{final_loss:.4f}" if final_loss is not None else "-"
    print(f"done: step {state.step}, final loss {loss_text}, summary in {files.summary}", flush=True)
    return summary


def finite(value: float) -> float | None:
    """None for NaN and infinities: summary.json stays valid JSON."""
    return value if math.isfinite(value) else None

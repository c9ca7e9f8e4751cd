"""The training loop, top to bottom. Rank 0 alone writes logs, TensorBoard and checkpoints."""

import contextlib
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch

import trainer.tasks
from trainer import checkpoint, startup, validation
from trainer.atomic import write_text
from trainer.checkpoint_names import best_path
from trainer.config import JobSettings, TrainConfig, config_dict
from trainer.data import close, make_loader, num_workers, to_device
from trainer.distenv import DistEnv
from trainer.distributed import mean_over_ranks, pick_device, process_group, wrap
from trainer.errors import UserError
from trainer.images import count_bad_images
from trainer.preemption import Attempts, decide, leave, stop_agreed
from trainer.rng import isolated
from trainer.rundir import RunDir
from trainer.runs import write_config
from trainer.schedule import lr_factor
from trainer.state import TrainState
from trainer.stopflag import StopFlag
from trainer.tblog import NullLogger, TensorBoardLogger

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Progress:
    """A live line on a terminal, plain periodic lines in batch logs: step, elapsed time, ETA, values."""

    def __init__(self, total: int, first_step: int, enabled: bool) -> None:
        self.total, self.enabled, self.tty = total, enabled, sys.stdout.isatty()
        self.first_step, self.started = first_step, time.monotonic()  # this attempt's: the ETA is its pace

    def update(self, step: int, values: dict[str, float]) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        eta = elapsed / max(1, step - self.first_step) * (self.total - step)
        head = f"step {step}/{self.total} elapsed {clock(elapsed)} eta {clock(eta)} "
        text = head + " ".join(f"{k.split('/')[-1]}={v:.4g}" for k, v in values.items())
        print(("\r" + text) if self.tty else text, end="" if self.tty else "\n", flush=True)

    def line(self, text: str) -> None:
        if self.enabled:
            print(("\n" + text) if self.tty else text, flush=True)

    def close(self) -> None:
        if self.enabled and self.tty:
            print(flush=True)


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


def train(
    config: TrainConfig, env: DistEnv, settings: JobSettings | None = None, stop_flag: StopFlag | None = None
) -> dict[str, Any] | None:
    """Train to `config.steps`, resuming from the newest valid checkpoint. Rank 0 returns the summary.

    On the requeue signal every rank stops at the same step boundary, saves, and leaves for a requeue.
    """
    settings = settings or JobSettings()
    stop_flag = stop_flag or StopFlag(settings.signal)
    run_dir = Path(config.run_dir)
    files = RunDir(run_dir)
    device = pick_device(env)
    torch.set_num_threads(env.cpus_per_task)
    with process_group(env, config.dist.timeout_s, device), contextlib.ExitStack() as cleanup:
        startup.mark("process_group_joined")
        random.seed(config.seed)
        torch.manual_seed(config.seed)  # the same initial weights on every rank
        task = trainer.tasks.get(config.task)
        data = validation.datasets(task, config)
        dataset = data.train
        loader, sampler = make_loader(dataset, config, env, device)
        cleanup.callback(close, loader)  # its workers, on every way out
        val_loader = validation.shard_loader(data.val, config, env, num_workers(config, env)) if data.val else None
        batches_per_epoch = len(sampler) // config.batch_size
        if batches_per_epoch == 0:
            raise UserError(
                f"{len(dataset)} samples give no full batch of {config.batch_size} on each of {env.world_size} "
                f"processes; lower batch_size or add data"
            )
        startup.mark("data_ready")
        model = task.model(config, data.full).to(device)
        ddp = wrap(model, env, device, config.dist)
        startup.mark("model_ready")
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, config.steps, config.optim))
        scaler = torch.amp.GradScaler(device.type, enabled=config.amp == "fp16")
        autocast = torch.autocast(device.type, dtype=AMP_DTYPES.get(config.amp), enabled=config.amp != "off")

        # Rank 0's warnings: printed to the output --wait follows, and kept in attempts.json.
        warned: list[str] = []

        def warn(message: str) -> None:
            if env.is_main:
                warned.append(message)
                print(f"warning: {message}", flush=True)

        state = TrainState(model, optimizer, scheduler, scaler, env, device)
        state.meta = {"task": config.task, "config": config_dict(config), "classes": getattr(data.full, "classes", [])}
        checkpoints = checkpoint.Checkpointer(files.checkpoints, config.checkpoint, env.is_main, warn)
        attempts = Attempts(run_dir) if env.is_main else None
        resumed_from = checkpoints.restore(state)
        startup.mark("checkpoint_restored")
        if resumed_from is not None:  # every rank, in its own log: what resuming cost the shared filesystem
            print(f"checkpoint bytes read by this rank: {checkpoint.BYTES_READ[0]}", flush=True)
        if resumed_from is not None and env.is_main:
            print(f"resumed from {resumed_from} at step {state.step}", flush=True)
        elif resumed_from is None and attempts is not None and attempts.items:
            warn(f"an earlier attempt ran, but {checkpoints.folder} holds no usable checkpoint: starting from step 0")
        if env.is_main:  # only now: a --resume whose new settings fail before this point leaves config.yaml as it was
            write_config(run_dir, config)

        logger = TensorBoardLogger(files.tensorboard) if env.is_main else NullLogger()
        if attempts is not None:
            cost = attempts.start(state.step, env.restart_count, warned, startup.seconds(), env)
            if len(attempts.items) > 1:
                totals = attempts.totals()
                logger.scalars(
                    {f"restarts/{k}": v for k, v in totals.items()}
                    | {"restarts/last_time_lost_s": cost["time_lost_s"]},
                    state.step,
                )
        progress = Progress(config.steps, state.step, enabled=env.is_main)
        interval_loss, interval_metrics, interval_steps = torch.zeros((), device=device), {}, 0
        step_time = data_time = 0.0
        final_loss: float | None = None  # stays None when this attempt had no step left to train
        final_metrics: dict[str, float | None] = {}
        final_val: dict[str, float | None] | None = None  # the last step's validation metrics
        image_batch = None  # fixed validation samples: the same images compared across steps
        eval_time = 0.0  # this attempt's, for summary.json: evaluation must not dominate
        attempt_start = time.perf_counter()

        while state.step < config.steps:
            sampler.set_epoch(state.epoch)
            sampler.start = state.batch_in_epoch * config.batch_size
            tick = time.perf_counter()
            for batch in loader:
                batch = to_device(batch, device)
                loaded = time.perf_counter()
                with autocast:
                    loss, metrics = task.forward(ddp, batch)
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                if config.optim.grad_clip:
                    scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.optim.grad_clip)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                state.advance(batches_per_epoch)
                step = state.step

                done = time.perf_counter()
                data_time += loaded - tick
                step_time += done - tick
                interval_loss += loss.detach()
                for name, value in metrics.items():
                    interval_metrics[name] = interval_metrics.get(name, 0.0) + value.detach()
                interval_steps += 1
                tick = done

                # Every rank runs this block at the same steps: mean_over_ranks is a collective.
                if step % config.log.every == 0 or step == config.steps:
                    values = {"train/loss": mean_over_ranks(interval_loss / interval_steps, env)}
                    values |= {
                        f"train/{k}": mean_over_ranks(v / interval_steps, env) for k, v in interval_metrics.items()
                    }
                    values |= {
                        "train/lr": scheduler.get_last_lr()[0],
                        "train/epoch": state.epoch + state.batch_in_epoch / batches_per_epoch,
                        "perf/samples_per_s": interval_steps * config.batch_size * env.world_size / step_time,
                        "perf/step_time_s": step_time / interval_steps,
                        "perf/data_wait_s": data_time / interval_steps,
                    }
                    logger.scalars(values, step)
                    if not math.isfinite(loss_mean := values["train/loss"]):  # the same on every rank
                        what = f"the training loss was {loss_mean} over steps {step - interval_steps + 1}-{step}"
                        if config.log.nonfinite == "stop":
                            raise UserError(
                                f"{what}; lower optim.lr or set optim.grad_clip (log.nonfinite=warn trains on)"
                            )
                        warn(f"{what} (log.nonfinite=stop ends the run on it)")
                    if env.is_main:  # for jobs.status
                        write_text(
                            files.progress, json.dumps({"step": step, "time": time.time(), "val": state.last_val})
                        )
                    progress.update(step, values)
                    if step == config.steps:  # the summary's train metrics: this last interval's means
                        final_loss = finite(values["train/loss"])
                        final_metrics = {k[6:]: finite(v) for k, v in values.items() if is_task_metric(k, metrics)}
                    interval_loss.zero_()
                    interval_metrics, interval_steps, step_time, data_time = {}, 0, 0.0, 0.0
                if config.log.image_every and (step % config.log.image_every == 0 or step == config.steps):
                    with isolated(config.seed):  # what logging draws is not the task's stream to give
                        if env.is_main and val_loader is not None and image_batch is None:
                            image_batch = to_device(next(iter(val_loader)), device)
                        grid = (
                            task.images(model, image_batch if image_batch is not None else batch)
                            if env.is_main
                            else None
                        )
                    if grid is not None:
                        logger.image("images/input_target_output", grid, step)
                # A collective: every rank evaluates its shard at the same steps.
                if val_loader is not None and (
                    step == config.steps or (config.eval.every and step % config.eval.every == 0)
                ):
                    evaluating = time.perf_counter()
                    with isolated(config.seed):  # evaluation draws from streams of its own, the same each time
                        val = validation.evaluate(model, val_loader, task, env, device, autocast)
                    eval_time += time.perf_counter() - evaluating
                    logger.scalars({f"val/{k}": v for k, v in val.items()}, step)
                    progress.line(f"validation at step {step}: " + " ".join(f"{k}={v:.4g}" for k, v in val.items()))
                    state.last_val = val
                    if validation.improves(state, val, config) and env.is_main:
                        checkpoint.save_best(files.checkpoints, model.state_dict(), state.best_meta())
                    if step == config.steps:
                        final_val = {k: finite(v) for k, v in val.items()}
                saved = checkpoints.due(step, config.steps)
                if saved:
                    checkpoints.save(state)  # a collective
                # A collective too, every stop_check_every steps: all ranks stop at the same step.
                if step < config.steps and stop_agreed(stop_flag, env, device, step, config.dist.stop_check_every):
                    if not saved:
                        checkpoints.save(state)
                    checkpoints.wait()  # the checkpoint is on disk before anyone leaves
                    requeued = decide(env, attempts, settings, step, run_dir, device, stop_flag.raised_at)
                    progress.close()
                    logger.close()
                    raise leave(env, requeued)
                if step >= config.steps or state.batch_in_epoch == 0:
                    break  # a new epoch needs set_epoch and a fresh sampler start
        progress.close()
        checkpoints.wait()

        summary = None
        if env.is_main:
            assert attempts is not None  # rank 0 keeps them
            attempts.stop("finished", state.step)  # a later --resume must not count this attempt as a failure
            summary = {
                "task": config.task,
                "final_step": state.step,
                "final_loss": final_loss,
                "final_metrics": final_metrics,
                "val_metrics": final_val,  # of the final weights, on the whole validation set; null: none
                "eval_share": round(eval_time / (time.perf_counter() - attempt_start), 4),  # of the last attempt
                "best": state.best and {**state.best, "path": str(best_path(files.checkpoints))},
                "world_size": env.world_size,
                "torch_threads": torch.get_num_threads(),  # the hash below is reproducible for this count
                # From the first attempt's start when the run was requeued: the time a user waited.
                "wall_time_s": round(attempts.wall_time_s(), 3),
                "weights_sha256": checkpoint.weights_sha256(model.state_dict()),
                "bad_images_skipped": count_bad_images(files.bad_images),  # data.bad_images=skip
            } | attempts.totals()
            hparams = {k: v for k, v in _flat(config_dict(config)).items() if k != "run_dir"}
            finals = {
                "final_loss": final_loss,
                **final_metrics,
                **{f"val_{k}": v for k, v in (final_val or {}).items()},
            }
            logger.hparams(hparams, {k: v for k, v in finals.items() if v is not None})
            logger.close()
            write_text(files.summary, json.dumps(summary, indent=2, allow_nan=False) + "\n")
            loss_text = f"{final_loss:.4f}" if final_loss is not None else "-"
            print(f"done: step {state.step}, final loss {loss_text}, summary in {files.summary}", flush=True)
        return summary


def is_task_metric(key: str, metrics: dict[str, Any]) -> bool:
    return key.startswith("train/") and key[6:] in metrics


def finite(value: float) -> float | None:
    """None for NaN and infinities: summary.json stays valid JSON."""
    return value if math.isfinite(value) else None


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[prefix + key] = value
    return out

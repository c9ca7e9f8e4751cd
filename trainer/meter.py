"""What a log interval adds up to, and the progress line a user watches."""

import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from trainer.distributed import mean_over_ranks
from trainer.supervise.launcher import DistEnv


class IntervalMeter:
    """The steps since the last log: loss and the task's metrics summed on the device (no sync per step),
    and where the time went (waiting for data, the whole step)."""

    def __init__(self, device: torch.device, samples_per_step: int, per_rank: bool = False) -> None:
        self.device, self.samples_per_step, self.gather = device, samples_per_step, per_rank
        self.per_rank: list[tuple[float, float, float]] = []
        self.own: dict[str, float] = {}  # this rank's own figures of the last interval, for jobs.top
        self.step_times: list[float] = []  # this rank's mean step time of each interval so far (the median's)
        self.reset()

    def reset(self) -> None:
        self.loss, self.metrics = torch.zeros((), device=self.device), {}
        self.steps, self.step_s, self.data_s = 0, 0.0, 0.0
        self.own_data_s, self.own_compute_s, self.comm_s = 0.0, 0.0, 0.0

    def add(
        self,
        loss: torch.Tensor,
        metrics: dict[str, torch.Tensor],
        started: float,
        fetching: float,
        loaded: float,
        comm_s: float = 0.0,
    ) -> float:
        """One step that began at `started` (the previous step's end: its logging, evaluation and checkpoint
        count here, as perf/data_wait_s always counted them), asked for its batch at `fetching`, had it at
        `loaded` and spent `comm_s` in DDP's all-reduces; returns now, the next step's start."""
        done = time.perf_counter()
        # The straggler figures: this step's own parts, without the previous step's bookkeeping (rank 0 logs).
        self.own_data_s += loaded - fetching
        self.own_compute_s += done - loaded - comm_s
        self.comm_s += comm_s
        self.loss += loss.detach()
        for name, value in metrics.items():
            self.metrics[name] = self.metrics.get(name, 0.0) + value.detach()
        self.steps, self.step_s, self.data_s = (
            self.steps + 1,
            self.step_s + done - started,
            self.data_s + loaded - started,
        )
        return done

    def means(self, env: DistEnv) -> dict[str, float]:
        """The interval's means over its steps and every rank (collectives), then a fresh interval. `per_rank`
        then holds every rank's (data, compute, communication) seconds per step."""
        if self.gather:
            parts = (self.own_data_s, self.own_compute_s, self.comm_s)
            self.per_rank = per_rank_parts(tuple(p / self.steps for p in parts), env, self.device)  # type: ignore[arg-type]
        step_s = self.step_s / self.steps
        self.step_times = [*self.step_times[-99:], step_s]
        self.own = {
            "loss": float(self.loss / self.steps),  # the mean over ranks below synchronises anyway
            "step_s": step_s,
            "step_s_median": statistics.median(self.step_times),
            "data_share": self.data_s / self.step_s if self.step_s > 0 else 0.0,
            "data_s": self.own_data_s / self.steps,  # this rank's own wait for its batch
        }
        if self.gather:  # log.stragglers: the all-reduces timed apart, so this rank's own work is known
            self.own["own_s"] = (self.own_data_s + self.own_compute_s) / self.steps
        values = {"train/loss": mean_over_ranks(self.loss / self.steps, env)}
        values |= {f"train/{k}": mean_over_ranks(v / self.steps, env) for k, v in self.metrics.items()}
        values |= {
            "perf/samples_per_s": self.steps * self.samples_per_step / self.step_s,
            "perf/step_time_s": self.step_s / self.steps,
            "perf/data_wait_s": self.data_s / self.steps,
        }
        self.reset()
        return values


def per_rank_parts(
    parts: tuple[float, float, float], env: DistEnv, device: torch.device
) -> list[tuple[float, float, float]]:
    """Every rank's parts, by rank: one all-reduce of a (world size x 3) table, each rank filling its row."""
    table = torch.zeros(env.world_size, 3, dtype=torch.float64, device=device)
    table[env.rank] = torch.tensor(parts, dtype=torch.float64, device=device)
    if env.distributed:
        dist.all_reduce(table)
    return [(float(a), float(b), float(c)) for a, b, c in table.tolist()]


class Progress:
    """A live line on a terminal, plain periodic lines in batch logs: step, elapsed time, ETA, values."""

    def __init__(self, total: int, first_step: int, enabled: bool) -> None:
        self.total, self.enabled, self.tty = total, enabled, sys.stdout.isatty()
        self.first_step, self.started = first_step, time.monotonic()  # this attempt's: the ETA is its pace

    def update(self, step: int, values: dict[str, Any]) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        eta = elapsed / max(1, step - self.first_step) * (self.total - step)
        rate = (step - self.first_step) / elapsed if elapsed > 0 else 0.0
        head = f"step {step}/{self.total} elapsed {clock(elapsed)} eta {clock(eta)} {rate:.3g} steps/s "
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

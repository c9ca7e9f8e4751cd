"""A job's ranks forked from a server that imported torch once, for the tests whose subject is what the trainer
does (scalars, images, checkpoints, validation, resume exactness, summary.json) rather than how a job starts.

Each rank runs the entry every task of a job runs (trainer.entry.task.run), with the env:// variables a launcher
gives it, in a process forked from multiprocessing's forkserver: no fresh interpreter importing torch and
torchvision, no submitter, no controller. The forkserver imports torch but runs no torch op, so the OpenMP pool
a fork must not inherit is never started there. Tests of the launch itself keep `python -m jobs.submit`.
"""

import multiprocessing
import os
import signal
import sys
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from trainer.config import build_config, config_dict, write_config
from trainer.data.resolve import resolve_data
from trainer.run.prepare import make_dirs
from trainer.supervise.rendezvous import any_free_port

CONTEXT = multiprocessing.get_context("forkserver")
CONTEXT.set_forkserver_preload(["torch", "torchvision", "trainer.train", "trainer.entry.task"])
# What a launcher outside this test may have set: the ranks see only the variables made for them.
LAUNCHER_PREFIXES = ("SLURM_", "SUBMITIT_", "TORCHELASTIC_", "MASTER_", "GROUP_", "ROLE_")
LAUNCHER_NAMES = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}


def _rank(rank: int, world: int, port: int, config: dict[str, Any], log: str, env: dict[str, str]) -> None:
    for key in [k for k in os.environ if k.startswith(LAUNCHER_PREFIXES) or k in LAUNCHER_NAMES]:
        del os.environ[key]
    os.environ.update(env)  # the test's own, for every rank (e.g. SLURM_DDP_GPUS_PER_TASK)
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip
    with open(log, "a") as out:  # the rank's log, as a job's task has one
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the process's own streams)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    # A fresh interpreter's default start method (loader workers), not the forkserver's, which spawn.prepare set.
    multiprocessing.set_start_method(None, force=True)
    from trainer.entry.task import run

    run(config)


@dataclass
class Ranks:
    """A started set of ranks: wait for them, or kill them (SIGKILL, as a lost node or the OOM killer does)."""

    run_dir: Path
    processes: list[BaseProcess]

    def wait(self, timeout: float = 300) -> list[int | None]:
        for process in self.processes:
            process.join(timeout)
        return [process.exitcode for process in self.processes]

    def kill(self) -> None:
        for process in self.processes:
            if process.pid and process.exitcode is None:
                os.kill(process.pid, signal.SIGKILL)
        self.wait()

    def log(self, rank: int = 0) -> str:
        return (self.run_dir / "logs" / f"rank_{rank}.log").read_text()


def start(run_dir: Path, *args: str, world: int = 2, env: dict[str, str] | None = None) -> Ranks:
    """Resolve the config as the submitter does (data, the run's folder, config.yaml), then fork `world` ranks
    into it; the same folder again resumes the run, as a requeued job does."""
    config = resolve_data(build_config([*args, f"run_dir={run_dir}"]), run_dir.parent / "sample_data", world)
    make_dirs(run_dir / "logs")
    write_config(run_dir, config)
    port = any_free_port()
    processes = [
        CONTEXT.Process(
            target=_rank,
            args=(r, world, port, config_dict(config), str(run_dir / "logs" / f"rank_{r}.log"), env or {}),
        )
        for r in range(world)
    ]
    for process in processes:
        process.start()
    return Ranks(run_dir, processes)


def train(run_dir: Path, *args: str, world: int = 2, env: dict[str, str] | None = None) -> Ranks:
    """Train to the end; every rank must exit 0 (its log is the assertion's message)."""
    ranks = start(run_dir, *args, world=world, env=env)
    codes = ranks.wait()
    assert codes == [0] * world, f"exit codes {codes}:\n" + ranks.log(codes.index(next(c for c in codes if c)))
    return ranks

"""What each task of a job runs. Importing this module does not import torch."""

import os
import socket
from pathlib import Path
from typing import Any

from trainer.atomic import write_text
from trainer.config import TrainConfig, from_dict
from trainer.distenv import resolve
from trainer.errors import UserError
from trainer.stopflag import StopFlag


def record_error(run_dir: Path, rank: int, exc: BaseException) -> None:
    """One line in the run directory saying which rank failed where and why."""
    kind = "" if isinstance(exc, UserError) else f"{type(exc).__name__}: "
    first_line = (str(exc).strip().splitlines() or [""])[0]
    write_text(run_dir / "error.txt", f"rank {rank} on {socket.gethostname()}: {kind}{first_line}\n")


def run(config_dict: dict[str, Any], settings: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Train with the resolved config in this task's distributed environment."""
    stop_flag = StopFlag((settings or {}).get("signal", "USR2"))  # before the seconds spent importing torch
    env = resolve(os.environ)
    config: TrainConfig = from_dict(TrainConfig, config_dict)
    from trainer.preemption import JobSettings  # torch is imported here, in the task, not at submit time
    from trainer.train import train

    print(env.describe(), flush=True)  # every rank, into its own log
    if env.is_main:
        (Path(config.run_dir) / "error.txt").unlink(missing_ok=True)  # from an earlier, failed attempt
    try:
        return train(config, env, JobSettings(**(settings or {})), stop_flag)
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt | SystemExit):
            record_error(Path(config.run_dir), env.rank, exc)
        raise

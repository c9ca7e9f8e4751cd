"""What each task runs for `python -m jobs.submit [flags] -- COMMAND ...`: your command, with torchrun's variables.

Torch-free: the task only starts your command, passes the requeue signal on, and acts on its exit code.
- RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR,
  MASTER_PORT from the same reading of the environment the trainer uses (trainer.distenv), RUN_DIR, and
  REQUEUE_SIGNAL: `torch.distributed.init_process_group("env://")` just works.
- Exit 0: done. Exit 144 (trainer.requeue.REQUEUE_EXIT) after the signal: saved, requeue me; rank 0 records
  the stop and requeues the job as the trainer does, and the command starts again in the same run directory.
  Any other exit: this rank failed; it is recorded (errors/, error.txt) and the job ends.
"""

import ctypes
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trainer import failures, provenance
from trainer.atomic import write_text
from trainer.attempts import Attempts, leave, record_stop
from trainer.config import JobSettings
from trainer.distenv import DistEnv, resolve, torchrun_variables
from trainer.requeue import REQUEUE_EXIT
from trainer.rundir import RunDir

PR_SET_PDEATHSIG = 1
PEER_WAIT_S = 30.0  # rank 0, after its command asked for a requeue: how long the others get to save and exit


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # A task killed by SIGKILL (a failed peer, a cancel) cannot pass it on: the kernel does, on Linux.
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def variables(env: DistEnv, run_dir: str, settings: JobSettings) -> dict[str, str]:
    """What the command gets on top of the task's environment (OMP_NUM_THREADS only when unset)."""
    given = torchrun_variables(env)
    if "OMP_NUM_THREADS" in os.environ:
        del given["OMP_NUM_THREADS"]
    return given | {"RUN_DIR": run_dir, "REQUEUE_SIGNAL": settings.signal}


def run(command: list[str], cwd: str, run_dir: str, settings: JobSettings, in_process: bool = False) -> None:
    env = resolve(os.environ)
    folder = Path(run_dir)
    print(env.describe(), flush=True)
    provenance.record_start(folder, env)
    attempts = Attempts(folder) if env.is_main else None
    if env.is_main:
        failures.clear(folder, failures.process_start_time())
        shutil.rmtree(RunDir(folder).exits, ignore_errors=True)  # the previous attempt's
        assert attempts is not None
        attempts.start(0, env.restart_count)
    started = time.time()
    code = (
        _run_in_process(command, cwd, env, run_dir, settings)
        if in_process
        else _run(command, cwd, env, run_dir, settings)
    )
    if code == REQUEUE_EXIT:
        exited = RunDir(folder).exits
        write_text(exited / f"rank_{env.rank}", str(code))
        if attempts is None:
            raise leave(env, True)
        # Each rank saves on its own signal; a requeue now would kill a peer still saving. Wait for them
        # (bounded: a peer that never got the signal must not hold the job until its time limit).
        deadline = time.monotonic() + PEER_WAIT_S
        while len(list(exited.glob("rank_*"))) < env.world_size and time.monotonic() < deadline:
            time.sleep(0.1)
        requeued = record_stop(env, attempts, settings, -1, folder, None)
        raise leave(env, requeued)
    if code != 0:
        message = f"{' '.join(command)} exited with status {code}" + (f" ({_signal_name(-code)})" if code < 0 else "")
        failures.record(folder, failures.Failure(time.time(), env.rank, env.node_name, "", message, False))
        raise SystemExit(1)
    if attempts is not None:
        attempts.stop("finished", -1)
        summary = {"command": command, "exit_code": 0, "world_size": env.world_size}
        summary |= {"wall_time_s": round(attempts.wall_time_s(), 3), "last_attempt_s": round(time.time() - started, 3)}
        write_text(RunDir(folder).summary, _json(summary | attempts.totals()))


def _run(command: list[str], cwd: str, env: DistEnv, run_dir: str, settings: JobSettings) -> int:
    child = subprocess.Popen(
        command, cwd=cwd, env=os.environ | variables(env, run_dir, settings), preexec_fn=_die_with_parent
    )

    def forward(signum: int, frame: Any) -> None:
        child.send_signal(signum)

    # The requeue signal reaches the task (submitit's wrapper, srun or the local controller): pass it on.
    for signum in {getattr(signal, "SIG" + settings.signal), signal.SIGTERM, signal.SIGINT}:
        signal.signal(signum, forward)
    return child.wait()


def _run_in_process(command: list[str], cwd: str, env: DistEnv, run_dir: str, settings: JobSettings) -> int:
    """The debug profile: `python X.py ...` or `python -m mod ...` in this process, so breakpoints work."""
    if Path(command[0]).name not in ("python", "python3", Path(sys.executable).name) or len(command) < 2:
        return _run(command, cwd, env, run_dir, settings)
    saved_env, saved_argv, saved_cwd = dict(os.environ), list(sys.argv), os.getcwd()
    os.environ.update(variables(env, run_dir, settings))
    os.chdir(cwd)
    try:
        if command[1] == "-m":
            sys.argv = command[2:]
            runpy.run_module(command[2], run_name="__main__", alter_sys=True)
        else:
            sys.argv = command[1:]
            runpy.run_path(command[1], run_name="__main__")
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        os.chdir(saved_cwd)


def _signal_name(signum: int) -> str:
    try:
        return f"killed by {signal.Signals(signum).name}"
    except ValueError:
        return f"killed by signal {signum}"


def _json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value, indent=2) + "\n"

"""What each task of a job runs. Importing this module does not import torch."""

import gc
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from trainer.config import TrainConfig, from_dict
from trainer.errors import UserError
from trainer.run import failures, procfs, provenance, startup
from trainer.run.rundir import RunDir
from trainer.supervise import live, relay
from trainer.supervise.attempt import Attempt, mark_stopped
from trainer.supervise.flag import StopFlag
from trainer.supervise.launcher import DistEnv, resolve
from trainer.supervise.rendezvous import agree_port
from trainer.supervise.signals import JobSettings


def record_error(run_dir: Path, env: DistEnv, exc: BaseException) -> None:
    """This rank's failure in errors/, and error.txt naming the first failure: a peer's "connection closed"
    never hides the rank that failed first. Called while `exc` is handled: its traceback goes beside it."""
    failure = failures.describe(exc, env.rank, env.node_name, time.time())
    try:
        failures.record(run_dir, failure)
    except (OSError, UserError) as write_error:  # a full disk, say: the original error must still surface
        print(f"warning: could not record {failure.line()!r} in {run_dir}: {write_error}", file=sys.stderr)
        return
    if "torch" in sys.modules and not isinstance(exc, UserError):  # a bad setting's one line says it all
        record_traceback(exc, RunDir(run_dir).traceback(env.rank))


def record_traceback(exc: BaseException, path: Path) -> None:
    """The traceback written by torch's own `@record` handler: to `path`, and, under torchrun, to the error file
    its agent reads (TORCHELASTIC_ERROR_FILE), so that torchrun's summary names this rank's cause too."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    class ToFile(ErrorHandler):
        def _get_error_file_path(self) -> str:
            return str(path)

    for handler in (ToFile(), ErrorHandler()):  # the plain one writes only when torchrun set its file
        try:
            handler.record_exception(exc)
        except OSError as write_error:
            print(f"warning: could not write this rank's traceback: {write_error}", file=sys.stderr)


def run(config: dict[str, Any], job: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Train in this task's distributed environment. Both arguments are plain values (what submitit pickles):
    the resolved config as config.yaml holds it, and the JobSettings."""
    startup.MARKS.clear()  # a debug run calls this again in the same process
    startup.mark("task_started")  # submitit has unpickled the call
    settings = JobSettings(**(job or {}))
    stop_flag = StopFlag(settings.signal)  # before the seconds spent importing torch, and your task's file
    run_dir = Path(config["run_dir"])
    env = resolve(os.environ)
    try:
        env = agree_port(env, run_dir)
    except UserError as exc:  # a node without the profile's network interface: restarting does not mend it
        record_error(run_dir, env, exc)
        mark_stopped(env.attempt)
        raise
    # On Slurm the batch shell, not this task, gets the signal, and leaves a file. Rank 0 alone watches for it:
    # the ranks' stop vote is a MAX (trainer.distributed.StopVote), and the others stay off the shared filesystem.
    relay.watch(Attempt.of(env.attempt).signal if env.is_main and env.attempt else None, stop_flag.signum)
    # submitit's task ignores SIGTERM; a cancel (scancel, jobs.cancel) must stop training now, not at SIGKILL.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    live.dump_stacks_on_signal()  # jobs.top's dump key
    from trainer.train import train  # torch is imported here, in the task, not at submit time

    startup.mark("torch_imported")

    print(env.describe(), flush=True)  # every rank, into its own log
    provenance.record_start(run_dir, env.ids(), env.slurm_job_id)  # after torch's import: its versions are read from it
    cause = None
    if env.is_main:
        cause = failures.clear(run_dir, procfs.start_time())  # from an earlier, failed attempt
    try:
        # Built here, not unpickled: your task's file is imported now, with the handler above in place, and a
        # settings error is recorded like any other failure.
        return train(from_dict(TrainConfig, config), env, settings, stop_flag, cause)
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt | SystemExit):
            record_error(run_dir, env, exc)
            if env.is_main:  # an attempt that failed before its first step: torch's report may say why
                provenance.report_environment(run_dir)
        if isinstance(exc, UserError):  # bad input, a full disk: a restart in the allocation fails the same way
            mark_stopped(env.attempt)
        raise
    finally:
        # Done, one way or another: a requeue signal now (the local controller's, a late one) must not kill
        # the process while it exits, when Python has put the default action back (SIG_IGN it keeps).
        signal.signal(stop_flag.signum, signal.SIG_IGN)
        # DDP's reducer holds the process group in reference cycles; freed only at interpreter exit, gloo's
        # threads were destroyed unjoined there ("terminate called without an active exception", SIGABRT)
        # in about one run in six. Free them now, while the interpreter is whole.
        gc.collect()

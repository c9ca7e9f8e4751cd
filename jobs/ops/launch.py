"""Acting on a plan: submit through submitit, follow rank 0's log, report the outcome."""

import contextlib
import dataclasses
import io
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit

from jobs import restarts
from jobs.local_controller import LocalExecutor
from jobs.plan import Plan, submit_command
from jobs.tracking import (
    TERMINAL,
    Target,
    failed_tasks,
    failure_line,
    first_failure,
    full_disk_line,
    info,
    local_exit_record,
    slurm_info,
    tail,
)
from trainer.config import config_dict
from trainer.errors import UserError
from trainer.run import failures
from trainer.run.rundir import RunDir


class SlurmExecutor(submitit.SlurmExecutor):  # type: ignore[misc]
    """submitit's, with srun run by the batch step's supervisor (jobs.restarts.supervised) and the
    interpreter's path quoted (submitit pastes it as it is)."""

    launcher: list[str] = []  # a container runtime's words before python (jobs.containers)
    supervisor: tuple[str, dict[str, Any]] | None = None  # its python and what it is told (jobs.restarts.spec)

    @property
    def _submitit_command_str(self) -> str:
        return submit_command(self.python, self.folder, self.launcher)

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        script = super()._make_submission_file_text(command, uid)
        return restarts.supervised(script, *self.supervisor) if self.supervisor else script


def make_executor(plan: Plan) -> submitit.Executor:
    if plan.executor == "debug":
        executor: submitit.Executor = submitit.DebugExecutor(plan.log_dir)
    elif plan.executor == "local":
        executor = LocalExecutor(plan.log_dir, plan.settings, plan.code_dir, plan.array_parallelism, plan.run_dirs)
    else:
        # submitit raises RuntimeError('Could not detect "srun"') on a machine without Slurm.
        for command in ("sbatch", "srun"):
            if shutil.which(command) is None:
                raise UserError(
                    f"{command} not found: run on a Slurm login node, or use --profile local "
                    "(--dry-run prints the batch script anywhere)"
                )
        executor = SlurmExecutor(plan.log_dir, max_num_timeout=plan.settings.max_num_timeout, python=plan.python)
        executor.launcher = plan.launcher
        executor.supervisor = plan.supervisor
    executor.update_parameters(**plan.parameters)
    return executor


def refusal(text: str) -> str:
    """The line of sbatch's output that says why it refused, e.g. 'Invalid partition name specified'."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line.split("error:", 1)[1].strip() for line in lines if "error:" in line]
    return errors[-1] if errors else (lines[-1] if lines else "no reason given")


ONE_NODE = "ask for at most what one node has (sinfo -o '%n %c %G' lists CPUs and GPUs per node)"
FIXES = (  # sbatch's reason (lower case), and what to change
    ("invalid partition", "name a partition that exists (sinfo -s lists them) with --partition or partition:"),
    ("invalid account", "set account: to one of yours (sacctmgr show assoc user=$USER)"),
    ("invalid qos", "set qos: to one your account may use (sacctmgr show assoc user=$USER format=qos)"),
    ("time limit", "ask for a time within the partition's limit with --time (sinfo -o '%P %l' lists them)"),
    ("node configuration is not available", ONE_NODE),
    ("more processors requested", ONE_NODE),
    ("node count", "ask for at most the partition's nodes with --nodes (sinfo -s lists them)"),
)


def refusal_fix(reason: str) -> str:
    """What to change for sbatch's `reason`, e.g. a partition that does not exist; the profile or flags else."""
    return next((fix for key, fix in FIXES if key in reason.lower()), "fix the profile or flags")


@contextlib.contextmanager
def exported(env: dict[str, str], inner: Any) -> Any:
    """`inner` (submitit's clean_env, which hides SLURM_* variables), then `env` in this process's environment
    while the local controller starts (it inherits it)."""
    with inner:
        saved = {k: os.environ.get(k) for k in env}
        if env.get("PYTHONPATH") and os.environ.get("PYTHONPATH"):  # the tool's folder first, then yours
            env = env | {"PYTHONPATH": f"{env['PYTHONPATH']}{os.pathsep}{os.environ['PYTHONPATH']}"}
        os.environ.update(env)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def submit(plan: Plan) -> list[submitit.Job[Any]]:
    """Queue the plan's jobs: one job, or one array job in a single sbatch call for a sweep."""
    captured = io.StringIO()
    # Local tasks get no variables of an enclosing launcher (an salloc shell, a torchrun worker): they
    # would make each task believe it is another job's rank. Slurm jobs keep them (SLURM_CONF among them).
    leftovers = [k for k in os.environ if k.startswith("TORCHELASTIC_") or k in ("GROUP_RANK", "ROLE_RANK")]
    hidden = submitit.helpers.clean_env(leftovers) if plan.executor == "local" else contextlib.nullcontext()
    hidden = exported(plan.env, hidden) if plan.env else hidden  # the profile's env, for the local tasks
    try:
        executor = make_executor(plan)
        # submitit prints sbatch's stderr itself; we turn it into our one-line error instead.
        with contextlib.redirect_stderr(captured), hidden:
            calls = calls_of(plan)
            if len(calls) == 1:
                return [executor.submit(*calls[0])]
            with executor.batch():
                jobs = [executor.submit(*call) for call in calls]
            return jobs
    except (submitit.core.utils.FailedJobError, subprocess.CalledProcessError) as exc:
        reason = refusal(str(exc) or captured.getvalue())
        raise UserError(f"Slurm refused the job: {reason}; {refusal_fix(reason)}") from None
    except FileNotFoundError as exc:
        raise UserError(f"{exc.filename} not found: run on a Slurm login node, or use --profile local") from None


def calls_of(plan: Plan) -> list[tuple[Any, ...]]:
    """The function each job runs and its arguments: the trainer, or your command (trainer.supervise.script)."""
    # Plain values: a task unpickles them without importing anything of yours (your task's file is
    # imported by the entry, after its signal handler is in place).
    job = dataclasses.asdict(plan.settings)
    if plan.script is None:
        import trainer.entry.task  # imported here, not at the top, to keep --dry-run quick

        return [(trainer.entry.task.run, config_dict(config), job) for config in plan.configs]
    import trainer.supervise.script

    script, debug = plan.script, plan.executor == "debug"
    return [
        (trainer.supervise.script.run, command, script.cwd, run_dir, job, debug, script.restart_args)
        for command, run_dir in zip(script.commands, script.run_dirs, strict=True)
    ]


def rank0_log(job: submitit.Job[Any]) -> Path:
    return job.paths.stdout


def follow(job: submitit.Job[Any], poll_s: float = 0.5) -> None:
    """Copy rank 0's output, stdout and stderr, to our stdout until the job ends."""
    if isinstance(job, submitit.SlurmJob):
        # Asked of Slurm at each poll: submitit's job.done() refreshes ever more rarely (after half the job's
        # age), which printed a failure 16 s after the job had ended. Its stderr is in stdout's file.
        tail(rank0_log(job), lambda: slurm_info(job.job_id).state in TERMINAL, poll_s)
    else:
        tail(rank0_log(job), job.done, poll_s, stderr=job.paths.stderr)


def settle(target: Target, timeout_s: float = 120) -> None:
    """Wait until Slurm itself calls the job ended: results are written a moment before the epilog ends. A
    job Slurm has forgotten is ended (its run directory tells how)."""
    deadline = time.monotonic() + timeout_s
    while info(target).state not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.5)


CANCELLED = "cancelled: "  # an outcome line that is not an error: printed as it is, not after "error: "


def was_cancelled(target: Target) -> bool:
    """The job ended because someone cancelled it: Slurm says CANCELLED, or the local controller recorded it."""
    if target.executor == "slurm":
        return info(target).state.startswith("CANCELLED")
    if target.executor == "local":
        return bool(local_exit_record(target).get("cancelled"))
    return False


def ended_well(target: Target) -> bool | None:
    """Whether every task of an ended job exited 0, from Slurm's state or the local controller's exit codes,
    without submitit's wait for result files a failed task never writes (15 s); None where neither tells."""
    if target.executor == "slurm":
        state = info(target).state  # a job Slurm forgot: what its run directory says
        return state == "COMPLETED" if state in TERMINAL else None
    if target.executor == "local":
        codes = local_exit_record(target).get("codes")
        return all(c == 0 for c in codes) if codes else None
    return None


def target_outcome(target: Target, results: Callable[[], Any] | None = None) -> str | None:
    """None when the job behind `target` succeeded, else one line saying why it did not. `results`: submitit's
    (the debug executor's job ran in this process, and only its results tell)."""
    if was_cancelled(target):  # asked for (jobs.cancel, scancel): not a failure, and nothing to look for
        resume = f"python -m jobs.submit --resume {target.run_dir}" if target.run_dir else "its run directory"
        return f"{CANCELLED}job {target.job_id} was cancelled (jobs.cancel or scancel); continue it with {resume}"
    well = ended_well(target)
    problem = "failed" if well is False else None
    if well is None and results is not None:
        try:
            results()
        except Exception as exc:  # submitit wraps the task's error; the ranks' records name the first failure
            problem = type(exc).__name__
    elif well is None and (state := info(target).state) not in ("COMPLETED", "RUNNING", "PENDING"):
        problem = state
    run_dir, log = target.run_dir, target.log0
    if problem is not None:
        if first := first_failure(target):
            if first.killed and run_dir is not None and run_dir.is_dir():  # a killed rank wrote nothing
                failures.record(run_dir, first)
            return first.line()
        if line := failure_line(target):  # a rank's error, or srun's words when no task started
            return line
        if failed := failed_tasks(target):
            return f"job {target.job_id} failed: {failed[0]}"
        if run_dir is not None and (line := full_disk_line(run_dir)):  # no rank could record anything
            return line
        return f"job {target.job_id} failed ({problem}); see {log}"
    if run_dir is None or not RunDir(run_dir).finished():
        return f"job {target.job_id} ended without a finished summary; see {log}"
    return None


def wait_for(jobs: list, plan: Plan, folder: Path) -> int:  # type: ignore[type-arg]
    """--wait: follow rank 0's output, then report each job's outcome."""
    for job in jobs:
        follow(job)
        if plan.executor == "slurm":  # no run directory: a job Slurm forgot is not settled from it
            settle(Target(job.job_id, "slurm", None, rank0_log(job).parent))
    failed = []
    for job, run_dir in zip(jobs, plan.run_dirs, strict=True):
        if problem := target_outcome(Target(job.job_id, plan.executor, run_dir, rank0_log(job).parent), job.results):
            failed.append(problem)
    wrote_events = plan.script is None or bool(RunDir(folder).event_files())  # what jobs.picture draws
    return said(failed, f"finished; TensorBoard: tensorboard --logdir {folder}" if wrote_events else "finished")


def said(problems: list[str], done: str) -> int:
    """The outcome of a wait: the first problem (a cancel as it is, else as an error), or `done`; its exit code."""
    if problems:
        first = problems[0]
        print(first if first.startswith(CANCELLED) else f"error: {first}", file=sys.stderr)
        return 1
    print(done)
    return 0


def wait(target: Target, offset: int = 0) -> str | None:
    """Print rank 0's log (stdout from byte `offset`, and a local task's stderr file) until the job ends; its
    outcome line, None when it succeeded."""
    if target.executor == "debug":
        raise UserError(f"job {target.job_id} ran in its submitter's process (debug executor): nothing to wait for")
    if target.log0 is None:
        raise UserError(f"the log folder of job {target.job_id} is unknown; pass its run directory instead")
    stderr = target.logs(0)[1] if target.executor != "slurm" else None  # on Slurm, in stdout's file
    tail(target.log0, lambda: info(target).state in TERMINAL, poll_s=0.5, offset=offset, stderr=stderr)
    if target.executor == "slurm":
        settle(target)
    return target_outcome(target)

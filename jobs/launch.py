"""Acting on a plan: submit through submitit, follow rank 0's log, report the outcome."""

import sys
import time
from pathlib import Path
from typing import Any

import submitit

import trainer.entry
from jobs.plan import Plan


def submit(plan: Plan) -> submitit.Job[Any]:
    if plan.executor == "debug":
        executor: submitit.Executor = submitit.DebugExecutor(plan.log_dir)
    elif plan.executor == "local":
        executor = submitit.LocalExecutor(plan.log_dir)
    else:
        raise NotImplementedError(plan.executor)
    executor.update_parameters(**plan.parameters)
    return executor.submit(trainer.entry.run, plan.config)


def rank0_log(job: submitit.Job[Any]) -> Path:
    return job.paths.stdout


def follow(job: submitit.Job[Any], poll_s: float = 0.5) -> None:
    """Copy rank 0's output to our stdout until the job ends."""
    position = 0
    while True:
        finished = job.done()
        path = rank0_log(job)
        if path.exists():
            with path.open() as f:
                f.seek(position)
                chunk = f.read()
                position = f.tell()
            sys.stdout.write(chunk)
            sys.stdout.flush()
        if finished:
            return
        time.sleep(poll_s)


def outcome(job: submitit.Job[Any], plan: Plan) -> str | None:
    """None when the job succeeded, else one line saying why it did not."""
    try:
        job.results()
    except Exception as exc:  # submitit wraps the task's error; error.txt holds the one-line reason
        error_file = plan.run_dir / "error.txt"
        if error_file.exists():
            return error_file.read_text().strip()
        return f"job {job.job_id} failed ({type(exc).__name__}); see {rank0_log(job)}"
    if not (plan.run_dir / "summary.json").exists():
        return f"job {job.job_id} ended without a summary; see {rank0_log(job)}"
    return None

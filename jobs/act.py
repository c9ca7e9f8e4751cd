"""What jobs.top's keys (and its --save-now, --requeue-now, --dump-stacks flags) do to a running job: ask for a
checkpoint without stopping, requeue it now, write every rank's Python stacks. Cancel is jobs.cancel's.
Each returns the line jobs.top shows; a job that is not running is refused in one line."""

import json
import os
import subprocess

import yaml

from jobs.tracking import Target, info, is_local_job
from trainer.errors import UserError
from trainer.run.rundir import RunDir
from trainer.supervise import live, signals


def _running(target: Target) -> Target:
    if target.executor == "debug":
        raise UserError(f"job {target.job_id} runs in its submitter's process (debug executor): act on it there")
    state = info(target).state
    if state != "RUNNING" or (target.executor == "local" and not is_local_job(target)):
        raise UserError(f"job {target.job_id} is {state}, not running; python -m jobs.status tells how it ended")
    return target


def _trainer(target: Target, what: str) -> None:
    if target.run_dir is None or RunDir(target.run_dir).command.exists():
        raise UserError(f"{what} needs the trainer; a -- COMMAND run saves when its own code does (requeue it instead)")


def _heartbeats_on(target: Target) -> None:
    """Rank 0's watchdog threads read the save request: none run with hang.enabled=false."""
    assert target.run_dir is not None
    try:
        hang = (yaml.safe_load(RunDir(target.run_dir).config.read_text()) or {}).get("hang") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        hang = {}
    if isinstance(hang, dict) and hang.get("enabled") is False:
        raise UserError(
            f"job {target.job_id} runs with hang.enabled=false: no thread reads the request; requeue it instead "
            "(r, --requeue-now), or resubmit with hang.enabled=true"
        )


def save_now(target: Target) -> str:
    """Rank 0 takes the request at the next vote (dist.stop_check_every steps); every rank saves and trains on."""
    _trainer(_running(target), "a save now")
    _heartbeats_on(target)
    assert target.run_dir is not None
    live.request(target.run_dir, save=True)
    return f"asked job {target.job_id} for a checkpoint at its next step boundary (it trains on)"


def requeue_now(target: Target) -> str:
    """The requeue signal, as the time limit sends it: the ranks save where they are and the job is requeued
    (recorded as a preemption: time was left)."""
    _running(target)
    name = _requeue_signal(target)
    if target.executor == "slurm":
        _scancel(["-b", "-s", name, target.job_id])  # to the batch shell, as sbatch's --signal=B: does
    else:
        os.kill(int(target.job_id), signals.number(name))  # the local controller takes it as a preemption
    return f"sent SIG{name} to job {target.job_id}: it saves and is requeued"


def dump_stacks(target: Target) -> str:
    """Every rank of the trainer writes each thread's stack into its log's standard error (faulthandler)."""
    _trainer(_running(target), "dumping stacks")
    assert target.run_dir is not None
    if target.executor == "slurm":
        _scancel(["-s", live.DUMP_SIGNAL.name.removeprefix("SIG"), target.job_id])  # the steps' tasks, not the batch
    else:
        for path in sorted((RunDir(target.run_dir).provenance / "ranks").glob("rank_*.json")):
            pid = json.loads(path.read_text()).get("pid")
            if isinstance(pid, int):
                try:
                    os.kill(pid, live.DUMP_SIGNAL)
                except ProcessLookupError:
                    continue  # that rank ended
    if target.log_dir is None:
        return f"asked every rank of job {target.job_id} for its stacks: in each rank's log"
    out, err = target.logs(0)
    where = out if target.executor == "slurm" else err  # on Slurm a task's stderr goes to its stdout's file
    return f"asked every rank of job {target.job_id} for its stacks: in each rank's log, {where} for rank 0"


def _requeue_signal(target: Target) -> str:
    try:
        profile = json.loads(RunDir(target.run_dir).job.read_text()).get("profile") if target.run_dir else None
    except (OSError, ValueError):
        profile = None
    name = profile.get("signal") if isinstance(profile, dict) else None
    return signals.normalise(name) if isinstance(name, str) else signals.DEFAULT


def _scancel(args: list[str]) -> None:
    done = subprocess.run(["scancel", *args], capture_output=True, text=True, timeout=60)
    if done.returncode:
        raise UserError(f"scancel refused: {(done.stderr.strip().splitlines() or ['no reason given'])[-1]}")

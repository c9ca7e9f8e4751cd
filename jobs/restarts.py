"""What the batch step's supervisor is told (trainer.supervise): the profile's policy of restarts in the
allocation (`restarts_in_job`), failure requeues (`requeue_on_failure`) and spare nodes (`spare_nodes`), the
log folder, the run folders and the requeue signal, as one JSON argument. Pure functions of the profile;
jobs.plan puts the supervisor in front of srun in the batch script."""

import json
import shlex
from pathlib import Path

from jobs.profiles import Profile
from trainer.supervise.attempt import NAME

SUPERVISOR = "trainer.supervise.slurm"


def spec(profile: Profile, log_dir: Path, run_dirs: list[Path]) -> dict[str, object]:
    rec = profile.recovery
    policy = {
        "restarts_in_job": rec.restarts_in_job,
        "requeue_on_failure": rec.requeue_on_failure,
        "spare_nodes": rec.spare_nodes,
        "nodes": profile.resources.nodes,
        "tasks_per_node": profile.resources.tasks_per_node,
        "exclude": profile.slurm.exclude or "",
    }
    return {"policy": policy, "log_dir": str(log_dir), "run_dirs": [str(d) for d in run_dirs], "signal": rec.signal}


def supervised(script: str, python: str, job_spec: dict[str, object]) -> str:
    """The batch script with its srun line run by the supervisor, which replaces the batch shell (exec): it
    gets the requeue signal (--signal=B:...), starts srun again, and exits with srun's status. The supervisor
    needs Python 3.10 or later with this tool importable: each candidate is tried first (the profile's python,
    then the node's python3); with neither, srun runs once as it is, without restarts, and says so."""
    lines = script.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    pythons = [python] if python == "python3" else [python, "python3"]
    spec = shlex.quote(json.dumps(job_spec))
    tries = [
        f"{shlex.quote(p)} -c 'import {SUPERVISOR}' 2>/dev/null && exec {shlex.quote(p)} -m {SUPERVISOR} {spec} -- {lines[at]}"
        for p in pythons
    ]
    fallback = f'echo "warning: no python here runs {SUPERVISOR} (3.10 or later, this tool importable): srun runs once"'
    # A requeue signal before the supervisor takes it (Slurm may send it as the job starts; seen in CI: the
    # job FAILED, this shell killed by it) leaves the signal's file instead, which the supervisor and the tasks
    # find. Only the python's own start-up, after exec, is left without a handler.
    log_dir = shlex.quote(str(job_spec["log_dir"]))
    name = NAME.format(job='"$SLURM_JOB_ID"', requeue='"${SLURM_RESTART_COUNT:-0}"')  # trainer.supervise.attempt's
    early = [
        f"early_signal={log_dir}/{name}.signal",
        f"""trap 'touch "$early_signal"' {job_spec["signal"]}""",
    ]
    lines[at : at + 1] = [*early, *tries, fallback, lines[at]]
    return "\n".join(lines)

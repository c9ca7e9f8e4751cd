"""`python -m jobs.check --profile mysite [--nodes N] [--gpus-per-node G]`: a site's first-day failures found in
one minute, before a real job meets them.

It submits a tiny job with the profile's own settings (partition, account, setup lines, srun options, container,
interpreter, code snapshot) whose tasks each run trainer/entry/preflight.py, waits for it, and prints one table: per
node, that the run root can be written and the code snapshot is seen there, that the interpreter imports torch,
submitit and this project at the versions here, the GPUs each task sees against the profile's, their model, the
driver and the CUDA and NCCL versions, where rank 0 listens, and one all-reduce across every task with the job's
backend (NCCL on GPUs), with its bandwidth. A failed row says how to fix it. Exit 0 when every row passes, 1 when
one fails, 2 for bad input.
"""

import argparse
import contextlib
import io
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import submitit

from jobs.ops import launch
from jobs.ops.preflight import PACKAGES, Row, reported, rows
from jobs.ops.prepare import check_partition, has_local_gpus
from jobs.plan import make_plan
from jobs.profiles import Profile, load_profile, run_root_of
from jobs.snapshot import copy, plan_snapshot
from jobs.tracking import TERMINAL, Target, aligned, info
from trainer.entry import preflight  # the tasks' side (torch only inside its functions)
from trainer.errors import UserError, one_line_errors
from trainer.run.prepare import make_run_root
from trainer.run.rundir import RunDir


def table(out: list[Row]) -> str:
    cells = [
        ("node", "check", "result", "detail"),
        *[(r.node, r.check, "ok" if r.ok else "FAIL", r.detail) for r in out],
    ]
    return "\n".join(aligned(cells))


def check_profile(argv: list[str] | None) -> Profile:
    """The profile named on the command line, with the check's own limits: one short attempt, no restarts."""
    parser = argparse.ArgumentParser(prog="python -m jobs.check", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True, help="profile name in cluster_profiles/ or a YAML path")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--gpus-per-node", type=int)
    parser.add_argument("--partition")
    args = parser.parse_args(argv)
    profile = load_profile(args.profile).with_overrides(
        nodes=args.nodes, gpus_per_node=args.gpus_per_node, partition=args.partition
    )
    if profile.executor == "debug" or profile.remote.login:
        raise UserError(f"jobs.check submits a job with profile {profile.name}: run it where that profile submits")
    # The profile's settings, but no restarts: a failing check must end, not try again.
    profile = profile.with_overrides(restarts_in_job=0, requeue_on_failure=0, spare_nodes=0, timeout_min=10)
    if profile.executor == "slurm":
        check_partition(profile)  # more nodes or time than the partition has: the check's job would pend for ever
    return profile


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    profile = check_profile(argv)
    run_root = run_root_of(profile)
    make_run_root(run_root)
    folder = run_root / f"check-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    folder.mkdir()
    code_dir = None
    if (code := profile.code).snapshot:
        code_dir = RunDir(folder).code
        copy(plan_snapshot(Path.cwd(), [run_root], code.snapshot_exclude, code.snapshot_limit_mb), code_dir)
    plan = make_plan(profile, [], RunDir(folder).logs, has_local_gpus(), sys.executable, (), code_dir, [folder])
    expected = {name: preflight.version(name) for name in PACKAGES}
    captured = io.StringIO()  # submitit prints sbatch's refusal itself: it becomes the table's row instead
    try:
        with contextlib.redirect_stderr(captured):
            job = launch.make_executor(plan).submit(preflight.run, str(folder), str(code_dir or ""), expected)
    except (submitit.core.utils.FailedJobError, subprocess.CalledProcessError) as exc:
        shutil.rmtree(folder, ignore_errors=True)  # nothing ran
        reason = launch.refusal(str(exc) or captured.getvalue())
        print(table([Row("-", "submit", False, f"Slurm refused the job: {reason}; {launch.refusal_fix(reason)}")]))
        return 1
    target = Target(job.job_id, plan.executor, folder, RunDir(folder).logs)
    deadline = time.monotonic() + 60 * profile.resources.timeout_min + 120
    try:  # from the line that names the job on: a Ctrl-C right after it still cancels the job
        print(f"check job {job.job_id} ({plan.tasks} task(s), {plan.executor}) in {folder}", flush=True)
        while (state := info(target).state) not in TERMINAL and time.monotonic() < deadline:
            time.sleep(1.0)
    except KeyboardInterrupt:  # the check's job is not the user's: it goes with the check
        job.cancel(check=False)
        print(f"interrupted: cancelled check job {job.job_id}; its logs: {RunDir(folder).logs}", file=sys.stderr)
        return 130
    if state not in TERMINAL:
        job.cancel(check=False)
        why = "still pending (the queue is busy)" if state == "PENDING" else f"still {state}"
        detail = f"job {job.job_id} was {why} after {profile.resources.timeout_min + 2} min; cancelled it"
        print(table([Row("-", "tasks reported", False, detail)]))
        return 1
    logs = "".join(p.read_text(errors="replace") for p in RunDir(folder).logs.glob("*_log.*"))
    facts = reported(folder, logs)
    asked = profile.resources
    gpus_each = asked.gpus_per_task if asked.request_gpus else 0  # CPU partitions: request_gpus: false
    out = rows(facts, plan.tasks, gpus_each, expected, logs)
    print(table(out))
    if all(r.ok for r in out):
        shutil.rmtree(folder, ignore_errors=True)
        return 0
    print(f"the check's tasks' logs: {RunDir(folder).logs}")
    return 1


if __name__ == "__main__":
    sys.exit(main())

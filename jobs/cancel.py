"""`python -m jobs.cancel RUN_DIR|SWEEP_DIR|JOB_ID`: stop a job (every point of a sweep)."""

import argparse
import os
import signal
import subprocess
import sys
import time

from jobs.remote import follow
from jobs.tracking import TERMINAL, Target, add_run_arguments, by_name, find_all, is_local_job, slurm_info
from trainer.errors import UserError, one_line_errors

STOP_WAIT_S = 30  # the local controller stops its tasks within seconds (SIGTERM, then SIGKILL)


def cancel(target: Target, whole_array: bool = False) -> str:
    if target.executor == "slurm":
        # scancel exits 0 for a job that already ended (or one it does not know): ask Slurm before and after.
        before = None if whole_array else slurm_info(target.job_id).state
        if before in TERMINAL:
            raise UserError(f"job {target.job_id} already ended ({before}): nothing to cancel")
        result = subprocess.run(["scancel", target.job_id], capture_output=True, text=True)
        if result.returncode:
            raise UserError(f"scancel refused: {result.stderr.strip().splitlines()[-1]}")
        if not whole_array:
            deadline = time.monotonic() + STOP_WAIT_S
            while (state := slurm_info(target.job_id).state) not in TERMINAL:
                if time.monotonic() > deadline:
                    raise UserError(
                        f"job {target.job_id} is still {state} {STOP_WAIT_S} s after scancel; scancel it again"
                    )
                time.sleep(0.2)
        return f"cancelled job {target.job_id}"
    # The local controller stops every task on SIGTERM and records the job as cancelled. Only its own
    # process is signalled: after the job ended, its PID may belong to anything.
    if not is_local_job(target):
        raise UserError(f"job {target.job_id} is not running; python -m jobs.status shows how it ended")
    os.kill(int(target.job_id), signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while is_local_job(target):
        if time.monotonic() > deadline:
            raise UserError(f"job {target.job_id} did not stop within {STOP_WAIT_S} s; kill -9 {target.job_id}")
        time.sleep(0.1)
    return f"cancelled job {target.job_id}"


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.cancel", description=__doc__.splitlines()[0])
    add_run_arguments(parser, "a run or sweep directory printed by jobs.submit, a run's name, or a Slurm job id")
    args = parser.parse_args(argv)
    run = by_name(args.target, args.profile)
    if (code := follow.elsewhere(run, "jobs.cancel")) is not None:  # a run on a cluster: cancelled there
        return code
    targets = find_all(run)
    if len(targets) == 1:
        print(cancel(targets[0][1]))
        return 0
    arrays = {t.job_id.split("_")[0] for _, t in targets if t.executor == "slurm"}
    if len(arrays) == 1 and all(t.executor == "slurm" and "_" in t.job_id for _, t in targets):
        # A sweep is one array job: one scancel stops every point, pending or running.
        array = arrays.pop()
        print(cancel(Target(array, "slurm", None, None), whole_array=True) + f" (the sweep's {len(targets)} points)")
        return 0
    refused = []
    for name, target in targets:  # every point: one that already ended does not keep the others running
        try:
            print(f"{name}: {cancel(target)}", flush=True)
        except UserError as exc:
            refused.append(f"{name}: {exc}")
    if refused:
        raise UserError("; ".join(refused))
    return 0


if __name__ == "__main__":
    sys.exit(main())

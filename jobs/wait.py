"""`python -m jobs.wait RUN`: follow a submitted job's rank 0 log and exit with its outcome, as `--wait` would
have (0: finished; 1: failed, with the first failure's line). For any executor, and for a run on a cluster
(jobs.remote): re-attach after closing the terminal or losing the connection."""

import argparse
import sys

from jobs.ops import follow, launch
from jobs.tracking import TERMINAL, Target, add_run_arguments, by_name, find_all, info, tail
from trainer.errors import UserError, one_line_errors


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
        launch.settle_id(target)
    return launch.target_outcome(target)


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.wait", description=__doc__.splitlines()[0])
    add_run_arguments(parser, "a run or sweep directory printed by jobs.submit, a run's name, or a job id")
    parser.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)  # bytes of the log already shown
    args = parser.parse_args(argv)
    run = by_name(args.target, args.profile)
    if (code := follow.elsewhere(run, "jobs.wait", follow_it=True)) is not None:  # a run on a cluster
        return code
    problems = []
    for _, target in find_all(run):
        if line := wait(target, args.offset):
            problems.append(line)
    if problems:
        first = problems[0]
        print(first if first.startswith(launch.CANCELLED) else f"error: {first}", file=sys.stderr)
        return 1
    print("finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())

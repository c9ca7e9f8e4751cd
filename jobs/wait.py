"""`python -m jobs.wait RUN`: follow a submitted job's rank 0 log and exit with its outcome, as `--wait` would
have (0: finished; 1: failed, with the first failure's line). For any executor, and for a run on a cluster
(jobs.remote): re-attach after closing the terminal or losing the connection."""

import argparse
import sys

from jobs.ops import follow, launch
from jobs.tracking import by_name, find_all, run_parser
from trainer.errors import one_line_errors


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = run_parser(
        "jobs.wait", __doc__, "a run or sweep directory printed by jobs.submit, a run's name, or a job id"
    )
    parser.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)  # bytes of the log already shown
    args = parser.parse_args(argv)
    run = by_name(args.target, args.profile)
    if (code := follow.elsewhere(run, "jobs.wait", follow_it=True)) is not None:  # a run on a cluster
        return code
    problems = []
    for _, target in find_all(run):
        if line := launch.wait(target, args.offset):
            problems.append(line)
    return launch.said(problems, "finished")


if __name__ == "__main__":
    sys.exit(main())

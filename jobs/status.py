"""`python -m jobs.status RUN_DIR|SWEEP_DIR|JOB_ID`: state, restarts, nodes, last step and checkpoint."""

import sys
from pathlib import Path

from jobs.ops import follow
from jobs.ops.state import report, sweep_table
from jobs.tracking import by_name, find_all, run_parser
from trainer.errors import one_line_errors


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = run_parser("jobs.status", __doc__)
    args = parser.parse_args(argv)
    run = by_name(args.target, args.profile)
    if (code := follow.elsewhere(run, "jobs.status")) is not None:  # a run on a cluster: asked there
        return code
    targets = find_all(run)
    if len(targets) == 1 and not targets[0][0]:
        print(report(targets[0][1]))
    else:
        print(sweep_table(Path(run), targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())

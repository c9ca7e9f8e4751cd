"""`python -m jobs.logs RUN_DIR|JOB_ID [--rank N] [--follow]`: print a task's log."""

import argparse
import sys

from jobs.tracking import TERMINAL, find, info, rank_log, tail
from trainer.errors import UserError, one_line_errors


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.logs", description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a run directory printed by jobs.submit, or a Slurm job id")
    parser.add_argument("--rank", type=int, default=0, help="global rank whose log to show (default 0)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    args = parser.parse_args(argv)
    target = find(args.target)
    path = rank_log(target, args.rank)
    if not args.follow:
        if not path.exists():
            raise UserError(f"no log for rank {args.rank} at {path} (yet); check --rank or wait for the job to start")
        sys.stdout.write(path.read_text())
        return 0
    tail(path, lambda: info(target).state in TERMINAL | {"FINISHED"}, poll_s=1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m jobs.logs RUN_DIR|JOB_ID [--rank N] [--follow]`: print a task's log."""

import argparse
import sys
import time

from jobs.tracking import TERMINAL, find, info, rank_log
from trainer.errors import UserError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.logs", description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a run directory printed by jobs.submit, or a Slurm job id")
    parser.add_argument("--rank", type=int, default=0, help="global rank whose log to show (default 0)")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    args = parser.parse_args(argv)
    try:
        target = find(args.target)
        path = rank_log(target, args.rank)
        position = 0
        while True:
            running = args.follow and info(target).state not in TERMINAL | {"FINISHED"}
            if path.exists():
                with path.open() as f:
                    f.seek(position)
                    sys.stdout.write(f.read())
                    position = f.tell()
                sys.stdout.flush()
            elif not args.follow:
                raise UserError(
                    f"no log for rank {args.rank} at {path} (yet); check --rank or wait for the job to start"
                )
            if not running:
                return 0
            time.sleep(1)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

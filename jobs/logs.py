"""`python -m jobs.logs RUN_DIR|JOB_ID [--rank N] [--follow]`: print a task's log, stdout and stderr."""

import argparse
import sys
import threading
from pathlib import Path

from jobs.ops import follow
from jobs.tracking import TERMINAL, by_name, find, first_failure, info, log_text, run_parser, tail
from trainer.errors import UserError, one_line_errors


def show(out: Path, err: Path) -> None:
    """The task's output, then what it wrote to stderr (tracebacks, warnings) under a header."""
    sys.stdout.write(log_text(out, limit=None))  # a regular file's only: a FIFO in its place shows nothing
    text = log_text(err, limit=None)
    if text:
        sys.stdout.write(f"==> stderr: {err} <==\n{text}")


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = run_parser("jobs.logs", __doc__, "a run directory printed by jobs.submit, a run's name, or a Slurm job id")
    parser.add_argument(
        "--rank", type=int, help="global rank whose log to show (default: the rank that failed first, else 0)"
    )
    parser.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the job ends (stderr to stderr)"
    )
    parser.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)  # bytes already shown (a follow)
    args = parser.parse_args(argv)
    there = ([] if args.rank is None else ["--rank", str(args.rank)]) + (["--follow"] if args.follow else [])
    run = by_name(args.target, args.profile)
    if (code := follow.elsewhere(run, "jobs.logs", *there, follow_it=args.follow)) is not None:
        return code  # a run on a cluster: its log there
    target = find(run)
    if args.rank is None:
        first = first_failure(target)
        args.rank = first.rank if first is not None else 0
        if first is not None:
            print(f"(rank {first.rank}: the rank that failed first; --rank N for another)", file=sys.stderr)
    out, err = target.logs(args.rank)
    if not args.follow:
        if not out.exists() and not err.exists():
            raise UserError(f"no log for rank {args.rank} at {out} (yet); check --rank or wait for the job to start")
        show(out, err)
        return 0

    def done() -> bool:
        return info(target).state in TERMINAL

    errors = threading.Thread(target=tail, args=(err, done, 1.0, sys.stderr), daemon=True)
    errors.start()
    tail(out, done, poll_s=1.0, offset=args.offset)
    errors.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())

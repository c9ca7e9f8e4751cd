"""A submit line's words: jobs.submit's flags and settings, and the command after `--`. jobs.submit and
jobs.rehearse (which rehearses what a submit line would queue) both read them here."""

import argparse
import sys

from trainer.errors import UserError


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        print(f"error: {message}; see python -m jobs.submit --help", file=sys.stderr)
        sys.exit(2)


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """Our arguments, and the command after `--` that every task runs instead of the trainer."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    if cut == len(argv) - 1:
        raise UserError("nothing after --; give the command every task runs, e.g. -- python train.py --lr 3e-4")
    return argv[:cut], argv[cut + 1 :]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(
        prog="python -m jobs.submit",
        description="`python -m jobs.submit`: queue a DDP training job from a cluster profile.",
    )
    parser.add_argument(
        "--profile", help="profile name in cluster_profiles/ or a YAML path (default: local; a resume: the run's own)"
    )
    parser.add_argument("--nodes", type=int, help="number of nodes (overrides the profile)")
    parser.add_argument("--gpus-per-node", type=int, help="tasks per node, one per GPU (overrides the profile)")
    parser.add_argument("--time", type=int, metavar="MINUTES", help="time limit (overrides the profile)")
    parser.add_argument("--partition", help="Slurm partition (overrides the profile)")
    parser.add_argument("--name", help="run directory name under run_root (default: date-time-task-id)")
    parser.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="repeatable; one array job over the product of the values",
    )
    parser.add_argument("--array-parallelism", type=int, help="sweep points running at once (overrides the profile)")
    parser.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a run (its folder, or its name) from its newest checkpoint"
    )
    parser.add_argument(
        "--current-code",
        action="store_true",
        help="with --resume: run this folder's code as it is now, not the run's snapshot (kept in superseded/)",
    )
    parser.add_argument("--dependency", metavar="SPEC", help="sbatch's --dependency, e.g. afterok:12345")
    parser.add_argument(
        "--after", action="append", default=[], metavar="RUN_DIR", help="start once that run's job finished well"
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="repeatable; exported for every task"
    )
    parser.add_argument(
        "--mail", metavar="TYPES", help="mail on these events (e.g. END,FAIL) to the profile's mail_user"
    )
    parser.add_argument(
        "--restart-args",
        metavar="WORDS",
        help="with -- COMMAND: words added to it on a start once their last word's file exists, e.g. "
        "'--resume {RUN_DIR}/checkpoint.pth'",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the sbatch script and submit nothing")
    parser.add_argument("--wait", action="store_true", help="follow rank 0's output and exit with the job's outcome")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="trainer settings, e.g. steps=100 data.root=DIR"
    )
    args = parser.parse_intermixed_args(argv)  # key=value may come before or after flags
    if args.resume or args.after:  # jobs.tracking's imports only then: the dry run stays quick
        from jobs.tracking import by_name

        # A run's name, wherever the default profile or --profile puts runs (a path or a job id stays as it is).
        args.resume = by_name(args.resume, args.profile) if args.resume else args.resume
        args.after = [by_name(run, args.profile) for run in args.after]
    return args

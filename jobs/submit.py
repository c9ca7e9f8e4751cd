"""`python -m jobs.submit`: queue a DDP training job from a cluster profile.

Thin on purpose: parse, build the plan, act, report. No torch import on this path.
"""

import argparse
import shlex
import sys

from jobs.ops.prepare import create_and_submit, dry_run_script, over_ssh, prepare
from jobs.ops.resume import release_claims
from jobs.snapshot import ignored_note
from trainer.errors import UserError, one_line_errors


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        print(f"error: {message}; see python -m jobs.submit --help", file=sys.stderr)
        sys.exit(2)


def split_command(argv: list[str] | None) -> tuple[list[str], list[str]]:
    """Our arguments, and the command after `--` that every task runs instead of the trainer."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    if cut == len(argv) - 1:
        raise UserError("nothing after --; give the command every task runs, e.g. -- python train.py --lr 3e-4")
    return argv[:cut], argv[cut + 1 :]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python -m jobs.submit", description=__doc__.splitlines()[0])
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


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, command = split_command(argv)
    args = parse_args(ours)
    if (code := over_ssh(argv, args, command)) is not None:
        return code
    request = prepare(tuple(argv), args, command)
    # Said once the job is queued (or the script printed): a refusal stays the one line it is.
    note = ignored_note(request.snapshot.workspace, request.snapshot.ignored) if request.snapshot else ""
    if request.code_note and not request.finished:
        print(request.code_note, flush=True)
    if request.finished:
        print(request.finished)
        return 0
    if request.dry_run:
        if note:
            print(note, file=sys.stderr)
        print(dry_run_script(request), end="")
        if request.plan.script is not None:
            print(f"# every task runs: {shlex.join(request.plan.script.commands[0])}")
        return 0
    from jobs.ops import launch  # here, not at the top: the dry run above needs none of it

    try:
        jobs = create_and_submit(request)
    finally:
        release_claims()  # job.json names the job now: a later --resume sees it running
    if note:
        print(note, file=sys.stderr)
    plan = request.plan
    kind = "array job" if len(jobs) > 1 else "job"
    job_id = jobs[0].job_id.split("_")[0] if len(jobs) > 1 else jobs[0].job_id
    print(f"submitted {kind} {job_id} ({len(jobs)} x {plan.tasks} task(s), {plan.executor})")
    print(f"run directory: {request.folder}")
    print(f"rank 0 log:    {launch.rank0_log(jobs[0])}")
    if plan.script is None:  # a script writes TensorBoard only if it does so itself: said at the end, if it did
        print(f"TensorBoard:   tensorboard --logdir {request.folder}")
    if not request.wait:
        return 0
    try:
        return launch.wait_for(jobs, plan, request.folder)
    except KeyboardInterrupt:
        if plan.executor == "debug":  # the job ran in this process: it stopped with it
            print(f"interrupted; continue with python -m jobs.submit --resume {plan.run_dirs[0]}", file=sys.stderr)
        else:
            folder = request.folder
            print(
                f"interrupted: the job keeps running (python -m jobs.status {folder}); "
                f"stop it with python -m jobs.cancel {folder}",
                file=sys.stderr,
            )
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""`python -m jobs.submit`: queue a DDP training job from a cluster profile.

Thin on purpose: parse, build the plan, act, report. No torch import on this path.
"""

import shlex
import sys

from jobs.ops.prepare import create_and_submit, dry_run_script, over_ssh, prepare
from jobs.ops.resume import release_claims
from jobs.ops.submit_line import parse_args, split_command
from jobs.snapshot import ignored_note
from trainer.errors import one_line_errors


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

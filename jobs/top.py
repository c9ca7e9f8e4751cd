"""`python -m jobs.top RUN|NAME|JOB_ID [--once]`: one run live, rank by rank: state, step, step time, data wait,
loss, seconds since progress, memory; above them the job's state, attempt, time left, pace, ETA and goodput.

Live, it redraws about once a second (with Rich, where installed: `pip install 'slurm-ddp[top]'`), and keys act
on the run: s saves now (a checkpoint at the next step boundary; training goes on), r requeues now, c cancels
(after a y), d writes every rank's Python stacks into the run folder (py-spy; else into each rank's log), q leaves. `--once` prints the table a single
time, a line per rank with the rank first, for scripts and tests; --save-now, --requeue-now and --dump-stacks
do what the keys do. While it runs,
rank 0 writes every rank's heartbeat to live.json once a second (trainer.supervise.live); nothing else in the
job changes. For a run on a cluster (submitted over SSH) it runs on the login node over one connection, and
what comes back is read as data. Torch-free.
"""

import argparse
import json
import sys
from typing import Any

from jobs.ops import act, follow, live
from jobs.tracking import by_name, find, run_parser
from trainer.errors import UserError, one_line_errors

KEYS = "s save now  r requeue now  c cancel  d dump stacks  q quit"


def watch(frames: Any) -> int:
    """Redraw each frame in place (Rich, on a terminal), or print them one after another: where Rich is not
    installed, and where the output is not a terminal (a pipe, a file: as `top -b` does)."""
    try:
        from rich.console import Group
        from rich.live import Live
        from rich.table import Table
        from rich.text import Text
    except ImportError:
        Live = None  # noqa: N806
        print("jobs.top: Rich is not installed (pip install 'slurm-ddp[top]'); printing a table each second")
    if Live is None or not sys.stdout.isatty():
        for frame in frames:
            print(live.text(frame) + "\n", flush=True)
        return 0

    def render(frame: dict[str, Any]) -> Any:
        table = Table(*live.COLUMNS, box=None, header_style="bold")
        for row in frame["rows"]:
            table.add_row(*live.cells(row), style="red" if row.get("mark") else None)
        note = Text(frame.get("note") or "", style="bold")
        return Group(Text(live.head_line(frame["head"])), table, note, Text(KEYS, style="dim"))

    with Live(refresh_per_second=4, screen=False) as screen:
        for frame in frames:
            screen.update(render(frame))
    return 0


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = run_parser("jobs.top", __doc__, "a run directory printed by jobs.submit, a run's name, or a job id")
    parser.add_argument("--once", action="store_true", help="print the table once (a line per rank) and exit")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between redraws (default 1)")
    parser.add_argument("--save-now", action="store_true", help="ask for a checkpoint now; the run trains on")
    parser.add_argument("--requeue-now", action="store_true", help="send the requeue signal: save and requeue")
    parser.add_argument(
        "--dump-stacks",
        action="store_true",
        help="every rank's Python stacks into the run folder's stacks/ (py-spy), else into its log",
    )
    parser.add_argument("--stream", action="store_true", help=argparse.SUPPRESS)  # frames as JSON lines, for SSH
    args = parser.parse_args(argv)
    actions = [f for f in ("save_now", "requeue_now", "dump_stacks") if getattr(args, f)]
    if len(actions) > 1:
        raise UserError("give one of --save-now, --requeue-now and --dump-stacks at a time")
    if not 0.2 <= args.every <= 60:
        raise UserError(f"--every {args.every:g} is out of range; give seconds between 0.2 and 60, e.g. --every 1")
    run = by_name(args.target, args.profile)
    if args.once or actions:
        flags = ["--once"] if args.once else [f"--{actions[0].replace('_', '-')}"]
        if (code := follow.elsewhere(run, "jobs.top", *flags)) is not None:  # a run on a cluster: asked there
            return code
        target = find(run)
        print(getattr(act, actions[0])(target) if actions else live.text(live.frame_of(target, live.FRESH_S)))
        return 0
    if args.stream:  # what a laptop's jobs.top reads from the login node
        for frame in live.frames(run, args.every):
            print(json.dumps(frame), flush=True)
        return 0
    try:
        with live.Keyboard() as keyboard:
            return watch(live.frames(run, args.every, keyboard))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())

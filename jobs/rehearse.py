"""`python -m jobs.rehearse [submit's flags] [settings] [-- COMMAND]`: rehearse the job that submit line would
queue: a reference run, then one run per fault, each judged against it. Exit 0 only when every fault is
certified (or survived where nothing can be compared).

Runs on a local profile or a Slurm one; from a laptop (a profile with a login), on the login node."""

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from jobs.ops.rehearse import CHECK_S, COLUMNS, FAULTS, HANG_S, SCRIPT_HANG_S, Plan, profile_copy, rehearse
from jobs.ops.remote_submit import rehearse_there
from jobs.ops.submit_line import parse_args, split_command
from jobs.profiles import load_profile, run_root_of
from jobs.tracking import aligned
from trainer.errors import UserError, one_line_errors

NOT_HERE = ("--resume", "--sweep", "--name", "--wait", "--dry-run", "--current-code", "--after", "--dependency")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        print(f"error: {message}; see python -m jobs.rehearse --help", file=sys.stderr)
        sys.exit(2)


def own_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = Parser(prog="python -m jobs.rehearse", description=__doc__.splitlines()[0], add_help=True)
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"some of {', '.join(FAULTS)} (default: all)")
    parser.add_argument("--steps", type=int, help="the built-in trainer's steps for each run (default: the job's own)")
    parser.add_argument("--compare", metavar="PATH", help="a script's file, relative to its run directory, to compare")
    parser.add_argument(
        "--hang-s", type=float, default=SCRIPT_HANG_S, metavar="S",
        help=f"a script's script_hang_s where no rank is frozen (default {SCRIPT_HANG_S})",
    )  # fmt: skip
    return parser.parse_known_args(argv)


def checked(args: argparse.Namespace, rest: list[str], command: list[str]) -> list[str]:
    """The faults asked for; every refusal one line."""
    faults = list(dict.fromkeys(f.strip() for f in args.faults.split(",") if f.strip()))
    if unknown := [f for f in faults if f not in FAULTS]:
        raise UserError(f"--faults: unknown fault {unknown[0]!r}; choose from {', '.join(FAULTS)}")
    if not faults:
        raise UserError(f"--faults names no fault; choose from {', '.join(FAULTS)}")
    if given := [w for w in rest if w.split("=")[0] in NOT_HERE]:
        flag = given[0].split("=")[0]
        raise UserError(
            f"{flag} is not for a rehearsal, which starts, names and waits for runs of its own; drop {flag}"
        )
    if args.steps is not None and command:
        raise UserError("--steps bounds the built-in trainer's runs, and a script's length is its own; drop --steps")
    if args.steps is not None and args.steps < 3:
        raise UserError(f"--steps {args.steps} leaves no room for a fault and a recovery; pass --steps 3 or more")
    if args.hang_s < 10:
        raise UserError(f"--hang-s {args.hang_s:g} is below script_hang_s's 10 s; pass --hang-s 10 or more")
    if args.compare is not None:
        if not command:
            raise UserError(
                "--compare names a script's file, and the trainer's runs are compared by their weights; drop --compare"
            )
        path = Path(args.compare)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise UserError(f"--compare {args.compare} must be a path inside the run directory, e.g. final.pt")
    return faults


def show(rows: list[list[str]]) -> None:
    """The table: Rich's, as jobs.top draws (its `top` extra), else aligned text."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print("\n".join(aligned([list(COLUMNS), *rows])))
        return
    table = Table(title="rehearsal")
    for column in COLUMNS:
        table.add_column(column, overflow="fold", no_wrap=column in ("fault", "verdict"))
    for row in rows:
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 160).print(table)  # a log keeps whole words


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    ours, command = split_command(sys.argv[1:] if argv is None else argv)
    args, rest = own_args(ours)
    faults = checked(args, rest, command)
    submit = parse_args(rest)  # submit's own refusals, before anything runs
    if given := [flag for flag in NOT_HERE if getattr(submit, flag[2:].replace("-", "_"), None)]:  # --wai too
        raise UserError(f"{given[0]} is not for a rehearsal, which starts, names and waits for runs of its own; "
                        f"drop {given[0]}")  # fmt: skip
    profile = load_profile(submit.profile or "local")
    if profile.executor == "debug":
        raise UserError(
            f"profile {profile.name} runs in one process, and a rehearsal faults processes; rehearse with a local "
            "or a Slurm profile"
        )
    if profile.remote.login:  # from a laptop: the rehearsal runs on the login node, where the records are
        return rehearse_there(argv if argv is not None else sys.argv[1:], profile)
    stamp = time.strftime("rehearse-%Y%m%d-%H%M%S")
    folder = run_root_of(profile) / stamp
    folder.mkdir(parents=True)
    name = submit.profile or "local"
    # A script's runs go one at a time: on nodes the runs share, a fault timed by the clock would find it less
    # far along than the reference's pace says, and a rank waiting for a slow peer's imports looks hung.
    plan = Plan(rest, command, faults, args.steps, args.compare, stamp, name, check_s=CHECK_S[profile.executor],
                together=profile.executor == "slurm" and not command)  # fmt: skip
    if command:  # a script's hang is named by the profile's script_hang_s: the rehearsal's own budgets
        every = profile_copy(name, folder / "script.yaml", script_hang_s=args.hang_s)
        hang = profile_copy(name, folder / "hang.yaml", script_hang_s=HANG_S)
        plan = replace(plan, profile=every, profiles={"reference": every, "stop": hang, "frozen": hang})
    _, verdicts = rehearse(plan, folder, lambda line: print(line, flush=True), script=bool(command))
    show([[str(getattr(v, c)) for c in COLUMNS] for v in verdicts])
    for verdict in verdicts:
        if verdict.fix:
            print(f"{verdict.fault}: {verdict.fix}")
    print(f"certificate: {folder / 'rehearsal.md'} (and rehearsal.json)")
    return 0 if all(v.passes for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())

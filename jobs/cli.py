"""`slurm-ddp COMMAND ...`: the installed command, the same as `python -m jobs.COMMAND ...`, from any folder.

`python -m jobs.submit` cannot start in a folder that holds a `jobs.py` of yours (Python imports yours as
`jobs` before any code of this tool runs), nor `python -m trainer --help-settings` beside a `trainer.py` of
yours (it runs yours); an installed command imports the tool from where it is installed.
"""

import importlib
import sys

from trainer.errors import one_line_errors

COMMANDS = {
    "submit": "queue a run (the trainer, your task or your command after --)",
    "status": "a run's state, restarts, nodes, last step and checkpoint",
    "logs": "a task's output [--rank N] [--follow]",
    "cancel": "stop every task of a run",
    "wait": "follow a run until it ends; exit with its outcome",
    "top": "a running job's ranks, live; save, requeue or dump its stacks",
    "list": "the runs under ./runs, newest first",
    "fetch": "bring a cluster run's records and TensorBoard events here",
    "check": "a one-minute preflight job with a profile's settings",
    "rehearse": "a reference run, then one per fault (preempted, killed, frozen), each judged against it",
    "picture": "the curves and the newest image grid of a run, as a PNG",
    "settings": "every trainer setting, its default and meaning [task=NAME] (python -m trainer --help-settings)",
}


def usage() -> str:
    lines = ["usage: slurm-ddp COMMAND [ARGS...]   (slurm-ddp COMMAND --help for its flags)", ""]
    return "\n".join([*lines, *(f"  {name:<8} {what}" for name, what in COMMANDS.items())])


@one_line_errors  # its own output too: `slurm-ddp --help | head -1` ends quietly
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(
            f"error: unknown command {name!r}; choose one of {', '.join(COMMANDS)} (slurm-ddp --help)", file=sys.stderr
        )
        return 2
    sys.argv = [f"slurm-ddp {name}", *rest]
    if name == "settings":
        if {"-h", "--help"} & set(rest):
            print(f"usage: slurm-ddp settings [task=NAME]   {COMMANDS[name]}")
            return 0
        from trainer.entry.command import HELP_FLAG
        from trainer.entry.command import main as trainer

        return int(trainer([*rest, HELP_FLAG]) or 0)
    return int(importlib.import_module(f"jobs.{name}").main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())

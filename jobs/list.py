"""`python -m jobs.list [--root DIR]`: the runs under ./runs (or DIR), local and on clusters, newest first: name,
profile, job, state, step, goodput, last validation metrics. Slurm is asked once for all the runs here; runs submitted
over SSH are asked about on their login node, one connection per login node and set of ssh options. A run
whose records are damaged is one row saying so; it never hides the others."""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from jobs.ops.listing import COLUMNS, all_rows, far_rows
from jobs.remote import runs
from jobs.tracking import aligned
from trainer.errors import one_line_errors, printable


def table(rows: list[dict[str, Any]]) -> str:
    cells = [COLUMNS, *[tuple(printable(str(r.get(c, "")), escaped=True) for c in COLUMNS) for r in rows]]
    return "\n".join(aligned(cells))


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.list", description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", help="a folder of runs (repeatable; default: ./runs)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # rows of the run dirs given, for SSH
    parser.add_argument("dirs", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.json:  # what a laptop's jobs.list asks of its login node: these runs' rows, as JSON, in order
        print(json.dumps(far_rows([Path(d).expanduser() for d in args.dirs])))
        return 0
    rows = all_rows([Path(root) for root in args.root or [runs.LOCAL_ROOT]])
    print(table(rows) if rows else f"no runs under {', '.join(args.root or [runs.LOCAL_ROOT])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

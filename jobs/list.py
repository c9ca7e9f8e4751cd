"""`python -m jobs.list [--root DIR]`: the runs under ./runs (or DIR), local and on clusters, newest first: name,
profile, job, state, step, last validation metrics. Runs submitted over SSH are asked about on their login
node, one connection per login node."""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from jobs.remote import runs
from jobs.remote.ssh import Connection
from jobs.status import point_progress
from jobs.tracking import find, info, point_dirs
from trainer.errors import UserError, one_line_errors
from trainer.run.rundir import RunDir

COLUMNS = ("name", "profile", "job", "state", "step", "validation")


def row(run_dir: Path, name: str) -> dict[str, Any]:
    """One run's line, from its job.json, the scheduler (or the local controller) and its progress files."""
    record = json.loads(RunDir(run_dir).job.read_text())
    profile = record.get("profile")
    target = find(str(run_dir))
    try:
        state = info(target).state
    except UserError:  # a Slurm job seen from a machine without Slurm, or one Slurm forgot
        state = "?"
    step, validation = point_progress(run_dir)
    return {
        "name": name,
        "profile": profile.get("name", "") if isinstance(profile, dict) else record.get("executor", ""),
        "job": target.job_id,
        "state": state,
        "step": "-" if step is None else str(step),
        "validation": validation,
        "time": RunDir(run_dir).job.stat().st_mtime,
    }


def local_rows(root: Path) -> tuple[list[dict[str, Any]], dict[str, list[tuple[str, runs.RemoteRun]]]]:
    """The rows of the runs under `root`, and the remote runs there, by login node."""
    rows, remote = [], defaultdict(list)
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if (run := runs.load(str(folder))) is not None:
            remote[run.login.login].append((folder.name, run))
        elif RunDir(folder).job.is_file():
            rows.append(row(folder, folder.name))
        else:
            rows += [row(point, f"{folder.name}/{point.name}") for point in point_dirs(folder)]
    return rows, remote


def remote_rows(found: list[tuple[str, runs.RemoteRun]]) -> list[dict[str, Any]]:
    """The rows of one login node's runs, from one jobs.list there; an unreachable node gives `?` rows."""
    first = found[0][1]
    args = ["--json", *[run.run_dir for _, run in found]]
    try:
        out = Connection(first.login).call("run", first.cwd, "jobs.list", *args, timeout=120)
        rows = json.loads(out)
    except (UserError, ValueError) as exc:
        print(f"warning: {first.login.login}: {exc}", file=sys.stderr)
        rows = [{"state": "?"} for _ in found]
    return [
        {**dict.fromkeys(COLUMNS, "-"), "time": 0.0, **r, "name": name, "profile": run.profile, "job": run.job_id}
        for (name, run), r in zip(found, rows, strict=True)
    ]


def table(rows: list[dict[str, Any]]) -> str:
    cells = [COLUMNS, *[tuple(str(r.get(c, "")) for c in COLUMNS) for r in rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS) - 1)]
    return "\n".join(
        ("  ".join(v.ljust(w) for v, w in zip(c[:-1], widths, strict=True)) + "  " + c[-1]).rstrip() for c in cells
    )


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.list", description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", help="a folder of runs (repeatable; default: ./runs)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # rows of the run dirs given, for SSH
    parser.add_argument("dirs", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.json:  # what a laptop's jobs.list asks of its login node: these runs' rows, as JSON
        print(json.dumps([row(Path(d).expanduser(), Path(d).name) for d in args.dirs]))
        return 0
    rows: list[dict[str, Any]] = []
    remote: dict[str, list[tuple[str, runs.RemoteRun]]] = defaultdict(list)
    for root in args.root or [runs.LOCAL_ROOT]:
        found, far = local_rows(Path(root))
        rows += found
        for login, items in far.items():
            remote[login] += items
    for items in remote.values():
        rows += remote_rows(items)
    rows.sort(key=lambda r: r.get("time", 0.0), reverse=True)
    print(table(rows) if rows else f"no runs under {', '.join(args.root or [runs.LOCAL_ROOT])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

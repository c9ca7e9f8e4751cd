"""The rows of jobs.list: every run under a folder of runs, local and on clusters (asked on their login node, one
connection per login node and set of ssh options); a run whose records are damaged is one row saying so."""

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from jobs.ops.state import point_progress
from jobs.remote import runs
from jobs.remote.ssh import Connection
from jobs.tracking import Target, find, known_info, point_dirs, slurm_infos
from trainer.errors import UserError
from trainer.run import ledger
from trainer.run.rundir import RunDir

COLUMNS = ("name", "profile", "job", "state", "step", "goodput", "validation")
DAMAGE = (UserError, OSError, ValueError, KeyError, TypeError, AttributeError)  # what a broken record raises
Group = tuple[str, tuple[str, ...], str]  # a login node as reached: login, ssh options, python


def damaged(name: str, exc: BaseException, folder: Path | None = None) -> dict[str, Any]:
    """The row of a run whose records cannot be read: what is wrong, in the validation column."""
    try:
        time = folder.stat().st_mtime if folder else 0.0
    except OSError:
        time = 0.0
    reason = str(exc).split("; ")[0]
    return {**dict.fromkeys(COLUMNS, "-"), "name": name, "state": "damaged", "validation": reason, "time": time}


def rows_of(found: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    """The rows of these run directories, in their order; Slurm asked once for all of them."""
    targets: list[Target | BaseException] = []
    for _, path in found:
        try:
            targets.append(find(str(path)))
        except DAMAGE as exc:
            targets.append(exc)
    states = states_of([t for t in targets if isinstance(t, Target)])
    rows = []
    for (name, path), target in zip(found, targets, strict=True):
        if isinstance(target, BaseException):
            rows.append(damaged(name, target, path))
            continue
        try:
            rows.append(row(path, name, target, states.get(target, "?")))
        except DAMAGE as exc:
            rows.append(damaged(name, exc, path))
    return rows


def states_of(targets: list[Target]) -> dict[Target, str]:
    """Each run's state (keyed by the run, not its job id: a local job's id is its controller's PID, which the
    machine gives again, and may be a Slurm job's id too): the Slurm ones from one query, a forgotten one from its
    run directory."""
    try:
        slurm = slurm_infos([t.job_id for t in targets if t.executor == "slurm"])
    except UserError:  # no Slurm on this machine
        slurm = {}
    states = {}
    for target in targets:
        try:
            if (found := known_info(target, slurm)) is not None:
                states[target] = found.state
        except DAMAGE:
            states[target] = "?"
    return states


def row(run_dir: Path, name: str, target: Target, state: str) -> dict[str, Any]:
    """One run's line, from its job.json, its state and its progress files."""
    record = json.loads(RunDir(run_dir).job.read_text())
    profile = record.get("profile")
    step, validation = point_progress(run_dir)
    parts = ledger.read(run_dir, state)
    return {
        "name": name,
        "profile": profile.get("name", "") if isinstance(profile, dict) else record.get("executor", ""),
        "job": target.job_id,
        "state": state,
        "step": "-" if step is None else str(step),
        "goodput": ledger.goodput_text(parts),  # training's share of the wall time so far
        "validation": validation,
        "time": RunDir(run_dir).job.stat().st_mtime,
    }


def local_rows(root: Path, remote: dict[Group, list[tuple[str, runs.RemoteRun]]]) -> list[dict[str, Any]]:
    """The rows of the runs under `root`; its remote runs go to `remote`, by login node as reached."""
    rows, found = [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        try:
            run = runs.load(str(folder))
        except DAMAGE as exc:
            rows.append(damaged(folder.name, exc, folder))
            continue
        if run is not None:
            login = run.login
            remote[(login.login, tuple(login.ssh_options), login.python)].append((folder.name, run))
        elif RunDir(folder).job.exists():  # a FIFO or a folder in its place: a damaged run's row, not hidden
            found.append((folder.name, folder))
        else:
            found += [(f"{folder.name}/{point.name}", point) for point in point_dirs(folder)]
    return rows + rows_of(found)


def remote_rows(found: list[tuple[str, runs.RemoteRun]]) -> list[dict[str, Any]]:
    """The rows of one login node's runs, from one jobs.list there (run in the newest run's snapshot that is
    still there: an older snapshot's code may not read a newer run's files); an unreachable node gives `?` rows. Its reply is data: cells are text, shaped as asked."""
    first = found[0][1]
    args = ["--json", *[run.run_dir for _, run in found]]
    reply: Any = None
    newest = sorted(found, key=lambda f: int(f[1].job_id) if f[1].job_id.isdigit() else 0, reverse=True)
    for cwd in dict.fromkeys(run.cwd for _, run in newest):  # Slurm's job ids grow: the newest run's first
        try:
            reply = json.loads(Connection(first.login).call("run", cwd, "jobs.list", *args, timeout=120))
            break
        except UserError as exc:
            if "does not exist on the cluster" in str(exc):
                continue  # that run's snapshot is gone: another's serves
            print(f"warning: {first.login.login}: {exc}", file=sys.stderr)
            break
        except ValueError as exc:
            print(f"warning: {first.login.login}: its answer is not a list of runs ({exc})", file=sys.stderr)
            break
    ok = isinstance(reply, list) and len(reply) == len(found) and all(isinstance(r, dict) for r in reply)
    rows = reply if ok else [{"state": "?"} for _ in found]
    out = []
    for (name, run), r in zip(found, rows, strict=True):
        cells = {c: str(r.get(c, "-")) for c in ("state", "step", "validation")}
        time = r.get("time") if isinstance(r.get("time"), int | float) else 0.0
        out.append({**cells, "time": time, "name": name, "profile": run.profile, "job": run.job_id})
    return out


def far_rows(folders: list[Path]) -> list[dict[str, Any]]:
    """The rows a laptop asked for, in order, from one query to Slurm: a run's, or one for a whole sweep (its
    points' states together)."""
    wanted: list[tuple[str, Path]] = []
    shape: list[tuple[str, int]] = []  # ("gone", 0), ("run", 1) or ("sweep", its points)
    for folder in folders:
        if not folder.is_dir():
            shape.append(("gone", 0))
        elif RunDir(folder).job.is_file() or not (points := point_dirs(folder)):
            shape.append(("run", 1))
            wanted.append((folder.name, folder))
        else:
            shape.append(("sweep", len(points)))
            wanted += [(p.name, p) for p in points]
    rows, out, at = rows_of(wanted), [], 0
    for kind, count in shape:
        mine, at = rows[at : at + count], at + count
        if kind == "gone":
            out.append({"state": "gone", "validation": "no run directory"})
        elif kind == "run":
            out.append(mine[0])
        else:
            times = [r["time"] for r in mine if isinstance(r.get("time"), int | float)]
            state = ",".join(sorted({r["state"] for r in mine}))
            out.append(
                {"state": state, "step": "-", "validation": f"sweep of {count} points", "time": max(times, default=0.0)}
            )
    return out


def all_rows(roots: list[Path]) -> list[dict[str, Any]]:
    """The rows of every run under `roots`, newest first: those on a cluster asked of its login node, once."""
    rows: list[dict[str, Any]] = []
    remote: dict[Group, list[tuple[str, runs.RemoteRun]]] = defaultdict(list)
    for root in roots:
        rows += local_rows(root, remote)
    for items in remote.values():
        rows += remote_rows(items)
    rows.sort(key=lambda r: r.get("time", 0.0), reverse=True)
    return rows

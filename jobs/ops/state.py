"""A run's state as jobs.status, jobs.list and jobs.submit say it: its job's state, restarts, nodes, last step and
checkpoint, the code it runs; a sweep's points in one table."""

from collections import Counter
from pathlib import Path

from jobs.tracking import (
    TERMINAL,
    JobInfo,
    Target,
    aligned,
    down_nodes,
    failed_tasks,
    failure_line,
    full_disk_line,
    info,
    infos,
    log_text,
    lost_nodes,
    progress,
    requeue_line,
)
from trainer.run import ledger
from trainer.run.atomic import json_or_none
from trainer.run.provenance import read_submit
from trainer.run.rundir import RunDir


def code_line(run_dir: Path) -> str:
    """The commit submitted, and whether the tree held changes beyond it (they are in the snapshot)."""
    submitted = read_submit(run_dir)
    git, snapshot = submitted.get("git") or {}, submitted.get("snapshot")
    where = "snapshot in code/" if snapshot else "no snapshot: the code on disk"
    if not isinstance(git, dict) or not git.get("commit"):
        return f"not a git tree ({where})" if submitted else "-"
    state = "dirty: uncommitted changes, see provenance/git.diff" if git.get("dirty") else "clean"
    return f"{str(git['commit'])[:12]} on {git.get('branch') or '?'} ({state}; {where})"


def restarts_line(target: Target, job: JobInfo) -> str:
    """The run's restarts as its attempts.json counts them, as summary.json does (every start after the first:
    Slurm's requeues, restarts in the allocation, --resume), with why the starts before ended; one more while a
    stopped run waits to start again. Slurm's own count (this job id's requeues) where the run keeps none."""
    attempts = json_or_none(RunDir(target.run_dir).attempts) if target.run_dir else None
    if not isinstance(attempts, list) or not attempts or not all(isinstance(a, dict) for a in attempts):
        return f"restarts: {job.restarts}"
    stops = [a["stop"].get("reason") if isinstance(a.get("stop"), dict) else None for a in attempts]
    count = len(attempts) - 1 + (stops[-1] is not None and stops[-1] != "finished" and job.state not in TERMINAL)
    why = Counter(str(reason or "unrecorded") for reason in stops[:count])
    return f"restarts: {count}" + (f" ({', '.join(f'{n} {r}' for r, n in why.most_common())})" if count else "")


def report(target: Target) -> str:
    job = info(target)
    state = f"{job.state} ({job.note})" if job.note else job.state
    if job.reason and job.state in ("PENDING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED"):
        state += f" (Slurm's reason: {job.reason})"
    lines = [f"job {target.job_id}: {state}", restarts_line(target, job), f"nodes: {job.nodes or '-'}"]
    requeued = None  # asked of accounting whatever Slurm's Restarts says: a node failure's requeue left it 0
    if target.executor == "slurm" and job.state not in ("COMPLETED", "CANCELLED"):
        requeued = requeue_line(target.job_id, log_text(target.log0, limit=None), job.state)
        lines += [requeued[0]] if requeued else []
    if target.run_dir is not None:
        lines.append(f"run directory: {target.run_dir}")
        if not RunDir(target.run_dir).command.is_file():  # a script's steps and checkpoints are its own
            step, ckpt = progress(target.run_dir)
            lines += [f"last step: {step if step is not None else '-'}", f"last checkpoint: {ckpt or '-'}"]
        lines.append(f"code: {code_line(target.run_dir)}")
        if parts := ledger.read(target.run_dir, job.state):
            lines.append(f"goodput: {ledger.line(parts)}")
    if job.state in ("CANCELLED", "COMPLETED"):  # the ranks a cancel stopped, an earlier attempt's failure
        return "\n".join(lines)
    if job.state == "NODE_FAIL":  # the ranks on the lost node wrote nothing; the others only saw it go
        return "\n".join([*lines, f"error: {node_failure(target, job)}"])
    if requeued and requeued[1] == "NODE_FAIL" and job.state != "RUNNING":  # the same, until the next start
        return "\n".join(lines)
    if error := failure_line(target) or (job.state == "FAILED" and target.run_dir and full_disk_line(target.run_dir)):
        lines.append(f"error: {error}")
    if job.state not in ("RUNNING", "COMPLETED", "PENDING"):
        lines += [f"failed task: {line}" for line in failed_tasks(target)]
    return "\n".join(lines)


def node_failure(target: Target, job: JobInfo) -> str:
    """A job Slurm ended NODE_FAIL: which node it lost (srun's line in rank 0's log, else the job's nodes Slurm
    holds down now), and that Slurm did not requeue it."""
    down = ", ".join(f"{node} is down ({why})" for node, why in down_nodes(job.nodes))
    lost = lost_nodes(log_text(target.log0, limit=None)) or down
    said = f"a node of the job failed (Slurm: NODE_FAIL, nodes {job.nodes or '-'})" + (f": {lost}" if lost else "")
    return f"{said}; Slurm ended the job without requeueing it"


def sweep_table(folder: Path, targets: list[tuple[str, Target]]) -> str:
    """One line per point (state, step, last validation metrics) from one Slurm query for all of them."""
    states = infos([t for _, t in targets])
    rows = [("point", "job", "state", "step", "goodput", "validation")]
    errors, counts, ledgers = [], Counter(i.state for i in states), []
    for (name, target), job in zip(targets, states, strict=True):
        step, val = point_progress(target.run_dir)
        parts = ledger.read(target.run_dir, job.state) if target.run_dir else None
        ledgers += [parts] if parts else []
        good = ledger.goodput_text(parts)
        rows.append((name, target.job_id, job.state, str(step) if step is not None else "-", good, val))
        if job.state not in ("RUNNING", "COMPLETED", "PENDING") and (line := failure_line(target)):
            errors.append(f"error {name}: {line}")
    header = f"sweep {folder}: {len(targets)} points; " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    total = [f"goodput, all points: {ledger.line(ledger.total(ledgers))}"] if ledgers else []
    return "\n".join([header, *aligned(rows), *total, *errors])  # the rows stay below the header


def point_progress(run_dir: Path | None) -> tuple[int | None, str]:
    """A point's last step and last validation metrics, from summary.json or progress.json."""
    if run_dir is None:
        return None, ""
    files = RunDir(run_dir)
    if (record := files.finished_summary()) is not None:  # not the live one
        path, step_key, val_key = files.summary, "final_step", "val_metrics"
    elif files.progress.exists():
        path, step_key, val_key, record = files.progress, "step", "val", json_or_none(files.progress)
    else:
        return None, ""
    if not isinstance(record, dict) or not isinstance(record.get(val_key) or {}, dict):
        return None, f"({path.name} unreadable)"
    val = record.get(val_key) or {}
    text = " ".join(f"{k}={v:.4g}" for k, v in val.items() if isinstance(v, int | float))
    step = record.get(step_key)
    return step if isinstance(step, int) else None, text

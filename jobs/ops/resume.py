"""A --resume of jobs.submit: the run claimed while it is checked, what it may not change (its task, the
model's shapes, its number of processes), a run that still runs refused; the code it runs, and with
--current-code this folder's code put in place of the run's snapshot (kept in superseded/)."""

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from jobs.profiles import Profile
from jobs.snapshot import (
    Snapshot,
    copied_names,
    importable,
    manifest,
    refresh_tool,
    tool_dir,
)
from jobs.snapshot import copy as copy_snapshot
from trainer.config import TrainConfig, config_dict, flat, section, tasks
from trainer.errors import UserError
from trainer.run.atomic import read_json, try_lock
from trainer.run.checkpoint_names import list_checkpoints
from trainer.run.rundir import RunDir


def code_note(folder: Path, code_dir: Path | None, snapshot: Snapshot | None) -> str:
    """Which code a --resume runs, in one line."""
    if code_dir is None:
        return "code: the code on disk as the tasks start (the run has no snapshot)"
    if snapshot is not None:
        git = snapshot.git
        what = (
            f"commit {str(git['commit'])[:12]}{' with uncommitted changes' if git.get('dirty') else ''}"
            if git
            else "not a git tree"
        )
        return f"code: this folder's as it is now ({what}); the run's earlier snapshot is kept in superseded/"
    from jobs.ops.state import code_line

    return (
        f"code: the run's own snapshot in {code_dir} ({code_line(folder)}); --current-code runs this folder's instead"
    )


def check_own_code(folder: Path, code_dir: Path) -> None:
    """--current-code moves the run's code/ (and what the run wrote there) within the run folder, which is data:
    refused where job.json names a code folder that is not the run's (or its sweep's), or where one of the
    paths it moves through is a link (it would move, or write, whatever lies at the other end)."""
    fix = "or resume without --current-code (the run's own snapshot)"
    if code_dir.name != "code" or code_dir.parent.resolve() not in (folder, folder.parent):
        raise UserError(
            f"--current-code: {RunDir(folder).job} names {code_dir} as the run's code, not its code/ folder; "
            f'put "code": "{RunDir(folder).code}" back in it, {fix}'
        )
    for path in (code_dir, tool_dir(code_dir), code_dir.parent / "superseded", manifest(code_dir).parent):
        if path.is_symlink():
            raise UserError(
                f"--current-code moves files only within the run folder, and {path} is a link (to "
                f"{os.readlink(path)}); put the folder itself there, {fix}"
            )


def replace_code(snapshot: Snapshot, code_dir: Path) -> None:
    """--current-code, once check_own_code let it: the run's snapshot set aside, `snapshot` copied in its place,
    and what the run wrote into the old code/ moved into the new one; where the old snapshot's list of files is
    missing or damaged, which files the run wrote is not known: none is moved, and a line says where they are."""
    copied, problem = copied_names(code_dir)  # read before the new snapshot's list replaces it
    old = supersede(code_dir)
    copy_snapshot(snapshot, code_dir)
    if copied is None:
        print(f"warning: {problem}: what the run wrote into code/ stays in {old}", file=sys.stderr)
    else:
        carry_outputs(old, code_dir, copied)


def keep_tool_current(code_dir: Path) -> None:
    """A plain --resume: the run's tool/ replaced by this version's where it differs (refresh_tool), the old one
    kept under superseded/DATE-TIME/; your code/ stays as the snapshot holds it."""
    superseded = code_dir.parent / "superseded"
    if superseded.is_symlink():
        raise UserError(
            f"{superseded} is a link (to {os.readlink(superseded)}), and this resume sets the run's tool/ from "
            "another version aside there; put the folder itself there, or move the link away"
        )
    aside = superseded / time.strftime("%Y%m%d-%H%M%S")
    if refresh_tool(code_dir, aside):
        print(f"note: the run's tool/ was another version's; it is kept in {aside}", file=sys.stderr)


def supersede(code_dir: Path) -> Path:
    """Set a run's snapshot (code/ and tool/) aside under superseded/DATE-TIME/, for a --current-code resume;
    returns where its code/ went."""
    aside = code_dir.parent / "superseded" / time.strftime("%Y%m%d-%H%M%S")
    aside.mkdir(parents=True)
    for folder in (code_dir, tool_dir(code_dir)):
        if folder.exists():
            folder.rename(aside / folder.name)
    return aside / code_dir.name


def carry_outputs(old: Path, new: Path, copied: set[str]) -> None:
    """What the run wrote into its old code/ (a script's relative checkpoints, logs, TensorBoard's runs/: every
    file the old snapshot was not made of, `copied`) moves into the new one, where the resumed command looks
    for it. Never a module or package, whatever the list says: the code that runs is the new snapshot's alone
    (a list that left one out would bring back a module the project deleted). A name the new code already
    uses stays in superseded/."""
    for root, dirs, files in os.walk(old):  # a link to a folder is moved as the link, never walked into
        here = Path(root)
        for entry in [*files, *(d for d in dirs if (here / d).is_symlink())]:
            name = (here / entry).relative_to(old).as_posix()
            if name in copied or importable(here / entry) or os.path.lexists(new / name):
                continue
            with contextlib.suppress(OSError):  # a file where the new code has a folder, or the reverse
                (new / name).parent.mkdir(parents=True, exist_ok=True)
                (here / entry).rename(new / name)


def valid_record(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("code", ""), str)


_claims: list[Any] = []  # the open lock files of this process's --resume (see claim_resume)


def claim_resume(run_dir: Path) -> None:
    """A --resume claims the run for the time from its checks to job.json naming its job, as a new run claims
    its folder: of two at the same moment, the second is refused and changes nothing (flock: the claim ends
    with the process, however it ends)."""
    handle = try_lock(RunDir(run_dir).resume_lock)  # held open until the job is recorded
    if handle is None:
        raise UserError(
            f"another --resume of {run_dir} is being submitted right now; check python -m jobs.status {run_dir}"
        )
    _claims.append(handle)


def release_claims() -> None:
    while _claims:
        _claims.pop().close()


def refuse_if_running(run_dir: Path) -> None:
    if not RunDir(run_dir).job.exists():
        return
    from jobs.tracking import TERMINAL, find, info, run_processes

    target = find(str(run_dir))
    try:
        state = info(target).state
    except UserError:  # Slurm knows the job no more: it is not running
        state = "COMPLETED"
    if state not in TERMINAL:
        raise UserError(
            f"{run_dir} is still running as job {target.job_id} ({state}); wait for it to end, or stop it "
            f"with python -m jobs.cancel {run_dir}"
        )
    if target.executor != "slurm" and (alive := run_processes(run_dir, target.log_dir)):
        # Its controller is gone (killed), but a rank of it still runs here: two writers in one run directory.
        raise UserError(
            f"{run_dir} still has a process of its last job running here (pid {alive[0]}); let it end or stop it "
            f"(kill {' '.join(map(str, alive))}), then resume"
        )


def refuse_task_change(base: dict[str, Any], overrides: list[str]) -> None:
    """A resume keeps its task: said first, before the old task's settings make another task's message."""
    old = str(base.get("task", ""))
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "task" and tasks.canonical(value) != tasks.canonical(old):
            raise cannot_change("task", old, value)


def cannot_change(key: str, old: object, new: object) -> UserError:
    return UserError(
        f"--resume cannot change {key} ({old} -> {new}): the checkpoints hold the old model; drop {key}=..., or "
        "start a new run without --resume"
    )


def locked_on_resume(key: str, task: str) -> bool:
    """Settings the checkpoints' shapes depend on (the task's own among them): a resume cannot change them."""
    return key in ("task", "data.image_size") or key.startswith(f"{task}.")


def check_resume(run_dir: Path, old: TrainConfig, new: TrainConfig, profile: Profile) -> str:
    """Refuse a resume that cannot work; a line saying so when the run has nothing left to do, else ""."""
    before, after = flat(config_dict(old)), flat(config_dict(new))
    for key in before:
        if locked_on_resume(key, section(old.task)) and before[key] != after.get(key):
            raise cannot_change(key, before[key], after[key])
    refuse_if_running(run_dir)
    final_step = (RunDir(run_dir).finished_summary() or {}).get("final_step", 0)
    if final_step >= new.steps:
        return f"{run_dir} already finished at step {final_step} (steps={new.steps}); to train on, pass steps=N above {final_step}"
    files = RunDir(run_dir)
    if files.job.is_file() and list_checkpoints(files.checkpoints):  # none: it starts afresh, in any shape
        record = read_json(files.job, f"move it aside and pass --profile to resume {run_dir}", valid_record)
        if why := layout_change(record, profile, old.batch_size):
            raise UserError(why)
    return ""


def layout_change(record: dict[str, Any], profile: Profile, batch_size: int) -> str | None:
    """Why `profile` cannot go on with the run whose job.json is `record`: each step keeps the run's global
    batch (its first job's processes x batch_size), which the new number of processes must divide (fewer
    accumulate micro-batches; trainer.sampler). None: it can, or job.json does not say (an old run)."""
    res, first = profile.resources, ([*record.get("history", []), record] or [record])[0]
    ran, now = first.get("tasks") if isinstance(first, dict) else None, res.nodes * res.tasks_per_node
    if not isinstance(ran, int) or (ran * batch_size) % now == 0:
        return None
    works = ", ".join(str(n) for n in range(1, ran * batch_size + 1) if ran * batch_size % n == 0)  # as trainer.sampler
    return (
        f"--resume on {layout(res.nodes, res.gpus_per_node)} ({now} processes) cannot share the run's global batch "
        f"of {ran * batch_size} ({ran} processes x batch_size {batch_size}); resume on one of {works} processes "
        "(--nodes x --gpus-per-node)"
    )


def layout(nodes: int, gpus_per_node: int) -> str:
    return f"{nodes} node{'s' * (nodes != 1)} x {gpus_per_node} GPU{'s' * (gpus_per_node != 1)}"

"""Run directories: their names, the run root, a run's folder and config file (torch-free: the submitter uses it)."""

import os
import re
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import yaml

from trainer.errors import UserError
from trainer.run.atomic import json_or_none
from trainer.run.rundir import RunDir

# One rule for every name that becomes a folder (and reaches the batch script): no separators, no "..".
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise UserError(
            f"--name {name!r} is not a plain folder name; use letters, digits, '.', '_' and '-' "
            "(at most 128, starting with a letter or digit)"
        )
    if is_job_id(name):  # every command that takes a run takes a job id too: this name would never be found
        raise UserError(f"--name {name!r} reads as a job id (digits and _ only); put a letter in it, e.g. run-{name}")
    return name


def is_job_id(text: str) -> bool:
    """A Slurm job id (12345), an array task's (12345_7), or a local job's (its controller's PID)."""
    return text.replace("_", "").isdigit()


def point_name(index: int, overrides: list[str]) -> str:
    """A sweep point's folder: its index and values, cut down to what check_name accepts."""
    values = "-".join(item.split("=", 1)[1] for item in overrides)
    return f"{index}-{re.sub(r'[^A-Za-z0-9._-]+', '_', values)}"[:128]


# The Cache Directory Tagging Specification (https://bford.info/cachedir/): tar --exclude-caches, borg and
# restic skip a folder holding this file. Every run root gets one, so that no code snapshot copies runs.
CACHEDIR_TAG = "CACHEDIR.TAG"
CACHEDIR_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"


def check_run_root(run_root: Path) -> None:
    """Refuse a run_root that cannot be made or written, writing nothing: a refused submit leaves no trace, so
    the run root appears with its first run (make_run_root)."""
    existing = next(p for p in (run_root, *run_root.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        _unwritable(run_root, "Not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        _unwritable(run_root, "Permission denied")


def make_run_root(run_root: Path) -> None:
    """Create run_root as a run is created in it, tagged as output (CACHEDIR.TAG), so that a snapshot of a folder
    holding it leaves it out."""
    try:
        run_root.mkdir(parents=True, exist_ok=True)
        if not (run_root / CACHEDIR_TAG).exists():
            text = f"{CACHEDIR_SIGNATURE}\n# slurm-ddp run root: runs, not code; code snapshots leave it out\n"
            (run_root / CACHEDIR_TAG).write_text(text)
        probe = tempfile.TemporaryFile(dir=run_root)
        probe.close()
    except OSError as exc:
        _unwritable(run_root, exc.strerror)


def _unwritable(run_root: Path, why: str | None) -> NoReturn:
    raise UserError(
        f"run_root {run_root} cannot be written ({why}); set run_root in the profile to a folder you can write"
    ) from None


def make_dirs(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{folder} cannot be created ({exc.strerror}); choose a folder you can write") from None


def claim(folder: Path) -> None:
    """Create a run (or sweep) folder, or refuse: mkdir is atomic, so of two racing submits one wins."""
    try:
        folder.mkdir()
    except FileExistsError:
        raise UserError(f"{folder} already exists; choose another --name or --resume it") from None
    except OSError as exc:
        raise UserError(f"{folder} cannot be created ({exc.strerror}); choose another --name or run_root") from None


def new_run_dir(run_root: Path, task: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return (run_root / f"{stamp}-{re.sub(r'[^A-Za-z0-9._-]+', '_', task)}-{os.urandom(2).hex()}").resolve()


def not_a_run(folder: Path) -> str | None:
    """Why `folder` is no run to resume or follow, naming what a run of its kind holds and it lacks; None when
    it is one. A trainer run holds config.yaml, a `-- COMMAND` run command.json; provenance/submit.json (where
    a run was submitted from) tells which kind lost its file."""
    files = RunDir(folder)
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        return f"{folder} {what}; pass a run directory printed by jobs.submit, or a run's name"
    if files.config.is_file() or files.command.is_file():
        return None
    submitted = json_or_none(files.provenance / "submit.json")
    argv = submitted.get("argv") if isinstance(submitted, dict) else None
    if not isinstance(argv, list):
        return (
            f"{folder} is not a run directory: it holds neither config.yaml (a trainer run's) nor command.json "
            "(a -- COMMAND run's); pass the folder printed at submit time, or a run's name"
        )
    if "--sweep" in argv or any(str(a).startswith("--sweep=") for a in argv):
        return f"{folder} is a sweep: a command takes one of its points, the run directories in it"
    if "--" in argv:
        return f"{folder} is a -- COMMAND run without its command.json; submit the command again as a new run"
    return (
        f"{folder} is a trainer run without its config.yaml; write the run's settings back into it (no defaults "
        "are assumed), or submit a new run"
    )


def load_config_file(run_dir: Path) -> dict[str, object]:
    path = RunDir(run_dir).config
    if not path.is_file():
        raise UserError(not_a_run(run_dir) or f"{run_dir} holds no {path.name}; pass the folder printed at submit time")
    fix = "write the run's settings back into it (no defaults are assumed), or submit a new run without --resume"
    try:
        config = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not valid YAML ({str(exc).splitlines()[0]}); {fix}") from None
    # An empty file loads as None: resuming it would quietly train the defaults on the sample data.
    if not config:
        raise UserError(f"{path} is empty; {fix}")
    if not isinstance(config, dict):
        raise UserError(f"{path} holds a {type(config).__name__}, not the run's settings; {fix}")
    return config

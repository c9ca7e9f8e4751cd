"""Run directories and the data a run points at (torch-free: the submitter uses it)."""

import dataclasses
import os
import re
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import yaml

import trainer.tasks
from trainer.config import TrainConfig, config_dict
from trainer.errors import UserError
from trainer.run.atomic import json_or_none, write_text
from trainer.run.rundir import RunDir


def resolve_data(config: TrainConfig, sample_root: Path, world_size: int) -> TrainConfig:
    """Point an empty data.root at the built-in sample data (made on first use); the task checks the data
    and its settings for `world_size` processes."""
    task = trainer.tasks.get(config.task)
    root: Path | None = None
    if config.data.root:
        root = Path(config.data.root).expanduser().resolve()
    elif config.task not in trainer.tasks.available():
        if getattr(task, "checks_data", True):
            raise UserError(f"task {config.task} has no built-in sample data; set data.root=PATH")
        # A task of yours without check(): its dataset() may make its data in code; data.root stays empty.
    else:
        from trainer.data.sample import ensure_sample_data  # Pillow: only when the sample data is used

        try:
            root = ensure_sample_data(sample_root).resolve() / config.task
        except OSError as exc:
            raise UserError(
                f"the sample data cannot be written to {sample_root} ({exc.strerror}); set data.root=PATH or a "
                "writable run_root"
            ) from None
        if not root.is_dir():
            raise UserError(f"task {config.task} has no built-in sample data; set data.root=PATH")
    if root is not None:
        config = dataclasses.replace(config, data=dataclasses.replace(config.data, root=str(root)))
    try:
        task.check(config, world_size)
    except OSError as exc:  # a name over 255 bytes, a path the system refuses: not a traceback
        raise UserError(
            f"data.root {config.data.root} or data.csv {config.data.csv}: {exc.strerror or exc} ({exc.filename}); "
            "fix the path"
        ) from None
    if config.data.val_root:  # checked as data in its own right; any size will do for evaluation
        val_root = str(Path(config.data.val_root).expanduser().resolve())
        config = dataclasses.replace(config, data=dataclasses.replace(config.data, val_root=val_root))
        try:
            task.check(validation_config(config), 1)
        except UserError as exc:  # its words name data.root and data.csv: say which data they mean here
            raise UserError(f"validation data (data.val_root, data.val_csv): {exc}") from None
    return config


def validation_config(config: TrainConfig) -> TrainConfig:
    """The config that describes the validation root as a task's data (one sample per batch will do)."""
    data = dataclasses.replace(
        config.data, root=config.data.val_root, csv=config.data.val_csv or config.data.csv, val_root="", val_csv=""
    )
    return dataclasses.replace(config, data=data, batch_size=1)


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


def write_config(run_dir: Path, config: TrainConfig) -> None:
    """The resolved config, the last thing written before a run starts: its presence marks a run."""
    write_text(RunDir(run_dir).config, yaml.safe_dump(config_dict(config), sort_keys=False))


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

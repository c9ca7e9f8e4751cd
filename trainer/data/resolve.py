"""The data a run points at, resolved and checked by its task at submit (torch-free: the submitter uses it)."""

import dataclasses
from pathlib import Path

from trainer.config import TrainConfig, tasks
from trainer.errors import UserError


def resolve_data(config: TrainConfig, sample_root: Path, world_size: int) -> TrainConfig:
    """Point an empty data.root at the built-in sample data (made on first use); the task checks the data
    and its settings for `world_size` processes."""
    task = tasks.get(config.task)
    root: Path | None = None
    if config.data.root:
        root = Path(config.data.root).expanduser().resolve()
    elif config.task not in tasks.available():
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

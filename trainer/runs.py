"""Run directories and the data a run points at (torch-free: the submitter uses it)."""

import dataclasses
import os
import time
from pathlib import Path

import yaml

from trainer.atomic import write_text
from trainer.config import TrainConfig
from trainer.errors import UserError


def resolve_data(config: TrainConfig, sample_root: Path) -> TrainConfig:
    """Point an empty data.root at the built-in sample data (made on first use) and check the data."""
    from trainer.pairs import check_data  # not needed by --dry-run, which must stay quick

    if config.data.root:
        root = Path(config.data.root).expanduser().resolve()
    else:
        from trainer.sample_data import ensure_sample_data  # Pillow: only when the sample data is used

        root = ensure_sample_data(sample_root).resolve() / config.task
        if not root.is_dir():
            raise UserError(f"task {config.task} has no built-in sample data; set data.root=PATH")
    check_data(config.task, root, config.data.csv, config.data.verify_images)
    return dataclasses.replace(config, data=dataclasses.replace(config.data, root=str(root)))


def new_run_dir(run_root: Path, task: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return (run_root / f"{stamp}-{task}-{os.urandom(2).hex()}").resolve()


def write_config(run_dir: Path, config: TrainConfig) -> None:
    """The resolved config, the last thing written before a run starts: its presence marks a run."""
    write_text(run_dir / "config.yaml", yaml.safe_dump(dataclasses.asdict(config), sort_keys=False))


def load_config_file(run_dir: Path) -> dict[str, object]:
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run directory (no config.yaml); pass the folder printed at submit time")
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

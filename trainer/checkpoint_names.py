"""Checkpoint file names (torch-free, for jobs.status)."""

import re
from pathlib import Path

_NAME = re.compile(r"step_(\d+)\.pt$")


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"step_{step:08d}.pt"


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file, newest first."""
    found = [(int(m.group(1)), p) for p in folder.glob("step_*.pt") if (m := _NAME.search(p.name))]
    return sorted(found, reverse=True)

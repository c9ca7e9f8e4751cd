"""Checkpoint file names (torch-free, for jobs.status)."""

import re
from pathlib import Path

_NAME = re.compile(r"step_(\d+)\.pt$")


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"step_{step:08d}.pt"


def best_path(folder: Path) -> Path:
    """The best checkpoint by the validation metric: not step-numbered, so keep-K pruning never sees it."""
    return folder / "best.pt"


def checksum_path(path: Path) -> Path:
    return path.with_suffix(".pt.sha256")


def has_checksum(path: Path) -> bool:
    """Written after the checkpoint itself: a checkpoint without one was torn by a kill, or half pruned."""
    return checksum_path(path).is_file()


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file, newest first."""
    found = [(int(m.group(1)), p) for p in folder.glob("step_*.pt") if (m := _NAME.search(p.name))]
    return sorted(found, reverse=True)


TEMPORARY = ".step_*.pt*.tmp"  # a checkpoint write in flight, or killed (trainer.run.atomic's name)


def stale_temporaries(folder: Path) -> list[Path]:
    """Temporary files of checkpoint writes (trainer.run.atomic names them `.<name>.XXXX.tmp`) that were killed."""
    return sorted(folder.glob(TEMPORARY))


def to_prune(folder: Path, newest: int, keep: int) -> list[Path]:
    """What to delete once step `newest` is saved: checkpoints past the newest `keep` that have a checksum,
    and every one without a checksum (torn; nothing ever loads it).

    Only checkpoints with a checksum count towards `keep`, so torn leftovers never push out the last good
    one. Ones with a checksum past `newest` are not counted and not deleted: resume skipped them (broken, or
    unreadable by this torch), and they are not ours to destroy.
    """
    checked = [path for step, path in list_checkpoints(folder) if step <= newest and has_checksum(path)]
    torn = [path for _, path in list_checkpoints(folder) if not has_checksum(path)]
    return checked[max(keep, 1) :] + torn

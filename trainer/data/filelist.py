"""The resolved file list of a data root, built once per run at submit and read by every rank on every attempt.

Resolving a million-row CSV (or scanning an ImageFolder) on every rank at every start multiplies the cost by
ranks x attempts; reading a stored list is one sequential read. The list is keyed by (data root, CSV), so the
training and validation data each have their own, and a sweep's points share one. A checksum beside it
catches a list damaged since: the rank refuses it rather than training on the wrong files.

Torch-free: the submitter writes the lists.
"""

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.errors import UserError
from trainer.run.atomic import write_text

if TYPE_CHECKING:
    from trainer.config import DataConfig


def path_for(folder: Path, root: str, csv: str) -> Path:
    key = hashlib.sha256(f"{root}\0{csv}".encode()).hexdigest()[:16]
    return folder / f"{key}.txt"


def write(folder: Path, root: str, csv: str, lines: list[str]) -> Path:
    """One line per sample, then its checksum file (written last: a list without one is incomplete)."""
    path = path_for(folder, root, csv)
    data = "".join(f"{line}\n" for line in lines)
    write_text(path, data)
    write_text(path.with_suffix(".sha256"), hashlib.sha256(data.encode()).hexdigest() + "\n")
    return path


def read_bytes(data: "DataConfig") -> bytes | None:
    """The stored list for this data config as its bytes, checksum verified; None when the run has none."""
    if not data.file_lists:
        return None
    path = path_for(Path(data.file_lists), data.root, data.csv)
    checksum = path.with_suffix(".sha256")
    if not checksum.is_file():
        return None
    raw = path.read_bytes()
    if hashlib.sha256(raw).hexdigest() != checksum.read_text().strip():
        raise UserError(
            f"the stored file list {path} does not match its checksum (changed since submit); delete it and "
            f"{checksum.name} to build it from data.root again, or resubmit"
        )
    return raw


def read(data: "DataConfig") -> list[str] | None:
    """The stored list's lines, or None."""
    raw = read_bytes(data)
    return None if raw is None else raw.decode().splitlines()

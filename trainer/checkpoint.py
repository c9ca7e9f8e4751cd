"""Step-numbered checkpoints, each with a sha256 beside it; resume picks the newest that verifies."""

import hashlib
import io
import sys
import threading
from pathlib import Path
from typing import Any

import torch

from trainer.atomic import write_bytes, write_text
from trainer.checkpoint_names import checkpoint_path, list_checkpoints


def _write(folder: Path, step: int, data: bytes, keep: int) -> Path:
    path = checkpoint_path(folder, step)
    write_bytes(path, data)
    # Written second: a checkpoint without its checksum is never trusted.
    write_text(path.with_suffix(".pt.sha256"), hashlib.sha256(data).hexdigest() + "\n")
    for _, old in list_checkpoints(folder)[keep:]:
        old.with_suffix(".pt.sha256").unlink(missing_ok=True)
        old.unlink(missing_ok=True)
    return path


def save(folder: Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write a checkpoint and its checksum atomically, then drop all but the newest `keep`."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return _write(folder, step, buffer.getvalue(), keep)


class Writer:
    """Saves checkpoints; with `background`, the serialised snapshot is written by a thread while training goes on.

    Serialising copies every tensor, so the snapshot is taken before the next step changes them. One write
    runs at a time; `wait` joins it and raises its error (a full disk, say) in the training thread.
    """

    def __init__(self, background: bool) -> None:
        self.background = background
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, folder: Path, step: int, state: dict[str, Any], keep: int) -> None:
        self.wait()
        buffer = io.BytesIO()
        torch.save(state, buffer)
        if not self.background:
            _write(folder, step, buffer.getvalue(), keep)
            return
        self._thread = threading.Thread(target=self._run, args=(folder, step, buffer.getvalue(), keep), daemon=False)
        self._thread.start()

    def _run(self, folder: Path, step: int, data: bytes, keep: int) -> None:
        try:
            _write(folder, step, data, keep)
        except BaseException as exc:  # handed to the training thread by wait()
            self._error = exc

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def _verified_bytes(path: Path) -> bytes | None:
    digest_file = path.with_suffix(".pt.sha256")
    if not digest_file.exists():
        return None
    data = path.read_bytes()
    return data if hashlib.sha256(data).hexdigest() == digest_file.read_text().strip() else None


def load_latest(folder: Path, map_location: torch.device) -> tuple[dict[str, Any], Path] | None:
    """The newest checkpoint whose checksum matches; broken ones are skipped with a warning."""
    for _, path in list_checkpoints(folder):
        data = _verified_bytes(path)
        if data is None:
            print(
                f"warning: skipping checkpoint {path}: missing or wrong checksum (torn or corrupt write)",
                file=sys.stderr,
            )
            continue
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
        return state, path
    return None


def weights_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    """A hash of the weights, independent of dict order: name, dtype, shape and raw bytes of each tensor."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()

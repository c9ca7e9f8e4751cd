"""Step-numbered checkpoints, each with a sha256 beside it; resume picks the newest that verifies."""

import contextlib
import hashlib
import io
import pickle
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer.config import CheckpointConfig
from trainer.errors import UserError
from trainer.run.atomic import write_bytes, write_text
from trainer.run.checkpoint_names import (
    best_path,
    checkpoint_path,
    checksum_path,
    list_checkpoints,
    stale_temporaries,
    to_prune,
)
from trainer.state import KEYS, PROGRESS, TrainState


def _warn_to_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _write(folder: Path, step: int, data: bytes, keep: int) -> Path:
    # One write at a time: any temporary file still here was left by a killed one, and holds disk we need.
    for tmp in stale_temporaries(folder):
        tmp.unlink(missing_ok=True)
    path = _write_checked(checkpoint_path(folder, step), data)
    for old in to_prune(folder, step, keep):
        checksum_path(old).unlink(missing_ok=True)  # first: a half-pruned checkpoint is never trusted
        old.unlink(missing_ok=True)
    return path


def _write_checked(path: Path, data: bytes) -> Path:
    write_bytes(path, data)
    # Written second: a checkpoint without its checksum is never trusted.
    write_text(checksum_path(path), hashlib.sha256(data).hexdigest() + "\n")
    return path


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


BYTES_READ = [0]  # checkpoint bytes this process read from the filesystem (resume at scale: rank 0 alone)


def _verified_bytes(path: Path) -> bytes | None:
    digest_file = checksum_path(path)
    if not digest_file.exists():
        return None
    data = path.read_bytes()
    BYTES_READ[0] += len(data)
    return data if hashlib.sha256(data).hexdigest() == digest_file.read_text().strip() else None


def check_state(state: object) -> str | None:
    """Why a loaded checkpoint cannot be resumed from, or None when it can."""
    if not isinstance(state, dict):
        return f"it holds a {type(state).__name__}, not a checkpoint of this trainer"
    progress = state["progress"] if isinstance(state.get("progress"), dict) else {}
    missing = [key for key in KEYS if key not in state]
    missing += [f"progress.{key}" for key in PROGRESS if "progress" in state and key not in progress]
    return f"it lacks {', '.join(missing)} (not a checkpoint of this trainer)" if missing else None


def _load(data: bytes, map_location: torch.device) -> tuple[dict[str, Any] | None, str]:
    """The state in `data`, or None and why not. torch's own messages are not passed on: on a refused
    pickle they advise turning the safe loader off, which would run whatever code the file holds."""
    try:
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        return None, "it holds Python objects other than tensors and plain containers (not written by this trainer)"
    except Exception as exc:  # a checksum that matches a file torch cannot read: written broken
        return None, f"torch cannot read it ({type(exc).__name__})"
    problem = check_state(state)
    return (state, "") if problem is None else (None, problem)


def load_latest(
    folder: Path, map_location: torch.device, warn: Callable[[str], None] = _warn_to_stderr
) -> tuple[dict[str, Any], Path] | None:
    """The newest checkpoint whose checksum matches and that loads; others are skipped with a warning."""
    found = newest_loadable(folder, map_location, warn)
    return None if found is None else (found[0], found[1])


def newest_loadable(
    folder: Path, map_location: torch.device, warn: Callable[[str], None]
) -> tuple[dict[str, Any], Path, bytes] | None:
    """load_latest's choice, with the file's verified bytes (to send to the other ranks)."""
    found = list_checkpoints(folder)
    for _, path in found:
        data = _verified_bytes(path)
        if data is None:
            problem = "missing or wrong checksum (torn or corrupt write)"
        else:
            state, problem = _load(data, map_location)
            if state is not None:
                return state, path, data
        warn(f"skipping checkpoint {path}: {problem}")
    if found:
        warn(f"no usable checkpoint in {folder}; starting from step 0")
    return None


def broadcast_latest(
    folder: Path, map_location: torch.device, warn: Callable[[str], None]
) -> tuple[dict[str, Any], Path] | None:
    """Rank 0 picks and reads the checkpoint, the others receive its bytes over the process group: one read of
    the shared filesystem per job, not one per rank (512 nodes x 8 GPUs would be 4,096 reads of one file). The
    bytes travel in host memory, through a gloo group of their own on NCCL jobs: never a copy of the whole file
    in each GPU's memory (only the loaded state goes there)."""
    group = dist.new_group(backend="gloo") if dist.get_backend() == "nccl" else None
    try:
        return _broadcast_latest(folder, map_location, warn, group)
    finally:
        if group is not None:
            dist.destroy_process_group(group)


def _broadcast_latest(
    folder: Path, map_location: torch.device, warn: Callable[[str], None], group: Any
) -> tuple[dict[str, Any], Path] | None:
    found = newest_loadable(folder, map_location, warn) if dist.get_rank() == 0 else None
    header = [str(found[1]) if found else "", len(found[2]) if found else 0]
    dist.broadcast_object_list(header, src=0, group=group)
    path, size = header
    if not size:
        return None
    if found:  # the file's bytes as they are, not a copy: a sender only reads them (so the warning is moot)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "The given buffer is not writable", UserWarning)
            dist.broadcast(torch.frombuffer(found[2], dtype=torch.uint8), src=0, group=group)
        return found[0], found[1]
    buffer = torch.empty(size, dtype=torch.uint8)
    dist.broadcast(buffer, src=0, group=group)
    data = buffer.numpy().tobytes()  # torch.load reads bytes without copying them again (io.BytesIO shares them)
    del buffer  # so a rank holds the file once while the state loads, as rank 0 does
    state, problem = _load(data, map_location)
    if state is None:  # rank 0 loaded these very bytes: a transfer gone wrong
        raise RuntimeError(f"the checkpoint {path} received from rank 0 does not load: {problem}")
    return state, Path(path)


class Checkpointer:
    """Saves the train state every `every` steps and restores it from the newest valid checkpoint.

    Every rank calls save() and restore(): saving gathers every rank's random streams (a collective) and
    ends with a barrier, so nobody runs ahead of a checkpoint still being written; rank 0 alone writes.
    """

    def __init__(
        self,
        folder: Path,
        settings: CheckpointConfig,
        is_main: bool,
        warn: Callable[[str], None],
        section: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.folder, self.settings, self.is_main, self.warn = folder, settings, is_main, warn
        self.section = section or (lambda name: contextlib.nullcontext())  # the watchdog's: a save's own budget
        self.writer = Writer(settings.background)
        self.blocked_s = 0.0  # the time training waited on saves this attempt (the goodput ledger's checkpointing)

    def save_if_due(self, state: TrainState, last: int) -> bool:
        """Save every `every` steps and at the last step (a collective); whether it saved."""
        if state.step % self.settings.every and state.step != last:
            return False
        self.save(state)
        return True

    def save(self, state: TrainState) -> None:
        began = time.perf_counter()
        with self.section("checkpoint"):
            snapshot = state.state_dict()
            if self.is_main:
                self.writer.save(self.folder, state.step, snapshot, self.settings.keep)
            if dist.is_initialized():
                dist.barrier()
        self.blocked_s += time.perf_counter() - began

    def restore(self, state: TrainState) -> Path | None:
        """Load the newest valid checkpoint into `state`; None when there is none (a fresh start)."""
        if self.settings.broadcast and dist.is_initialized() and dist.get_world_size() > 1:
            resumed = broadcast_latest(self.folder, state.device, self.warn)
        else:
            resumed = load_latest(self.folder, state.device, self.warn)
        if resumed is None:
            return None
        loaded, path = resumed
        state.load_state_dict(loaded, path)
        return path

    def wait(self) -> None:
        """Until the last checkpoint is on disk (a background write may still run)."""
        began = time.perf_counter()
        self.writer.wait()
        self.blocked_s += time.perf_counter() - began


def save_best(folder: Path, weights: dict[str, torch.Tensor], meta: dict[str, Any]) -> Path:
    """best.pt: the weights and what is needed to use them (task, config, class names, step, metrics)."""
    buffer = io.BytesIO()
    torch.save({"model": weights, "meta": meta}, buffer)
    path = best_path(folder)
    checksum_path(path).unlink(missing_ok=True)  # first: a best.pt being replaced is never trusted half-written
    return _write_checked(path, buffer.getvalue())


def load_weights(path: Path, map_location: torch.device) -> dict[str, Any]:
    """A checkpoint (step_*.pt or best.pt) to evaluate: its checksum must match; the safe loader only."""
    data = _verified_bytes(path)
    if data is None:
        raise UserError(f"{path} has no matching {checksum_path(path).name} (torn, corrupt or not ours); pick another")
    try:
        state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as exc:
        raise UserError(f"{path} cannot be loaded ({type(exc).__name__}); pick another checkpoint") from None
    if not isinstance(state, dict) or "model" not in state or not isinstance(state.get("meta"), dict):
        raise UserError(f"{path} holds no weights with their settings (written before checkpoints carried them)")
    return state


def weights_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    """A hash of the weights, independent of dict order: name, dtype, shape and raw bytes of each tensor."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()

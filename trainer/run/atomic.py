"""Atomic file writes (temporary file in the same folder, fsync, rename), and reading back what they wrote."""

import errno
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from trainer.errors import UserError


def current_umask() -> int:
    """The process's umask, read without changing it.

    Setting it and putting it back (the only portable way) is process-wide: a thread creating a file in
    between would get the wrong mode. Linux shows it in /proc.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    """Write `data` to `path` so readers see the old file or the new one, never a torn one; `durable`: on disk
    before this returns (two fsyncs: on a cluster's shared filesystem they can take many milliseconds, too
    dear for a file rewritten every few steps that a crash may lose, such as progress.json)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp makes the file 0600; a plain open() would honour the umask, so teammates can read runs.
            os.fchmod(f.fileno(), 0o666 & ~current_umask())
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UserError(
                f"no space left writing {path} ({free_space(path.parent)}); free space on that disk, then resume "
                "(earlier files are intact)"
            ) from None
        raise
    if not durable:
        return
    # The rename is durable only once the folder entry is on disk too.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_text(path: Path, text: str, durable: bool = True) -> None:
    write_bytes(path, text.encode(), durable)


def json_or_none(path: Path) -> Any:
    """A run file read as a hint: its JSON, or None when it is missing, torn or not JSON (its caller does
    without, or checks the shape). read_json, below, is for a file whose damage the user must hear of."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_json(path: Path, fix: str, valid: Callable[[Any], bool] = lambda _: True) -> Any:
    """A JSON file of a run; an empty, broken or misshapen one is a UserError naming it and ending with `fix`."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        problem = "not valid JSON (not UTF-8 text)"
    else:
        if not text.strip():
            problem = "empty"
        else:
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                problem = f"not valid JSON ({exc.msg} at line {exc.lineno})"
            else:
                if valid(value):
                    return value
                problem = f"not a valid {path.name} (fields missing or of the wrong type)"
    raise UserError(f"{path} is {problem}; {fix}")


def free_space(folder: Path) -> str:
    """How much its disk has free, for a message about a write that found it full."""
    try:
        return f"{shutil.disk_usage(folder).free / 2**20:.1f} MiB free on its disk"
    except OSError:
        return "free space unknown"


def try_lock(path: Path) -> IO[str] | None:
    """An exclusive lock on `path` (made if missing), or None when another process holds it. The lock lasts
    while the returned file stays open, and ends with its process however that ends (flock)."""
    handle = open(path, "a")  # noqa: SIM115 - the caller holds it open for as long as it needs the lock
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle

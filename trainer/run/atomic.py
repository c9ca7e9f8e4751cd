"""Atomic file writes (temporary file in the same folder, fsync, rename), and reading back what they wrote."""

import errno
import fcntl
import json
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, BinaryIO

from trainer.errors import UserError
from trainer.run import procfs


def current_umask() -> int:
    """The process's umask, read without changing it.

    Setting it and putting it back (the only portable way) is process-wide: a thread creating a file in
    between would get the wrong mode. Linux shows it in /proc.
    """
    if (found := procfs.status("self", "Umask")) is not None:  # Linux 4.7 and later
        return int(found, 8)
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


class NotAFile(OSError):
    """A run file's name holds something other than a regular file (a FIFO, a device, a folder)."""


def open_file(path: Path) -> BinaryIO:
    """A run file opened for reading, only if it is a regular file: a run folder is data, and a FIFO or a device
    in a file's place would hang or feed its reader for ever (opened without blocking, checked before reading)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a device or socket"
            raise NotAFile(errno.EINVAL, f"not a regular file ({kind})", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_text(path: Path, errors: str = "strict") -> str:
    """A run file's text (open_file's rules); with errors="strict" a byte that is not UTF-8 is a ValueError."""
    with open_file(path) as f:
        return f.read().decode(errors=errors)


def loads(text: str, strict: bool = True) -> Any:
    """JSON as a run's writers write it. NaN, Infinity and a number past a float's range are not JSON: `strict`,
    a ValueError (a record refused, naming it); else such a number reads as None, unknown, so that a reader's
    isinstance check does without it (a hand-edited record shows no `nan s`, a NaN loss no figure)."""

    def constant(word: str) -> Any:
        if strict:
            raise ValueError(f"{word} is not a JSON number")
        return None

    def number(word: str) -> float | None:
        value = float(word)
        return value if math.isfinite(value) else constant(word)

    return json.loads(text, parse_constant=constant, parse_float=number)


def json_or_none(path: Path) -> Any:
    """A run file read as a hint: its JSON, or None when it is missing, torn, not JSON or not a regular file
    (its caller does without, or checks the shape); a non-finite number in it reads as None. read_json, below,
    is for a file whose damage the user must hear of."""
    try:
        return loads(read_text(path), strict=False)
    except (OSError, ValueError):
        return None


def json_problem(path: Path, valid: Callable[[Any], bool] = lambda _: True) -> tuple[Any, str]:
    """A run file's JSON and "", or None and what is wrong with it in a few words ("empty", "not valid JSON
    (...)", ...), for a line that names the file. A missing file is a FileNotFoundError."""
    try:
        text = read_text(path)
    except NotAFile as exc:
        return None, exc.strerror or "not a regular file"
    except UnicodeDecodeError:
        return None, "not valid JSON (not UTF-8 text)"
    if not text.strip():
        return None, "empty"
    try:
        value = loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno})"
    except ValueError as exc:  # NaN, Infinity, 1e999; an integer of thousands of digits
        return None, f"not valid JSON ({exc})"
    if not valid(value):
        return None, f"not a valid {path.name} (fields missing or of the wrong type)"
    return value, ""


def read_json(path: Path, fix: str, valid: Callable[[Any], bool] = lambda _: True) -> Any:
    """A JSON file of a run; an empty, broken or misshapen one is a UserError naming it and ending with `fix`."""
    value, problem = json_problem(path, valid)
    if problem:
        raise UserError(f"{path} is {problem}; {fix}")
    return value


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

"""This machine's processes as Linux's /proc shows them: the one reader of it (standard library only: the batch
step runs it with the node's python3, jobs.status on the submitting machine).

A process may end between two reads, and there may be no /proc at all (macOS): each reader says what it answers
then. /proc/PID/stat's second field, the command's name, may hold spaces and parentheses: the fields are read
after its last ")".
"""

import os
import time
from pathlib import Path


def available() -> bool:
    """This machine has a /proc to read processes from (Linux)."""
    return Path("/proc/self/stat").exists()


def pids() -> list[int]:
    """Every process's id now (none without /proc)."""
    try:
        return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    except OSError:
        return []


def stat(pid: int | str = "self") -> list[str] | None:
    """/proc/PID/stat's fields from the third (the state) on, so field N of proc(5) is [N - 3]; None: ended."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def state(pid: int | str) -> str | None:
    """The process's state letter (R, S, D, T, Z...); None: ended, or no /proc."""
    fields = stat(pid)
    return fields[0] if fields else None


def alive(pid: int | str) -> bool:
    """The process exists and is not a zombie (killed, not yet reaped); False without /proc."""
    return state(pid) not in (None, "Z", "X")


def children() -> dict[int, list[int]]:
    """Each process's children now, by its id."""
    tree: dict[int, list[int]] = {}
    for pid in pids():
        fields = stat(pid)
        if fields and len(fields) > 1 and fields[1].isdigit():  # else ended meanwhile
            tree.setdefault(int(fields[1]), []).append(pid)
    return tree


def cpu_ticks(pid: int | str) -> int:
    """The process's CPU time so far (user and system) in clock ticks; 0 once it has ended."""
    try:
        fields = stat(pid) or []
        return int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return 0


def start_time(pid: int | str = "self") -> float:
    """When the process started (wall clock); now where /proc cannot say. Measured back from now by the seconds
    since it started (uptime, 10 ms steps), not from the boot time /proc/stat gives in whole seconds: a restart
    within a second of the failure it follows must not take that failure for its own."""
    try:
        ticks = int((stat(pid) or [])[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time()


def cmdline(pid: int | str) -> list[str]:
    """The process's arguments. OSError: ended (FileNotFoundError, ProcessLookupError), or no /proc."""
    return _words(Path(f"/proc/{pid}/cmdline").read_bytes())


def environ(pid: int | str) -> list[str]:
    """The process's environment as it started, KEY=VALUE each. OSError: ended, or another user's
    (PermissionError)."""
    return _words(Path(f"/proc/{pid}/environ").read_bytes())


def _words(raw: bytes) -> list[str]:
    """NUL-ended words, decoded (bytes that are not UTF-8 replaced); a process that rewrote its arguments may
    leave the last one without its NUL."""
    words = raw.decode(errors="replace").split("\0")
    return words[:-1] if words[-1] == "" else words


def status(pid: int | str, key: str) -> str | None:
    """The first word of `key`'s line in /proc/PID/status (Umask, SigCgt...); None: no such line, or ended."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name == key:
                return (value.split() or [""])[0]
    except OSError:
        pass
    return None


def resident_bytes() -> int | None:
    """This process's resident memory now (/proc/self/statm); None without /proc."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return None

"""This machine's processes read from /proc (trainer.run.procfs), against real processes: one whose name
holds a space and a parenthesis, one that ended, a zombie."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainer.run import procfs

pytestmark = pytest.mark.skipif(not procfs.available(), reason="no /proc here")


@pytest.fixture
def oddly_named(tmp_path: Path) -> Iterator[subprocess.Popen]:
    """A sleeping process whose name, as /proc/PID/stat shows it, is `x) (y 1`: fields cut at the first ")" or
    at spaces would be wrong."""
    program = tmp_path / "x) (y 1"
    program.symlink_to(sys.executable)
    code = "import signal, sys; signal.signal(signal.SIGUSR1, lambda *_: None); print(1, flush=True); sys.stdin.read()"
    env = os.environ | {"PROCFS_TEST": "here"}
    child = subprocess.Popen([program, "-c", code, "last"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert child.stdout is not None and child.stdout.readline() == b"1\n"  # its handler is in place
    yield child
    child.kill()
    child.wait()


def test_a_live_process_is_read_whatever_its_name(oddly_named: subprocess.Popen) -> None:
    pid = oddly_named.pid
    assert "(x) (y 1)" in Path(f"/proc/{pid}/stat").read_text()  # the name this test is about
    assert _until(pid, "S") and procfs.alive(pid)  # asleep in its read of stdin
    assert pid in procfs.pids() and pid in procfs.children()[os.getpid()]
    assert procfs.cmdline(pid) == [str(word) for word in oddly_named.args]
    assert "PROCFS_TEST=here" in procfs.environ(pid)
    assert abs(procfs.start_time(pid) - time.time()) < 30
    assert procfs.cpu_ticks(pid) >= 0
    caught = int(procfs.status(pid, "SigCgt") or "0", 16)
    assert caught >> (signal.SIGUSR1 - 1) & 1 and not caught >> (signal.SIGUSR2 - 1) & 1


def test_a_stopped_process_says_so(oddly_named: subprocess.Popen) -> None:
    oddly_named.send_signal(signal.SIGSTOP)
    assert _until(oddly_named.pid, "T") and procfs.alive(oddly_named.pid)


def test_a_zombie_is_not_alive_and_an_ended_process_is_not_there() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert _until(child.pid, "Z") and not procfs.alive(child.pid)  # ended, not yet reaped
    child.wait()
    assert procfs.state(child.pid) is None and procfs.stat(child.pid) is None and not procfs.alive(child.pid)
    assert procfs.cpu_ticks(child.pid) == 0 and procfs.status(child.pid, "SigCgt") is None
    with pytest.raises(FileNotFoundError):
        procfs.cmdline(child.pid)
    with pytest.raises(FileNotFoundError):
        procfs.environ(child.pid)
    assert abs(procfs.start_time(child.pid) - time.time()) < 1  # now, where /proc cannot say


def test_this_process_reads_itself() -> None:
    assert procfs.status("self", "Umask") == f"{_umask():04o}"
    assert (procfs.resident_bytes() or 0) > 2**20
    assert procfs.start_time() < time.time()


def _until(pid: int, state: str, timeout: float = 30) -> bool:
    """Whether process `pid` reaches `state` within `timeout` seconds (polled)."""
    deadline = time.monotonic() + timeout
    while procfs.state(pid) != state and time.monotonic() < deadline:
        time.sleep(0.01)
    return procfs.state(pid) == state


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask

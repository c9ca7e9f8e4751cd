import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from trainer.sample_data import ensure_sample_data

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def poll(what: str, condition: Callable[[], T], timeout: float = 120, every: float = 0.1) -> T:
    """condition()'s first true value, checked every `every` seconds; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
    return value


def process_start(pid: int) -> int | None:
    """When a live process started (/proc/PID/stat field 22); None once it has ended (a zombie has)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


@pytest.fixture(scope="session")
def sample_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_sample_data(tmp_path_factory.mktemp("data") / "sample")


def write_profile(folder: Path, text: str, name: str = "test.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


@pytest.fixture
def local_profile(tmp_path: Path) -> Path:
    """A local profile whose runs land in this test's own folder."""
    return write_profile(tmp_path, f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")


def submit(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m jobs.submit` the way a user does (with `env` added to this environment)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "jobs.submit", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_dirs(run_root: Path) -> list[Path]:
    """Folders under run_root that look like runs (they hold a config.yaml)."""
    return sorted(p.parent for p in run_root.glob("*/config.yaml")) if run_root.exists() else []

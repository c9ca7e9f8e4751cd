"""Your own task by import path: README's example runs from a folder outside the project, and what is wrong
with a task reference is one line, exit 2, before anything is queued."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_bad_input import assert_refused

EXAMPLE = re.search(
    r"<!-- user-task-example -->\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL
).group(1)  # type: ignore[union-attr]


def submit_from(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m jobs.submit` run from the user's own folder, the project installed (here: on PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    profile = folder / "local.yaml"
    profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {folder / 'runs'}\n")
    cmd = [sys.executable, "-m", "jobs.submit", "--profile", str(profile), *args]
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def project(tmp_path: Path, sample_root: Path) -> Path:
    """A user's folder: README's example task, and a folder of their images."""
    folder = tmp_path / "my_project"
    folder.mkdir()
    (folder / "my_tasks.py").write_text(EXAMPLE)
    shutil.copytree(sample_root / "classify" / "circle", folder / "photos")
    return folder


@pytest.mark.parametrize("task", ["my_tasks.py:Denoise", "my_tasks:Denoise"])
def test_readmes_example_task_trains_from_a_folder_outside_the_project(project: Path, task: str) -> None:
    args = ["--wait", f"task={task}", "data.root=photos", "Denoise.width=8", "steps=4", "log.every=2"]
    result = submit_from(project, *args, "log.image_every=0")
    assert result.returncode == 0, result.stdout + result.stderr
    [summary] = [json.loads(p.read_text()) for p in (project / "runs").glob("*-Denoise-*/summary.json")]
    assert summary["final_step"] == 4 and summary["world_size"] == 2
    [config] = list((project / "runs").glob("*/config.yaml"))
    assert "Denoise:\n  width: 8\n  noise: 0.2" in config.read_text()


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("nowhere:Task", "task nowhere:Task: no module named 'nowhere'"),
        ("missing.py:Task", "missing.py is not a file"),
        ("my_tasks.py:Denoize", "my_tasks.py has no 'Denoize'; it defines dataclass, Path, torch"),
        ("my_tasks.py:Settings", "Settings lacks dataset, model, forward()"),
        ("broken.py:Task", "broken.py failed (ZeroDivisionError: division by zero); fix it and resubmit"),
    ],
)
def test_a_bad_task_reference_is_one_line(project: Path, task: str, message: str) -> None:
    (project / "broken.py").write_text("x = 1 / 0\n")
    assert_refused(submit_from(project, f"task={task}", "data.root=photos"), message, project / "runs")


def test_a_task_settings_typo_is_one_line(project: Path) -> None:
    result = submit_from(project, "task=my_tasks.py:Denoise", "data.root=photos", "Denoise.widht=8")
    assert_refused(result, "unknown config key Denoise.widht; valid keys: ", project / "runs")
    assert "Denoise.width" in result.stderr

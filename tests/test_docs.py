"""Every code block of README.md and the package READMEs runs as written, or says it is a fragment.

A block is runnable by its language: `python` runs as a script (in a scratch folder, RUN_DIR set as in a task),
`yaml` is a profile and passes a `--dry-run`. Any other block (commands that need your files or a cluster,
sample output, folder trees) is marked `<!-- fragment: why -->` on the line before it. README's two commands
"On a fresh machine" are what `.ci/run` runs."""

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, submit

DOCS = ["README.md", "jobs/README.md", "trainer/README.md", "trainer/supervise/README.md", "tests/README.md"]
RUNNABLE = ("python", "yaml")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    language: str
    text: str
    marker: str  # the HTML comment on the line before the block, or ""

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(doc: str) -> list[Block]:
    found = []
    lines = (ROOT / doc).read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.fullmatch(r"```(\w*)", lines[i])
        if fence:
            end = lines.index("```", i + 1)
            before = lines[i - 1].strip() if i else ""
            marker = before if before.startswith("<!--") else ""
            found.append(Block(doc, i + 1, fence.group(1), "\n".join(lines[i + 1 : end]) + "\n", marker))
            i = end
        i += 1
    return found


ALL = [block for doc in DOCS for block in blocks(doc)]


def runnable(language: str) -> list[Block]:
    return [b for b in ALL if b.language == language and not b.marker.startswith("<!-- fragment")]


def fresh_machine_commands() -> list[str]:
    section = (ROOT / "README.md").read_text().split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, re.S)


def test_every_block_runs_or_says_it_is_a_fragment() -> None:
    fresh = fresh_machine_commands()
    unmarked = [
        str(b)
        for b in ALL
        if b.language not in RUNNABLE and not b.marker.startswith("<!-- fragment") and b.text.strip() not in fresh
    ]
    assert not unmarked, f"mark these <!-- fragment: why --> or make them runnable: {unmarked}"
    assert len(runnable("python")) >= 2 and len(runnable("yaml")) >= 2


def test_the_fresh_machine_commands_are_what_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = fresh_machine_commands()
    assert len(commands) == 2 and all(command in ci for command in commands), commands
    assert ci.index(commands[0]) < ci.index(commands[1])  # the main job first, as a new user runs them
    assert "python -m pytest -m long" in ci[ci.index(commands[1]) + 1 :]  # then every test beyond the ten minutes


@pytest.mark.parametrize("block", runnable("python"), ids=str)
def test_python_blocks_run_as_written(block: Block, tmp_path: Path) -> None:
    (tmp_path / "block.py").write_text(block.text)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUN_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "block.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("block", runnable("yaml"), ids=str)
def test_profile_examples_pass_a_dry_run(block: Block, tmp_path: Path) -> None:
    (tmp_path / "site.yaml").write_text(block.text)
    result = submit("--profile", str(tmp_path / "site.yaml"), "--nodes", "2", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#!/bin/bash") and "#SBATCH --nodes=2" in result.stdout


def test_each_test_the_ten_minute_suite_names_exists() -> None:
    """A renamed test would leave the suite's one whole job for its flow silently: each CORE entry names a test
    function of its file (or the start of one's name)."""
    from tests.conftest import CORE

    for entry in CORE:
        path, name = entry.split("::")
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {re.escape(name.split('[')[0])}", source, re.M), f"{entry}: no such test"

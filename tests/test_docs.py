"""Every code block of README.md and the package READMEs runs as written, or says it is a fragment.

A block is runnable by its language: `python` runs as a script (in a scratch folder, RUN_DIR set as in a task),
`yaml` is a profile and passes a `--dry-run`. Any other block (commands that need your files or a cluster,
sample output, folder trees) is marked `<!-- fragment: why -->` on the line before it. README's two commands
"On a fresh machine" are what `.ci/run` runs."""

import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT, submit

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
    from tests.support import CORE

    for entry in CORE:
        path, name = entry.split("::")
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {re.escape(name.split('[')[0])}", source, re.M), f"{entry}: no such test"


def test_each_reference_page_is_what_the_code_generates() -> None:
    """jobs/reference/ is generated from the parsers, the settings and RunDir: a change there without
    `python -m tests.reference --write` fails here."""
    from tests.reference import FOLDER, PAGES, stale

    assert not stale(), f"run python -m tests.reference --write: {stale()} differ from the code"
    assert {"commands.md", "settings.md", "run-directory.md"} <= set(PAGES)
    assert sorted(p.name for p in FOLDER.glob("*.md")) == sorted(PAGES), "a page in jobs/reference/ no generator writes"


def markdown_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split() if (ROOT / name).exists()]


ITEM = re.compile(r"(?:[-*]|\d+\.) ")


def unit_words(text: str) -> list[int]:
    """The word count of each paragraph and list item: consecutive non-blank lines outside code fences, tables,
    headings and HTML comments; a line starting with `- `, `* ` or `N. ` starts a new item."""
    counts: list[int] = []
    words: int | None = None
    fenced = False
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
        ends = fenced or not stripped or stripped.startswith(("```", "|", "#", "<!--")) or ITEM.match(stripped)
        if ends and words is not None:
            counts.append(words)
            words = None
        if stripped and not (fenced or stripped.startswith(("```", "|", "#", "<!--"))):
            words = (words or 0) + len(ITEM.sub("", stripped, count=1).split())  # the marker is no word
    return counts


def test_unit_words_counts_paragraphs_and_list_items() -> None:
    text = "# Title\n\none two\nthree\n\n- a b\n  c\n- d\n1. e f\n\n| x | y |\n\n```\ncode here\n```\n"
    assert unit_words(text) == [3, 3, 1, 2]


def test_every_markdown_file_reads_in_short_paragraphs_and_the_readme_is_short() -> None:
    """A guide, not a notebook: each file's median paragraph or list item at most 45 words; README.md at most
    10 KB."""
    medians = {name: statistics.median(unit_words((ROOT / name).read_text()) or [0]) for name in markdown_files()}
    assert all(median <= 45 for median in medians.values()), {k: v for k, v in medians.items() if v > 45}
    assert (ROOT / "README.md").stat().st_size <= 10_000


def test_all_markdown_together_is_at_most_100_kb() -> None:
    """A guide, not a notebook: what the generated reference pages say is linked, not told again."""
    assert sum((ROOT / name).stat().st_size for name in markdown_files()) <= 100_000


LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    titles = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


def test_every_link_between_the_docs_leads_somewhere() -> None:
    broken = []
    for name in markdown_files():
        for target in LINK.findall((ROOT / name).read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            file, _, anchor = target.partition("#")
            path = (ROOT / name).parent / file if file else ROOT / name
            if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
                broken.append(f"{name}: {target}")
    assert not broken, broken

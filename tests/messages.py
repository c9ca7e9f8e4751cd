"""Refusals: their form checked where they happen, their exact words in one file.

A test asserts what an error does: exit code 2, one line, `error: ` first, the field or flag it is about, no
traceback, nothing left behind. The exact words of each such line live in tests/golden/messages.txt, which a
reviewer reads as a whole; rewording a message changes that file, not the tests:

    GOLDEN_UPDATE=1 python -m pytest -m "not job and not slurm"   # or -m job, -m slurm: the lines they make

writes the lines that run saw into it (git diff then shows each new wording beside the old).
"""

import contextlib
import fcntl
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainer.errors import UserError

GOLDEN = Path(__file__).parent / "golden" / "messages.txt"
HEADER = (
    "# The refusals the tests provoke, word for word: the test (and its case), then the line, indented.\n"
    "# Paths under pytest's temporary folders read <tmp>. Rewrite after a change of wording with\n"
    '#   GOLDEN_UPDATE=1 python -m pytest -m "not job and not slurm"   (or -m job, -m slurm: their lines)\n'
    "# (tests/messages.py); the tests themselves check the form: exit code, one line, the field named.\n"
)
# tmp_path and the session's shared folders, under any worker.
TEMP = re.compile(r"/tmp/pytest-of-[^/\s]+/pytest-\d+(?:/popen-gw\d+)?")


def read(path: Path = GOLDEN) -> dict[str, str]:
    """The file's cases: an unindented key line, then its message indented by four spaces."""
    cases: dict[str, str] = {}
    key = None
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith("    ") and key is not None:
            cases[key] = line[4:]
        elif line and not line.startswith("#"):
            key = line
    return cases


def write(cases: dict[str, str], path: Path = GOLDEN) -> None:
    """Whole or not at all: a reader (another worker's test) never sees half a file."""
    part = path.with_name(f".{path.name}.{os.getpid()}")
    part.write_text(HEADER + "".join(f"\n{key}\n    {cases[key]}\n" for key in sorted(cases)))
    os.replace(part, path)


class Golden:
    """One test's refusals, compared in the order the test makes them with the file's lines for its id."""

    def __init__(self, key: str, tmp_path: Path) -> None:
        self.key = key
        self.tmp_path = str(tmp_path)
        self.seen = 0

    def __call__(self, message: str, outside: str = "", **placeholders: str) -> None:
        """Compare `message` (the test's tmp_path and any other folder of pytest's read <tmp>; each value of
        `placeholders`, as a whole word, reads <its name>: what differs by machine or run) with the golden line.
        `outside`: a pattern whose one group is another program's words quoted in ours (Pillow's, OpenSSH's,
        sbatch's), which read <outside>: they change with that program's version, not with our code."""
        self.seen += 1
        key = self.key if self.seen == 1 else f"{self.key} #{self.seen}"
        assert "\n" not in message, f"{key}: a refusal is one line: {message!r}"
        if outside:
            found = re.search(outside, message)
            assert found, f"{key}: {outside!r} is not in {message!r}"
            message = message[: found.start(1)] + "<outside>" + message[found.end(1) :]
        message = TEMP.sub("<tmp>", message.replace(self.tmp_path, "<tmp>"))
        for name, value in sorted(placeholders.items(), key=lambda item: -len(item[1])):
            message = re.sub(rf"(?<![\w.-]){re.escape(value)}(?![\w.-])", f"<{name}>", message)
        if os.environ.get("GOLDEN_UPDATE"):
            with open(GOLDEN.with_name(".messages.lock"), "w") as lock:  # xdist's workers write one file
                fcntl.flock(lock, fcntl.LOCK_EX)
                write({**read(), key: message})
            return
        expected = read().get(key)
        assert expected is not None, f"{key}: no line in {GOLDEN}; add it: GOLDEN_UPDATE=1 python -m pytest ..."
        assert message == expected, f"{key}: the message changed (if meant: GOLDEN_UPDATE=1):\n{message}"


@pytest.fixture
def golden(request: pytest.FixtureRequest, tmp_path: Path) -> Golden:
    return Golden(f"{request.node.path.relative_to(Path(__file__).parent)}::{request.node.name}", tmp_path)


def refused(
    result: subprocess.CompletedProcess[str],
    golden: Golden,
    *named: str,
    code: int = 2,
    outside: str = "",
    **placeholders: str,
) -> str:
    """The form of a refusal on the command line: exit `code`, one line on stderr, `error: ` first, each of
    `named` (the field, flag or file it is about) in it, no traceback; its words held to the golden file."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(part in lines[0] for part in named), (named, lines[0])
    assert "Traceback" not in result.stderr + result.stdout
    golden(lines[0], outside, **placeholders)
    return lines[0]


def case_id(value: object) -> str | None:
    """Readable, stable ids for refusal tables (an id names the golden line: the case, not its position)."""
    if isinstance(value, list):
        return " ".join(map(str, value))
    if isinstance(value, str):
        return value.removeprefix("executor: local\n").strip().replace("\n", "; ")
    if isinstance(value, bytes):  # PYTEST_CURRENT_TEST, which holds the id, may hold at most 128 KiB
        return repr(value)[:48]
    return None


@contextlib.contextmanager
def raises(golden: Golden, *named: str) -> Iterator[None]:
    """An in-process refusal: a UserError naming each of `named`, its words held to the golden file."""
    with pytest.raises(UserError) as caught:
        yield
    message = str(caught.value)
    assert all(part in message for part in named), (named, message)
    golden(message)

"""The golden file of refusals (tests/messages.py) holds only lines a test still makes, and its check bites."""

import re
from pathlib import Path

import pytest

from tests.messages import GOLDEN, Golden, read

TESTS = Path(__file__).parent


def test_each_golden_line_belongs_to_a_test_that_exists() -> None:
    modules = {str(p.relative_to(TESTS)): p.read_text() for p in TESTS.rglob("test_*.py")}
    cases = read()
    assert len(cases) > 100, f"{GOLDEN} lost its lines"
    for key in cases:
        module, test = re.fullmatch(r"((?:\w+/)*test_\w+\.py)::(test_\w+)(?:\[.*\])?(?: #\d+)?", key).groups()  # type: ignore[union-attr]
        assert f"def {test}(" in modules.get(module, ""), f"{key}: no such test; delete its lines from {GOLDEN}"


def test_a_changed_word_or_a_missing_line_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOLDEN_UPDATE", raising=False)
    key, line = next(iter(read().items()))
    with pytest.raises(AssertionError, match="the message changed"):
        Golden(key, tmp_path)(line + " (reworded)")
    Golden(key, tmp_path)(line)  # the line itself passes
    with pytest.raises(AssertionError, match="no line in"):
        Golden("test_messages.py::test_nothing", tmp_path)("error: x")

"""Each benchmark script imports and parses its arguments (`--help`), in this process: the smoke that stays in
the default run. Running them, at a tiny size, is tests/benchmarks/ (`pytest -m bench`)."""

import runpy
import sys

import pytest

from tests.support import ROOT

SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_imports_and_parses_its_arguments(
    script: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    namespace = runpy.run_path(str(ROOT / "benchmarks" / script), run_name="smoke")  # no __main__ block
    with pytest.raises(SystemExit) as exited:
        namespace["main"]()
    assert exited.value.code == 0
    assert "usage:" in capsys.readouterr().out

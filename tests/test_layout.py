"""The suite's own layout: a test module reads as the behaviour it checks, its helpers in tests/support.py; no test
module, and no conftest.py, imports from a test module (or from a conftest.py, which holds fixtures and hooks)."""

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports from, at any depth (a function's own imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            # `from tests.slurm import test_slurm` names a module as an imported name
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def helper_sources(module: str) -> bool:
    """A test module or a conftest.py: a place helpers must not be imported from."""
    last = module.rsplit(".", 1)[-1]
    return module.startswith("tests.") and (last.startswith("test_") or last == "conftest")


def test_no_test_module_or_conftest_imports_a_test_module_or_a_conftest() -> None:
    importers = [*TESTS.rglob("test_*.py"), *TESTS.rglob("conftest.py")]
    assert len(importers) > 50, "the suite's modules were not found"
    wrong = {str(path.relative_to(TESTS)): sorted(filter(helper_sources, imported_modules(path))) for path in importers}
    assert {path: names for path, names in wrong.items() if names} == {}, "import helpers from tests.support"


def test_an_import_of_a_test_module_is_found(tmp_path: Path) -> None:
    """The check above bites: each way of importing a test module or a conftest is seen."""
    module = tmp_path / "test_x.py"
    module.write_text(
        "from tests.slurm.test_slurm import cli\nfrom tests import conftest\nfrom tests.jobs import test_script\n"
        "def f():\n    import tests.test_hostlist\n"
    )
    assert sorted(filter(helper_sources, imported_modules(module))) == [
        "tests.conftest",
        "tests.jobs.test_script",
        "tests.slurm.test_slurm",
        "tests.test_hostlist",
    ]

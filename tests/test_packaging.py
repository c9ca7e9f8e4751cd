"""README's test command installs everything the tests and benchmarks import (nothing installed by hand)."""

import ast
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.support import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

OWN = {"jobs", "trainer", "tests", "benchmarks", "_common"}


def imported_modules(folders: list[Path]) -> dict[str, Path]:
    """Top-level module names imported anywhere under the folders (import statements, not strings)."""
    found: dict[str, Path] = {}
    for path in (p for folder in folders for p in folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], path)
    return found


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_closure() -> set[str]:
    """The distributions README's `pip install -e '.[dev]'` brings: every declared one and what they require."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    roots = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    todo = [normalise(re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0]) for r in roots]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name == normalise(project["name"]):
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [normalise(re.split(r"[\s<>=!~\[;(]", r, maxsplit=1)[0]) for r in requires if "extra ==" not in r]
    return seen


def test_every_imported_package_is_declared() -> None:
    modules = imported_modules([ROOT / "tests", ROOT / "benchmarks", ROOT / "jobs", ROOT / "trainer"])
    providers = metadata.packages_distributions()
    declared = declared_closure()
    missing = {
        name: str(path.relative_to(ROOT))
        for name, path in modules.items()
        if name not in OWN
        and name not in sys.stdlib_module_names
        and not {normalise(d) for d in providers.get(name, [name])} & declared
    }
    assert not missing, f"imported but installed by no extra of pyproject.toml: {missing}"


EDITABLE = """
import sys
from importlib.machinery import PathFinder


class Editable:  # setuptools' finder for `pip install -e .`: it answers for jobs' children from its own folder
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        parent, _, _ = fullname.rpartition(".")
        return PathFinder.find_spec(fullname, path=[{installed!r} + "/" + parent]) if parent in ("jobs", "trainer") else None


sys.meta_path.append(Editable)
import jobs.submit  # this copy's, found first
try:
    import jobs.only_there
    print("mixed:", jobs.only_there.__file__)
except ModuleNotFoundError as exc:
    print("missing:", exc.name)
"""


def test_a_module_this_copy_lacks_is_never_taken_from_an_installed_copy(tmp_path: Path) -> None:
    """A run's tool/ snapshot imported on a login node where another version of the project is installed
    (editable): a module the snapshot lacks is missing, not loaded from the installed copy."""
    import subprocess

    installed = tmp_path / "installed"
    (installed / "jobs").mkdir(parents=True)
    (installed / "jobs" / "__init__.py").write_text("")
    (installed / "jobs" / "only_there.py").write_text("")
    script = EDITABLE.format(installed=str(installed))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)}
    )
    assert done.stdout == "missing: jobs.only_there\n", done.stdout + done.stderr


def test_what_runs_with_a_nodes_own_python3_needs_only_the_standard_library() -> None:
    """The Slurm batch step's supervisor runs outside any container with the node's python3 (no torch, no
    pyyaml there), and trainer.requeue is meant to be copied into a user's project: neither may import more."""
    code = "import sys; sys.path.insert(0, sys.argv[1]); import trainer.supervise.slurm, trainer.requeue"
    code += "; print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names) - {'trainer', '__main__'}))"
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]

"""Your modules and the tool's never resolve to each other.

The tool's top-level packages are `trainer` and `jobs`, names your project may well use too (a `trainer.py`
beside `train.py`). Its processes import the tool from its own folder and never from the working folder
(jobs.snapshot.tool_environment); your command runs as Python runs it, your folder first. Only a task class
runs inside the tool's process: `user_imports` imports it with your folder first and, for the names your folder
defines itself, with the tool's modules of that name set aside meanwhile, so that your `import trainer` there
is your `trainer.py`. (A later `import trainer` inside one of your functions gets the tool's: it is the name
this process already holds. A script, `-- python train.py`, has no such limit.)
"""

import contextlib
import importlib
import importlib.machinery
import sys
from collections.abc import Iterator
from pathlib import Path

from trainer import TOOL_PACKAGES


def defines(folder: Path, name: str) -> bool:
    """`folder` holds a module or regular package `name` (a plain folder of that name shadows nothing)."""
    spec = importlib.machinery.PathFinder.find_spec(name, [str(folder)])
    return spec is not None and spec.origin is not None


@contextlib.contextmanager
def user_imports(folder: Path) -> Iterator[None]:
    """Imports made inside find `folder` first, as `python script.py` in it would, and stay possible after
    (the folder stays on sys.path, behind the tool's own packages, which are already imported)."""
    for name in TOOL_PACKAGES:  # ours stay reachable through sys.modules, whatever the folder holds
        importlib.import_module(name)
    entry = str(folder)
    if entry not in sys.path:
        sys.path.insert(0, entry)
    shadowed = [name for name in TOOL_PACKAGES if defines(folder, name)]
    ours = {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] in shadowed}
    try:
        yield
    finally:
        for key in [k for k in sys.modules if k.split(".")[0] in shadowed]:
            del sys.modules[key]  # yours, held by the modules that imported them
        sys.modules.update(ours)

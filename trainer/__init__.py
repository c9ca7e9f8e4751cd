"""The shared DDP trainer. Importing the package does not import torch; its torch-free packages (config,
entry, requeue, run, supervise) say so in their own __init__, and tests/test_entrypoints.py holds them to it.

Its own modules, and jobs', come from this copy's folder only (OwnModules): trainer.imports keeps a task's
modules and the tool's apart within one process.
"""

import importlib.abc
import importlib.machinery
import os
import sys

TOOL_PACKAGES = ("trainer", "jobs")
HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder holding trainer/ and jobs/


class OwnModules(importlib.abc.MetaPathFinder):
    """A module of the tool's packages comes from the package's own folder, or is missing. An installed copy
    of the project elsewhere (`pip install -e .` on a login node) puts a finder on sys.meta_path that answers
    for `jobs.X` from its own folder when this copy (a run's tool/ snapshot) lacks X: two versions mixed in
    one command. This finder answers first, for this copy's packages only."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        top, _, rest = fullname.partition(".")
        own = [os.path.join(HOME, top)]
        if top not in TOOL_PACKAGES or not rest or "." in rest or list(path or []) != own:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, own)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {fullname!r} in {own[0]}", name=fullname)
        return spec


def keep_own_modules() -> None:
    """Install OwnModules (once) ahead of every other finder."""
    if not any(isinstance(finder, OwnModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, OwnModules())


keep_own_modules()  # this copy's modules only: never an installed copy's

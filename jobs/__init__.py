"""The commands (python -m jobs.X, or the installed `slurm-ddp X`): submit, follow and manage runs."""

import os
import sys


def _drop_working_folder() -> None:
    """`python -m jobs.X` puts the working folder first on sys.path, where your own trainer.py would be
    imported as this tool's `trainer`: the tool never imports from it (unless the tool lives there)."""
    cwd, home = os.getcwd(), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if home != cwd:
        sys.path[:] = [p for p in sys.path if p not in ("", ".") and os.path.abspath(p) != cwd]


_drop_working_folder()

from trainer import keep_own_modules  # noqa: E402 - after the working folder is off sys.path

keep_own_modules()

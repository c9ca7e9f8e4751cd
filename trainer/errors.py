"""Errors that are the user's to fix: shown as one line, exit code 2, no traceback."""

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec

P = ParamSpec("P")


class UserError(Exception):
    """Bad input. The message says what is wrong and ends with how to fix it."""


def one_line_errors(main: Callable[P, int]) -> Callable[P, int]:
    """A command's main(): a UserError becomes `error: ...` on stderr and exit code 2."""

    @functools.wraps(main)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return wrapped

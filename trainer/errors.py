"""Errors that are the user's to fix: shown as one line, exit code 2, no traceback."""

import functools
import os
import select
import sys
from collections.abc import Callable
from typing import ParamSpec, TextIO

P = ParamSpec("P")


class UserError(Exception):
    """Bad input. The message says what is wrong and ends with how to fix it."""


def printable(text: str, escaped: bool = False) -> str:
    """Text a run's files or a login node gave, as one line of plain text for a terminal: a newline or a
    terminal escape in it shows as `?`, or, `escaped`, as `\\n` or `\\x1b` (a cell that names a run)."""
    return "".join(c if c.isprintable() else (repr(c)[1:-1] if escaped else "?") for c in text)


def one_line_errors(main: Callable[P, int]) -> Callable[P, int]:
    """A command's main(): a UserError becomes `error: ...` on stderr, one printable line, and exit code 2; a
    reader that closed our output early (`jobs.status RUN | head -3`) ends it quietly (reader_gone)."""

    @functools.wraps(main)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            try:
                return main(*args, **kwargs)
            except UserError as exc:
                print(f"error: {printable(str(exc))}", file=sys.stderr)  # one line, whatever a login node said
                return 2
            finally:
                sys.stdout.flush()  # a closed pipe shows here, where it is caught, not in the flush at exit
        except BrokenPipeError:
            if not (gone := [s for s in (sys.stdout, sys.stderr) if reader_gone(s)]):
                raise  # another pipe (a child's, a connection's): a failure of its own
            devnull = os.open(os.devnull, os.O_WRONLY)
            for stream in gone:  # Python flushes them at exit: onto /dev/null, that flush cannot raise again
                os.dup2(devnull, stream.fileno())
            return 1  # as Python's own exit on EPIPE

    return wrapped


def reader_gone(stream: TextIO) -> bool:
    """The stream is a pipe or socket whose reader closed it (poll says POLLERR there), as Python's docs advise
    handling it (https://docs.python.org/3/library/signal.html#note-on-sigpipe) rather than SIGPIPE's default,
    which would kill the command mid-write whenever any connection of it closes."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0))
    except (OSError, ValueError):  # a stream without a file of its own (a test's capture): not a closed pipe
        return False

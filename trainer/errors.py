"""Errors that are the user's to fix: shown as one line, exit code 2, no traceback."""


class UserError(Exception):
    """Bad input. The message says what is wrong and ends with how to fix it."""

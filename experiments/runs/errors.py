"""The kinds of error a command reports as one line: the user's (`UsageError`, status 2),
the run's (`RunError`, status 1), and a setting's (`ConfigError`, which the command line
turns into a `UsageError`); `one_line`: the line and status a trainer's `main` reports
for any of them, or for a file-system error the user can fix; `exit_status`: a trainer's
`main` around its command, which prints that line and returns the status (`run_status`:
a run's)."""

import errno
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .flags import USER_ERRNOS
from .signals import Abort

__all__ = ["UsageError", "RunError", "ConfigError", "one_line", "exit_status", "run_status"]

#: A failure's line and exit status (`one_line`).
Line = tuple[str, int]


class UsageError(Exception):
    """A bad flag, missing or malformed data, a clash with the run folder or a corrupt
    checkpoint: the CLI prints the message (which says what to do) and exits with status
    2, without a traceback."""


class RunError(Exception):
    """The run failed for a reason the user can act on (a non-finite loss, out of
    memory): the CLI prints the message and exits with status 1, without a traceback."""


class ConfigError(ValueError):
    """A setting that is missing, out of range or contradicts another; the message names
    the flag, the value and what was expected."""


def one_line(e: BaseException) -> tuple[str, int] | None:
    """The line and exit status of a failure that a command reports without a traceback
    (an empty line: argparse printed it already), or None for a bug: a file-system error
    the user can fix (the path, its permissions, the free space; status 2), a
    `UsageError` or corrupt checkpoint (2), a `RunError` (1), an `Abort` (130)."""
    if isinstance(e, SystemExit):  # argparse printed "error: argument --flag: ..."
        return "", e.code if isinstance(e.code, int) else 2
    if isinstance(e, OSError):  # a file or folder the user can fix; anything else is a bug
        if e.errno not in USER_ERRNOS | {errno.ENOTEMPTY} or e.filename is None:
            return None
        return (
            f"error: {e.filename}: {e.strerror or e}. Fix the path, its permissions or the "
            "free space, then run again (with --resume if the run had started).",
            2,
        )
    if isinstance(e, Abort):
        return f"Aborted ({e}).", 130
    if isinstance(e, UsageError | RunError):
        return f"error: {e}", 2 if isinstance(e, UsageError) else 1
    if "experiments.runs.checkpoint.store" in sys.modules:  # (else none was raised; no JAX)
        from .checkpoint.store import CheckpointError

        if isinstance(e, CheckpointError):
            return f"error: {e}", 2
    return None


def exit_status(
    command: Callable[[], int],
    *,
    failed: Callable[[BaseException, Line | None], Line | None] | None = None,
) -> int:
    """The exit status of `command()` (a command's body, returning its status): a failure
    that `one_line` words is printed to stderr as its line, and its status returned; any
    other (a bug) is raised again, with its traceback.

    **Arguments:**

    - `failed`: called as `failed(error, line)` (the line None for a bug) before the line
        is printed; returns the line to print and the status (None: raise the error).
    """
    try:
        return command()
    except BaseException as e:
        known = one_line(e)
        if failed is not None:
            known = failed(e, known)
        if known is None:
            raise
        line, code = known
        if line:
            print(line, file=sys.stderr)
        return code


def run_status(results: Mapping[str, Any]) -> int:
    """The exit status of a run that returned `results`: 130 if interrupted, else 0."""
    return 130 if results["status"] == "interrupted" else 0

"""The kinds of error a command reports as one line: the user's (`UsageError`, status 2),
the run's (`RunError`, status 1), and a setting's (`ConfigError`, which the command line
turns into a `UsageError`)."""

__all__ = ["UsageError", "RunError", "ConfigError"]


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

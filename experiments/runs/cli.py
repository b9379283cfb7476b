"""What the trainers' command lines share: the flags of an invocation (the run folder and
`--resume`/`--overwrite`: `add_run_folder`; when to stop: `add_stopping`; the progress
bar: `add_no_progress`), a flag for each setting of a settings record (`add_settings`,
from its fields' `Setting`s), and the settings a parsed command line sets (`given`).

The flags of an invocation are not settings of the run. Importing this module does not
import JAX.
"""

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from .flags import POSITIVE_INT, flag, number
from .settings import Setting, setting_of, settings, typed

__all__ = [
    "add_run_folder",
    "add_stopping",
    "add_no_progress",
    "refuse_resume_and_overwrite",
    "add_settings",
    "given",
]


def add_run_folder(p: argparse.ArgumentParser, *, text: Callable[[str], str]) -> None:
    """`--out` (its text checked by `text`), `--resume` and `--overwrite`."""
    p.add_argument(
        "--out", required=True, type=text, help="the run's folder: metrics, curves, checkpoints"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in OUT from its last checkpoint, exactly [off]",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start a new run in OUT even if it holds one (its checkpoints, metrics and "
        "results are removed first; without it such a folder is refused) [off]",
    )


def add_stopping(g) -> None:
    """`--stop-at` and `--time-limit` in the parser or group `g`."""
    g.add_argument(
        "--stop-at", type=POSITIVE_INT, help="checkpoint and exit after this step [never]"
    )
    g.add_argument(
        "--time-limit",
        type=number(float, low=0, open_low=True),
        metavar="MINUTES",
        help="checkpoint and exit (status 0, resumable) before MINUTES have passed since the "
        "process started; a limit too short for one step is an error (status 1) [none]",
    )


def add_no_progress(g) -> None:
    """`--no-progress` in the parser or group `g`."""
    g.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (it is shown on a terminal only anyway) [off]",
    )


def refuse_resume_and_overwrite(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`--resume` with `--overwrite`: argparse's one `error:` line and `SystemExit(2)`."""
    if args.resume and args.overwrite:
        p.error(
            "argument --overwrite: --resume continues the run in --out and --overwrite "
            "replaces it; pass one of them"
        )


def _add(group, field: dataclasses.Field, record: Setting, default: str) -> None:
    kwargs: dict[str, Any] = dict(dest=field.name, default=None, help=f"{record.help} [{default}]")
    choices = record.allowed()
    if field.type is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif choices is not None:
        kwargs["choices"] = choices
    elif record.check is not None:
        kwargs["type"] = typed(record.check)
    options = dict(record.cli or {})
    names = options.pop("flags", (flag(field.name),))
    if "action" in options:
        kwargs.pop("type", None)
    kwargs.update(options)
    group.add_argument(*names, **kwargs)


def add_settings(
    config_type: type,
    group_of: Callable[[Setting], Any],
    default_text: Callable[[dataclasses.Field], str],
) -> None:
    """A flag for each setting of the settings dataclass `config_type` but the records the
    trainer writes, in the group `group_of(setting)`: its help line and the default (its
    `default_text`, else `default_text(field)`), its check, its choices (a bool setting:
    `--x`/`--no-x`) and its argparse options (`Setting.cli`); unset, it is None."""
    for field, record in settings(config_type):
        if record.role == "record":
            continue
        default = record.default_text
        _add(group_of(record), field, record, default_text(field) if default is None else default)


def given(args: argparse.Namespace, config_type: type) -> dict[str, Any]:
    """The settings of `config_type` that the command line `args` sets (not None)."""
    names = [f.name for f in dataclasses.fields(config_type) if setting_of(f).role != "record"]
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}

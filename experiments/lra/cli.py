"""The command line of `python -m experiments.lra.train`, generated from `RunConfig`.

Every setting of `config.RunConfig` (but the records the trainer writes) is a flag, with
its field's help line, check and choices, and the default it takes shown as it is: a
value, or each task's where the tasks differ (the LRU's; `--core s4d`/`s5` start from
their authors' settings, `experiments/lra/cores.py`). The flags of the invocation itself
(`--out`, `--resume`, `--stop-at`, ...) are not settings of the run. `parse_args(argv)`
parses a list; `given(args)` is the settings it sets (the unset flags are None).
"""

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from ..runs.flags import POSITIVE_INT, number, text
from ..runs.settings import setting_of, settings, typed
from . import cores, tasks
from .config import RunConfig, flag

__all__ = ["parse_args", "given"]

_GROUPS = {
    "model": "model (defaults: the task's, and the core's for the task)",
    "core": "core settings (each core uses its own; see experiments/lra/cores.py)",
    "optimisation": "optimisation (defaults: the task's, and the core's for the task)",
    "run": "run",
}


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _per_task(name: str, configs: list[RunConfig]) -> str:
    """The value of setting `name` in `configs` (one per task): shared, or each task's."""
    values = {c.task: getattr(c, name) for c in configs}
    if len(set(map(repr, values.values()))) == 1:
        value = next(iter(values.values()))
        return "none" if value is None else _shown(value)
    return "per task: " + ", ".join(f"{t} {_shown(v)}" for t, v in values.items())


def _default_text(field: dataclasses.Field, defaults: dict[str, list[RunConfig]]) -> str:
    """The default of `field` in words: its `default_text`, or its value in a new run of
    each task (the LRU's; for a core setting, that of each core that uses it)."""
    record = setting_of(field)
    if record.default_text is not None:
        return record.default_text
    if record.group != "core":
        return _per_task(field.name, defaults[cores.DEFAULT])
    return "; ".join(
        f"{name}: {_per_task(field.name, defaults[name])}"
        for name in cores.names()
        if field.name in cores.get_core(name).settings
    )


def _add(group, field: dataclasses.Field, defaults: dict[str, list[RunConfig]]) -> None:
    record = setting_of(field)
    help_text = f"{record.help} [{_default_text(field, defaults)}]"
    kwargs: dict[str, Any] = dict(dest=field.name, default=None, help=help_text)
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.lra.train",
        description="Train a deep LRU, or a baseline core, on a Long Range Arena task. Unset "
        "flags take the task's defaults (the LRU: paper Table 9, experiments/lra/tasks.py; "
        "--core s4d/s5: their authors' per-task settings, experiments/lra/cores.py) or, "
        "with --resume, the values saved in OUT/config.json.",
    )
    p.add_argument(
        "--out", required=True, type=text, help="output folder: metrics, curves, checkpoints"
    )
    p.add_argument(
        "--resume", action="store_true", help="continue from OUT/last.eqx, exactly [off]"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start a new run in OUT even if it holds one (its checkpoints, metrics and "
        "results are removed first; without it such a folder is refused) [off]",
    )
    p.add_argument(
        "--allow-data-change",
        action="store_true",
        help="with --resume: continue although the data differ from the checkpoint's [off]",
    )
    defaults = {c: [RunConfig.defaults(t, c) for t in tasks.names()] for c in cores.names()}
    groups = {name: p.add_argument_group(title) for name, title in _GROUPS.items()}
    for field, record in settings(RunConfig):
        if record.role != "record":
            _add(groups[record.group], field, defaults)
    _invocation(groups["run"])
    p.epilog = f"cores: {', '.join(cores.names())}; tasks: {', '.join(tasks.names())}."
    return p


def _invocation(g) -> None:
    """The flags of this invocation, not settings of the run."""
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
    g.add_argument(
        "--distributed",
        choices=("auto", "on", "off"),
        default="auto",
        help="multi-host: call jax.distributed.initialize() ('auto': when "
        "JAX_COORDINATOR_ADDRESS or a SLURM/Open MPI launch with >1 task is detected) [auto]",
    )
    g.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (it is shown on a terminal only anyway) [off]",
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line `argv` (default `sys.argv[1:]`) parsed; a bad flag, or `--resume`
    with `--overwrite`, is argparse's one `error:` line and `SystemExit(2)`."""
    p = _parser()
    args = p.parse_args(argv)
    if args.resume and args.overwrite:
        p.error(
            "argument --overwrite: --resume continues the run in --out and --overwrite "
            "replaces it; pass one of them"
        )
    return args


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of `RunConfig` that the command line sets (not None)."""
    names = [f.name for f, s in settings(RunConfig) if s.role != "record"]
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}

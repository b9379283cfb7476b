"""The command line of `python -m experiments.lra.train`, generated from `RunConfig`.

Every setting of `config.RunConfig` (but the records the trainer writes) is a flag, with
its field's help line, check and choices, and the default it takes shown as it is: a
value, or each task's where the tasks differ (the LRU's; `--core s4d`/`s5` start from
their authors' settings, `experiments/lra/cores.py`). The flags of the invocation itself
(`--out`, `--resume`, `--stop-at`, ...) are not settings of the run; those every trainer
has, and the making of a setting's flag, are `runs.cli`'s. `parse_args(argv)` parses a
list; `given(args)` is the settings it sets (the unset flags are None).
"""

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from ..runs import cli as run_cli
from ..runs.flags import text
from ..runs.settings import setting_of
from . import cores, tasks
from .config import RunConfig

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
    """The default of `field` in words: its value in a new run of each task (the LRU's;
    for a core setting, that of each core that uses it)."""
    if setting_of(field).group != "core":
        return _per_task(field.name, defaults[cores.DEFAULT])
    return "; ".join(
        f"{name}: {_per_task(field.name, defaults[name])}"
        for name in cores.names()
        if field.name in cores.get_core(name).settings
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.lra.train",
        description="Train a deep LRU, or a baseline core, on a Long Range Arena task. Unset "
        "flags take the task's defaults (the LRU: paper Table 9, experiments/lra/tasks.py; "
        "--core s4d/s5: their authors' per-task settings, experiments/lra/cores.py) or, "
        "with --resume, the values saved in OUT/config.json.",
    )
    run_cli.add_run_folder(p, text=text)
    p.add_argument(
        "--allow-data-change",
        action="store_true",
        help="with --resume: continue although the data differ from the checkpoint's [off]",
    )
    defaults = {c: [RunConfig.defaults(t, c) for t in tasks.names()] for c in cores.names()}
    groups = {name: p.add_argument_group(title) for name, title in _GROUPS.items()}
    run_cli.add_settings(
        RunConfig, lambda record: groups[record.group], lambda f: _default_text(f, defaults)
    )
    _invocation(groups["run"])
    p.epilog = f"cores: {', '.join(cores.names())}; tasks: {', '.join(tasks.names())}."
    return p


def _invocation(g) -> None:
    """The flags of this invocation, not settings of the run."""
    run_cli.add_stopping(g)
    g.add_argument(
        "--distributed",
        choices=("auto", "on", "off"),
        default="auto",
        help="multi-host: call jax.distributed.initialize() ('auto': when "
        "JAX_COORDINATOR_ADDRESS or a SLURM/Open MPI launch with >1 task is detected) [auto]",
    )
    run_cli.add_no_progress(g)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line `argv` (default `sys.argv[1:]`) parsed; a bad flag, or `--resume`
    with `--overwrite`, is argparse's one `error:` line and `SystemExit(2)`."""
    p = _parser()
    args = p.parse_args(argv)
    run_cli.refuse_resume_and_overwrite(p, args)
    return args


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of `RunConfig` that the command line sets (not None)."""
    return run_cli.given(args, RunConfig)

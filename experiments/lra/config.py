"""The settings of one LRA run: a frozen `RunConfig`, its checks, defaults and JSON form.

Every setting is a field holding its record (`experiments.runs.settings.Setting`, shared
with the language model's trainer): a help line, a check, a command-line group, and its role
(`role`):

- `"binds"`: the trajectory of the run depends on it, so `--resume` refuses to change it
  and a checkpoint whose value differs belongs to another run (`TRAINING_KEYS`); it also
  defines the compiled program, except `seed` and `max_examples`;
- `"program"`: it changes the compiled program, not what it computes (up to rounding):
  `remat`, `sequence_parallel` (`PROGRAM_KEYS` holds these and the binding ones that shape
  the program);
- `"run"`: where data comes from and what is logged or saved when;
- `"record"`: written by the trainer, not set (the run's id, the backend's choices).

A new run's config is `RunConfig.defaults(task, core)` (the task's record for the LRU,
Table 9; the core's official per-task settings over it, `experiments/lra/cores.py`) merged
with the flags (`new_run`); a resumed run's is its saved `config.json` (`from_json`, which
fills settings added since it was written) merged with the flags that may change
(`resumed_run`). `to_json` is what `config.json` holds. The command line
(`experiments/lra/cli.py`) is generated from the fields.
"""

import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from ..runs import signals as _signals
from ..runs.errors import ConfigError
from ..runs.flags import (
    FRACTION,
    NONNEGATIVE_FLOAT32,
    POSITIVE_FLOAT32,
    POSITIVE_INT,
    SEED,
    STEPS,
    flag,
    input_folder,
    number,
    text,
)
from ..runs.numbers import FLOAT32_TINY, rates_problem, ring_problem
from ..runs.settings import Role, check_value, setting, setting_of, settings
from . import cores, tasks

__all__ = [
    "ConfigError",
    "RunConfig",
    "TRAINING_KEYS",
    "PROGRAM_KEYS",
    "CORE_KEYS",
    "flag",
]


def _setting(help: str, *, role: Role, group: str, **options) -> Any:
    """A `RunConfig` field (`runs.settings.setting`): `program` whether it shapes the
    compiled program (default: every binding setting); `cli` argparse options replacing
    the generated ones; `default_text` the default as `--help` shows it (default: the
    value, or each task's)."""
    return setting(help, role=role, group=group, **options)


def _binds(help: str, group: str, check=None, **options) -> Any:
    """A setting that binds a resumed run."""
    return _setting(help, role="binds", group=group, check=check, **options)


def _run(help: str, check=None, **options) -> Any:
    """A setting of how the run goes (may change on --resume)."""
    return _setting(help, role="run", group="run", check=check, **options)


_EXAMPLES = number(int, low=1, high=2**63 - 1, open_high=False, why="an int64 index")
# An initial step Delta = 1e30 overflows the optimiser's float32 second moment of
# log Delta's gradient (about Delta |A|) at the first update, which no learning rate
# avoids; the published ranges end at 0.1 and 1e6 still trains.
_STEP_SIZE = number(
    float, low=FLOAT32_TINY, high=1e6, open_high=False,
    why="larger initial steps overflow the float32 gradient of log Delta",
)  # fmt: skip


def _folder_read(value: str) -> str:
    """`--data-root`: an existing folder (checked when the flag is parsed), kept as typed."""
    input_folder(value)
    return value


#: `--c-init`'s choices: `eqx_lru.baselines.C_INITS`, named here so that the command line
#: imports no JAX (a test checks they agree).
C_INITS = ("trunc_standard_normal", "lecun_normal", "complex_normal")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The settings of one run; see the module docstring for the roles. Fields that a core
    does not use are None (`cores.Core.settings`)."""

    # fmt: off
    # What is trained, and how: binds a resumed run (in this order, the order of --resume's
    # report of what differs).
    task: str = _binds("the LRA task", "run", choices=tasks.names,
                       default_text="none: required unless --resume")
    core: str = _binds("the recurrent core (experiments/lra/cores.py)", "model",
                       choices=cores.names, default=cores.DEFAULT)
    form: str = _binds("the core's form: complex states, or real 2x2 blocks", "model",
                       choices=("complex", "real"), default="complex")
    depth: int = _binds("number of blocks", "model", POSITIVE_INT)
    d_model: int = _binds("H, features per position", "model", POSITIVE_INT)
    d_state: int = _binds("N (S5: P), the state size of each layer", "model", POSITIVE_INT)
    steps: int = _binds("optimiser steps (the schedule's length)", "optimisation", STEPS)
    batch_size: int = _binds("global batch size (all devices together)", "optimisation",
                             POSITIVE_INT)
    lr: float = _binds("peak (base) learning rate", "optimisation", POSITIVE_FLOAT32)
    lr_factor: float = _binds("the recurrent parameters get lr x this", "optimisation",
                              POSITIVE_FLOAT32)
    weight_decay: float = _binds("AdamW's decoupled weight decay (not on the recurrent "
                                 "parameters)", "optimisation", NONNEGATIVE_FLOAT32)
    dropout: float = _binds("dropout rate in each block", "model", FRACTION)
    warmup_fraction: float = _binds("fraction of the steps with a linear warmup", "optimisation",
                                    FRACTION)
    bidirectional: bool = _binds("a second core over the reversed sequence in each block", "model")
    r_min: float | None = _binds("LRU: smallest eigenvalue modulus at init (Table 8)", "core",
                                 FRACTION)
    r_max: float | None = _binds("LRU: largest eigenvalue modulus at init (Table 8)", "core",
                                 FRACTION)
    max_phase: float | None = _binds("LRU: eigenvalue phases at init in [0, this]", "core",
                                     POSITIVE_FLOAT32)
    glu: Literal["full", "half"] = _binds(
        "the GLU after each core: 'half' has no extra linear map (§D.1)", "model",
        choices=("full", "half"))
    norm: Literal["batch", "layer"] = _binds("normalisation in each block", "model",
                                             choices=("batch", "layer"))
    pooling: Literal["mean", "last"] = _binds("pooling over positions before the head", "model",
                                              choices=("mean", "last"))
    seed: int = _binds("model init, data order and dropout", "optimisation", SEED, default=0,
                       program=False)
    max_examples: int | None = _binds("use at most N examples of each split (quick runs)", "run",
                                      _EXAMPLES, program=False, default_text="all")
    method: str | None = _binds("scan method of the recurrent layers ('auto': chosen per "
                                "backend)", "model", default="auto",
                                choices=("auto", "sequential", "associative"))
    blocks: int | None = _binds("S5: J, HiPPO-N blocks of the initial state matrix", "core",
                                POSITIVE_INT)
    c_init: str | None = _binds("S5: initialisation of C (its --C_init)", "core",
                                choices=C_INITS)
    s4d_init: str | None = _binds("S4D: initial A and B (S4D-Lin, S4D-Inv, S4D-LegS)", "core",
                                  choices=("lin", "inv", "legs"))
    dt_min: float | None = _binds("S4D, S5: smallest initial step Delta", "core", _STEP_SIZE)
    dt_max: float | None = _binds("S4D, S5: largest initial step Delta", "core", _STEP_SIZE)
    # How the run goes: may change on --resume.
    data_root: str | None = _run("folder containing the task's data (searched up to 4 levels "
                                 "deep)", default_text="required", cli=dict(type=_folder_read))
    cache_dir: str | None = _run("cache the built arrays here (recommended; needed for PathX)",
                                 default_text="none", cli=dict(type=text))
    eval_every: int = _run("validate every N steps", POSITIVE_INT, default_text="one epoch")
    checkpoint_every: int = _run("write last.eqx every N steps", POSITIVE_INT, default=1000)
    log_every: int = _run("a train record every N steps", POSITIVE_INT, default=50)
    eval_batch_size: int | None = _run("batch size of evaluation", POSITIVE_INT,
                                       default_text="--batch-size")
    remat: bool = _setting("recompute each block in the backward pass: a quarter of the memory "
                           "(experiments/lra/MEMORY.md)", role="program", group="model")
    deterministic: bool = _setting(
        "allow XLA's faster nondeterministic GPU ops (resume is then not bit-exact on GPUs)",
        role="program", group="run", default=True, program=False, default_text="deterministic",
        cli=dict(flags=("--nondeterministic",), action="store_const", const=False),
    )
    sequence_parallel: int | None = _setting(
        "split every sequence over N devices (a data x sequence mesh of the visible devices, "
        "eqx_lru.SequenceParallel); the global batch is unchanged", role="program",
        group="run", check=POSITIVE_INT, cli=dict(metavar="N"), default_text="1",
    )
    save_signals: str = _run(
        "on these signals (a batch scheduler's warning before a kill: USR1, USR2, XCPU, "
        "ALRM, PWR, comma-separated, or 'none') save a checkpoint and stop, status 0, "
        "resumable", _signals.parse_signals, default="USR1,USR2,XCPU",
        cli=dict(metavar="SIGNALS"),
    )
    # Written by the trainer.
    run_id: str | None = _setting("the run's id (binds its checkpoints)", role="record",
                                  group="run")
    xla_flags: str | None = _setting("XLA_FLAGS as JAX saw them", role="record", group="run")
    allocator: str | None = _setting("the GPU allocator's mode", role="record", group="run")
    # fmt: on

    def __post_init__(self):
        for field in dataclasses.fields(self):
            _check_field(self, field)
        core = cores.get_core(self.core)
        if self.form not in core.forms:
            raise ConfigError(
                f"--core {self.core} has the form(s) {', '.join(core.forms)}, not "
                f"--form {self.form}."
            )
        for problem in (
            ring_problem(self.r_min, self.r_max, self.max_phase),
            rates_problem(self.lr, self.lr_factor, self.weight_decay),
            core.check(self),
        ):
            if problem is not None:
                raise ConfigError(problem)
        if self.dt_min is not None and self.dt_max is not None and self.dt_min > self.dt_max:
            raise ConfigError(f"need --dt-min <= --dt-max, got {self.dt_min} > {self.dt_max}.")

    # ------------------------------------------------------------------ building one

    @classmethod
    def defaults(cls, task: str, core: str = cores.DEFAULT) -> "RunConfig":
        """A new run of `core` on `task` without flags: the task's record (Table 9 for the
        LRU), with the core's official settings for the task over it (`cores.Core`) and
        the settings the core does not use as None."""
        entry = tasks.get_task(task)
        values: dict[str, Any] = {"task": task, "core": core, **entry.settings}
        values["remat"] = entry.remat
        record = cores.get_core(core)
        official = record.settings_for(task)
        values.update(official)
        if "batch_size" in official and "eval_every" not in entry.defaults:
            values["eval_every"] = max(1, entry.train_size // values["batch_size"])
        return cls(**_core_fields(record, values, given={}))

    def replace(self, **changes) -> "RunConfig":
        """A copy with `changes`, checked."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The flat mapping `config.json` holds (every field)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, saved: Mapping[str, Any], *, where: str = "config.json") -> "RunConfig":
        """The config a saved `config.json` (`saved`) describes. Settings added since it was
        written take the values the trainer then used: the LRU core, the task's LRU
        settings, no remat, and the core's defaults for its own settings."""
        unknown = [k for k in saved if k not in _NAMES]
        if unknown or saved.get("task") not in tasks.names():
            what = f"unknown settings {unknown}" if unknown else f"task {saved.get('task')!r}"
            raise ConfigError(
                f"{where} is not a run's config ({what}); it was edited or written by another "
                "tool. Restore the run's own file, or start a new run with another --out."
            )
        core = saved.get("core", cores.DEFAULT)
        base = cls.defaults(saved["task"]).to_json()  # the LRU's: what old runs trained
        base.update(remat=False, run_id=None, xla_flags=None, allocator=None)
        record = cores.get_core(core) if core in cores.names() else None
        if record is not None:
            base.update({k: None for k in CORE_KEYS if k not in record.settings})
            base.update(record.defaults)
            if not record.scan:
                base["method"] = None
        return cls(**{**base, **saved})


# The fields, by role (in field order: the order of --resume's report of what differs).
_NAMES = tuple(f.name for f in dataclasses.fields(RunConfig))
#: Settings that determine the trajectory of a run; `--resume` refuses to change them.
TRAINING_KEYS = tuple(f.name for f, s in settings(RunConfig) if s.role == "binds")
#: Settings the traced programs depend on (not the seed, nor the data size).
PROGRAM_KEYS = tuple(f.name for f, s in settings(RunConfig) if s.program)
#: Settings of one core or another (`cores.Core.settings`); None where the core has none.
CORE_KEYS = tuple(f.name for f, s in settings(RunConfig) if s.group == "core")


def _check_field(config: RunConfig, field: dataclasses.Field) -> None:
    value, record = getattr(config, field.name), setting_of(field)
    if value is None:
        if record.role in ("record", "run") or field.name in (*CORE_KEYS, "method"):
            return  # optional, or not used by this core
        if field.name in ("max_examples", "sequence_parallel"):
            return
        raise ConfigError(f"{flag(field.name)} is required; it has no value.")
    check_value(value, field, name=flag(field.name))


def _core_fields(
    record: "cores.Core", values: dict[str, Any], given: Mapping[str, Any]
) -> dict[str, Any]:
    """`values` with the core's own settings taken from its defaults where absent, the
    settings it does not use as None and those it derives (`Core.derive`) where not
    `given`; a given flag it would not use is refused."""
    unknown = [k for k in (*record.settings, *record.defaults) if k not in CORE_KEYS]
    if unknown:
        raise ConfigError(
            f"core {record.name!r} names {unknown}, which are not core settings of RunConfig "
            f"{CORE_KEYS}; add a field (group 'core') to RunConfig first."
        )
    unused = [k for k in CORE_KEYS if k not in record.settings]
    if not record.scan:
        unused.append("method")
    refused = [f"{flag(k)} {given[k]}" for k in unused if given.get(k) is not None]
    if "form" in given and given["form"] not in record.forms:
        refused.append(f"--form {given['form']}")
    if refused:
        raise ConfigError(
            f"--core {record.name} {record.unused_reason}: {' and '.join(refused)} would not "
            "be used. Drop it, or choose another --core."
        )
    out = {**values, **{k: None for k in unused}}
    for k in record.settings:
        if out.get(k) is None:
            out[k] = record.defaults.get(k)
    out.update({k: v for k, v in record.derive(out).items() if k not in given})
    return out


def new_run(task: str | None, given: Mapping[str, Any]) -> RunConfig:
    """A new run's config: `RunConfig.defaults(task, core)` with the settings `given` (the
    flags set), a fresh run id, and `eval_batch_size` defaulting to `batch_size`."""
    if task is None:
        raise ConfigError("--task is required (unless --resume picks it up from OUT/config.json).")
    core = given.get("core", cores.DEFAULT)
    base = RunConfig.defaults(task, core)
    values = _core_fields(cores.get_core(core), {**base.to_json(), **given}, given)
    values["run_id"] = uuid.uuid4().hex  # binds every checkpoint to this run
    if values.get("eval_batch_size") is None:
        values["eval_batch_size"] = values["batch_size"]
    return RunConfig(**values)


def resumed_run(saved: Mapping[str, Any], given: Mapping[str, Any], *, out: str) -> RunConfig:
    """A resumed run's config: the saved `config.json` (`saved`, read from the run folder
    `out`) with the settings `given` that do not bind the run.

    **Raises:** `ConfigError` if a given setting that binds the run differs from the saved
    one (naming each, in `TRAINING_KEYS` order), or the saved config is not valid."""
    config = RunConfig.from_json(saved, where=f"{out}/config.json")
    changed = {
        k: (getattr(config, k), given[k])
        for k in TRAINING_KEYS
        if k in given and getattr(config, k) != given[k]
    }
    if changed:
        diff = "; ".join(f"{k}: {a!r} in the run, {b!r} now" for k, (a, b) in changed.items())
        raise ConfigError(
            f"--resume continues the run in {out} exactly, so its settings "
            f"cannot change ({diff}). Drop those flags, or start a new run with "
            "another --out."
        )
    values = {**config.to_json(), **given}
    values.setdefault("run_id", None)
    if values["run_id"] is None:
        values["run_id"] = uuid.uuid4().hex  # runs from before run ids
    if values.get("eval_batch_size") is None:
        values["eval_batch_size"] = values["batch_size"]
    return RunConfig(**values)

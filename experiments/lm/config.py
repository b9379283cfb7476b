"""The settings of one language-model run: a frozen `LMConfig`, its presets and checks.

As the LRA trainer's `RunConfig` (`experiments/lra/config.py`), every setting is a field
holds its record (`experiments.runs.settings.Setting`, shared with the LRA trainer): its
help line, its check and its role, and the command line
(`experiments/lm/cli.py`) is generated from the fields:

- `"binds"`: the run's trajectory depends on it, so `--resume` refuses to change it and a
  checkpoint whose value differs belongs to another run (`TRAINING_KEYS`);
- `"run"`: where the corpus is and what is logged or saved when (may change on
  `--resume`);
- `"record"`: written by the trainer (the run's id, its corpus's fingerprint).

A new run's settings are a preset's (`PRESETS`: `cpu`, the default, trains in minutes on
two CPU cores; `gpu` is a larger model for one GPU) with the flags over them.
"""

import dataclasses
import math
import uuid
from collections.abc import Mapping
from typing import Any

from ..runs.errors import ConfigError
from ..runs.flags import (
    FRACTION,
    NONNEGATIVE_FLOAT32,
    POSITIVE_FLOAT32,
    POSITIVE_INT,
    SEED,
    STEPS,
    flag,
)
from ..runs.numbers import rates_problem, ring_problem
from ..runs.settings import Role, check_value, setting, setting_of, settings
from ..runs.signals import parse_signals

__all__ = [
    "ConfigError",
    "LMConfig",
    "PRESETS",
    "TRAINING_KEYS",
    "new_run",
    "resumed_run",
    "utf8_text",
]


def _setting(help: str, role: Role, check=None, choices=None, default=None) -> Any:
    """A field of `LMConfig` (`runs.settings.setting`, the LRA trainer's record too):
    `check` is an argparse type (the text of a number, or text to its canonical form);
    `choices` the values allowed."""
    return setting(help, role=role, check=check, choices=choices, default=default)


def utf8_text(value: str) -> str:
    """Text that can be written and read back as UTF-8 (not a file name's undecodable
    bytes, which Python holds as surrogate escapes)."""
    try:
        value.encode()
    except UnicodeEncodeError:
        raw = value.encode(errors="surrogateescape")
        raise ValueError(f"expected UTF-8 text, got bytes that are not UTF-8: {raw!r}") from None
    return value


def _sha256(value: str) -> str:
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(f"expected a SHA-256 (64 lowercase hexadecimal digits), got {value!r}")
    return value


def _check_field(value: Any, field: dataclasses.Field, name: str | None = None) -> None:
    """Refuse a setting's value (from a flag or a run's `config.json`) of the wrong kind
    or out of its range, naming it as `name` (default: its flag)."""
    record, name = setting_of(field), name or flag(field.name)
    if value is None:
        if record.role in ("run", "record"):
            return
        raise ConfigError(f"{name} is required; it has no value.")
    check_value(value, field, name=name)


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """The settings of one run (module docstring); `None` only where a setting is optional."""

    # fmt: off
    preset: str = _setting("the preset the other settings start from", "binds",
                           choices=("cpu", "gpu"), default="cpu")
    form: str = _setting("the LRU's form: complex states, or real 2x2 blocks", "binds",
                         choices=("complex", "real"), default="complex")
    depth: int = _setting("number of blocks", "binds", POSITIVE_INT, default=2)
    d_model: int = _setting("H, features per position", "binds", POSITIVE_INT, default=128)
    d_state: int = _setting("N, complex modes of each LRU", "binds", POSITIVE_INT, default=128)
    r_min: float = _setting("smallest eigenvalue modulus at init", "binds", FRACTION,
                            default=0.9)
    r_max: float = _setting("largest eigenvalue modulus at init", "binds", FRACTION,
                            default=0.999)
    max_phase: float = _setting("eigenvalue phases at init in [0, this]", "binds", POSITIVE_FLOAT32,
                                default=2 * math.pi)
    dropout: float = _setting("dropout rate in each block", "binds", FRACTION, default=0.0)
    streams: int = _setting("B, streams trained side by side (the batch)", "binds",
                            POSITIVE_INT, default=16)
    chunk: int = _setting("L, bytes per stream per step (the truncated-BPTT window)", "binds",
                          POSITIVE_INT, default=128)
    steps: int = _setting("optimiser steps (the schedule's length)", "binds", STEPS,
                          default=1000)
    lr: float = _setting("peak learning rate", "binds", POSITIVE_FLOAT32, default=3e-3)
    lr_factor: float = _setting("the recurrent parameters get lr x this", "binds", POSITIVE_FLOAT32,
                                default=0.5)
    weight_decay: float = _setting("AdamW's weight decay (not on the recurrent parameters)",
                                   "binds", NONNEGATIVE_FLOAT32, default=0.01)
    warmup_fraction: float = _setting("fraction of the steps with a linear warmup", "binds",
                                      FRACTION, default=0.05)
    seed: int = _setting("model init and dropout", "binds", SEED, default=0)
    train_bytes: int = _setting("bytes of the training split", "binds", POSITIVE_INT,
                                default=8 << 20)
    val_bytes: int = _setting("bytes of the validation split", "binds", POSITIVE_INT,
                              default=64 << 10)
    test_bytes: int = _setting("bytes of the test split", "binds", POSITIVE_INT,
                               default=256 << 10)
    eval_streams: int = _setting("streams when scoring held-out text", "binds", POSITIVE_INT,
                                 default=16)
    eval_chunk: int = _setting("bytes per chunk when scoring held-out text", "binds",
                               POSITIVE_INT, default=512)
    corpus: str | None = _setting("folder of *.py files to learn (default: the Python "
                                  "standard library)", "run", utf8_text)
    eval_every: int = _setting("score the validation split every N steps", "run",
                               POSITIVE_INT, default=100)
    log_every: int = _setting("a train record every N steps", "run", POSITIVE_INT,
                              default=20)
    checkpoint_every: int = _setting("write last.eqx every N steps", "run", POSITIVE_INT,
                                     default=100)
    save_signals: str = _setting("on these signals (a batch scheduler's warning before a "
                                 "kill: USR1, USR2, XCPU, ALRM, PWR, comma-separated, or "
                                 "'none') save a checkpoint and stop, status 0, resumable",
                                 "run", parse_signals, default="USR1,USR2,XCPU")
    run_id: str | None = _setting("the run's id (binds its checkpoints)", "record", utf8_text)
    corpus_sha256: str | None = _setting("the SHA-256 of the corpus's three splits", "record",
                                         _sha256)
    # fmt: on

    def __post_init__(self):
        for field in dataclasses.fields(self):
            _check_field(getattr(self, field.name), field)
        if not self.r_min <= self.r_max:
            raise ConfigError(
                f"need --r-min <= --r-max, got --r-min {self.r_min} > --r-max {self.r_max}."
            )
        for problem in (
            ring_problem(self.r_min, self.r_max, self.max_phase),
            rates_problem(self.lr, self.lr_factor, self.weight_decay),
        ):
            if problem is not None:
                raise ConfigError(problem)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: Each preset's settings over the field defaults (the `cpu` preset is the defaults).
PRESETS: dict[str, dict[str, Any]] = {
    "cpu": {},
    "gpu": dict(
        depth=6,
        d_model=512,
        d_state=256,
        dropout=0.1,
        streams=64,
        chunk=512,
        steps=10_000,
        lr=1e-3,
        train_bytes=24 << 20,
        val_bytes=1 << 20,
        test_bytes=1 << 20,
        eval_streams=64,
        eval_chunk=1024,
        eval_every=500,
        log_every=100,
        checkpoint_every=1000,
    ),
}

_NAMES = tuple(f.name for f in dataclasses.fields(LMConfig))
#: The settings that determine a run's trajectory (`--resume` refuses to change them).
TRAINING_KEYS = tuple(f.name for f, s in settings(LMConfig) if s.role == "binds")


def new_run(given: Mapping[str, Any]) -> LMConfig:
    """A new run's settings: the preset's, the flags `given` over them, a fresh run id."""
    preset = given.get("preset", "cpu")
    if preset not in PRESETS:
        raise ConfigError(f"--preset: expected one of {tuple(PRESETS)}, got {preset!r}.")
    return LMConfig(**{**PRESETS[preset], **given, "run_id": uuid.uuid4().hex})


def _not_settings(saved: Any) -> str | None:
    """What makes `saved` (a parsed `config.json`) not a run's settings, or None."""
    if not isinstance(saved, dict):
        return "not a JSON object"
    unknown = [k for k in saved if k not in _NAMES]
    if unknown:
        return f"unknown settings {unknown}"
    return None if isinstance(saved.get("run_id"), str) else "no run id"


def resumed_run(saved: Any, given: Mapping[str, Any], *, out: str) -> LMConfig:
    """A resumed run's settings: `saved` (its `config.json`) with the flags `given` that do
    not bind the run.

    **Raises:** `ConfigError` if `saved` is not a run's settings (naming the file and the
    setting), or a given binding flag differs from the saved value."""
    where = f"{out}/config.json"
    what = _not_settings(saved)
    if what is not None:
        raise ConfigError(
            f"{where} is not a language-model run's settings ({what}); it was edited or "
            "written by another tool. Restore the run's own file, or start a new run with "
            "another --out."
        )
    try:
        for field in dataclasses.fields(LMConfig):
            if field.name in saved:
                _check_field(saved[field.name], field, name=f"its {field.name!r}")
        run = LMConfig(**saved)
    except ConfigError as e:
        raise ConfigError(
            f"{where} is corrupt: {e} It was edited or written by another tool. Restore the "
            "run's own file, or start a new run with another --out."
        ) from None
    changed = {k: (saved.get(k), v) for k, v in given.items() if k in TRAINING_KEYS}
    changed = {k: ab for k, ab in changed.items() if ab[0] != ab[1]}
    if changed:
        diff = "; ".join(f"{flag(k)}: {a!r} in the run, {b!r} now" for k, (a, b) in changed.items())
        raise ConfigError(
            f"--resume continues the run in {out} exactly, so its settings cannot change "
            f"({diff}). Drop those flags, or start a new run with another --out."
        )
    return dataclasses.replace(run, **given)

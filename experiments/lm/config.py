"""The settings of one language-model run: a frozen `LMConfig`, its presets and checks.

As the LRA trainer's `RunConfig` (`experiments/lra/config.py`), every setting is a field
whose metadata holds its help line, its check and its role, and the command line
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

from ..runs.flags import flag, number

__all__ = ["ConfigError", "LMConfig", "PRESETS", "TRAINING_KEYS", "new_run", "resumed_run"]


class ConfigError(ValueError):
    """A setting out of range, or a change `--resume` refuses; the message names the flag."""


_POSITIVE_INT = number(int, low=1)
_NATURAL = number(int, low=0)
_POSITIVE = number(float, low=0, open_low=True)
_FRACTION = number(float, low=0, high=1)
_NONNEGATIVE = number(float, low=0)
_MODULUS = number(float, low=0, high=1)


def _setting(help: str, role: str, check=None, choices=None, default=None) -> Any:
    meta = dict(help=help, role=role, check=check, choices=choices)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """The settings of one run (module docstring); `None` only where a setting is optional."""

    # fmt: off
    preset: str = _setting("the preset the other settings start from", "binds",
                           choices=("cpu", "gpu"), default="cpu")
    form: str = _setting("the LRU's form: complex states, or real 2x2 blocks", "binds",
                         choices=("complex", "real"), default="complex")
    depth: int = _setting("number of blocks", "binds", _POSITIVE_INT, default=2)
    d_model: int = _setting("H, features per position", "binds", _POSITIVE_INT, default=128)
    d_state: int = _setting("N, complex modes of each LRU", "binds", _POSITIVE_INT, default=128)
    r_min: float = _setting("smallest eigenvalue modulus at init", "binds", _MODULUS,
                            default=0.9)
    r_max: float = _setting("largest eigenvalue modulus at init", "binds", _MODULUS,
                            default=0.999)
    max_phase: float = _setting("eigenvalue phases at init in [0, this]", "binds", _POSITIVE,
                                default=2 * math.pi)
    dropout: float = _setting("dropout rate in each block", "binds", _FRACTION, default=0.0)
    streams: int = _setting("B, streams trained side by side (the batch)", "binds",
                            _POSITIVE_INT, default=16)
    chunk: int = _setting("L, bytes per stream per step (the truncated-BPTT window)", "binds",
                          _POSITIVE_INT, default=128)
    steps: int = _setting("optimiser steps (the schedule's length)", "binds", _POSITIVE_INT,
                          default=1000)
    lr: float = _setting("peak learning rate", "binds", _POSITIVE, default=3e-3)
    lr_factor: float = _setting("the recurrent parameters get lr x this", "binds", _POSITIVE,
                                default=0.5)
    weight_decay: float = _setting("AdamW's weight decay (not on the recurrent parameters)",
                                   "binds", _NONNEGATIVE, default=0.01)
    warmup_fraction: float = _setting("fraction of the steps with a linear warmup", "binds",
                                      _FRACTION, default=0.05)
    seed: int = _setting("model init and dropout", "binds", _NATURAL, default=0)
    train_bytes: int = _setting("bytes of the training split", "binds", _POSITIVE_INT,
                                default=8 << 20)
    val_bytes: int = _setting("bytes of the validation split", "binds", _POSITIVE_INT,
                              default=64 << 10)
    test_bytes: int = _setting("bytes of the test split", "binds", _POSITIVE_INT,
                               default=256 << 10)
    eval_streams: int = _setting("streams when scoring held-out text", "binds", _POSITIVE_INT,
                                 default=16)
    eval_chunk: int = _setting("bytes per chunk when scoring held-out text", "binds",
                               _POSITIVE_INT, default=512)
    corpus: str | None = _setting("folder of *.py files to learn (default: the Python "
                                  "standard library)", "run")
    eval_every: int = _setting("score the validation split every N steps", "run",
                               _POSITIVE_INT, default=100)
    log_every: int = _setting("a train record every N steps", "run", _POSITIVE_INT,
                              default=20)
    checkpoint_every: int = _setting("write last.eqx every N steps", "run", _POSITIVE_INT,
                                     default=100)
    run_id: str | None = _setting("the run's id (binds its checkpoints)", "record")
    corpus_sha256: str | None = _setting("the SHA-256 of the corpus's three splits", "record")
    # fmt: on

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value, meta = getattr(self, field.name), field.metadata
            if value is None:
                if meta["role"] in ("run", "record"):
                    continue
                raise ConfigError(f"{flag(field.name)} is required; it has no value.")
            if meta["choices"] is not None and value not in meta["choices"]:
                raise ConfigError(
                    f"{flag(field.name)}: expected one of {meta['choices']}, got {value!r}."
                )
            if meta["check"] is not None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise ConfigError(f"{flag(field.name)}: expected a number, got {value!r}.")
                try:
                    meta["check"](str(value))
                except Exception as e:  # argparse.ArgumentTypeError, in the check's words
                    raise ConfigError(f"{flag(field.name)}: {e}.") from None
        if not self.r_min <= self.r_max:
            raise ConfigError(
                f"need --r-min <= --r-max, got --r-min {self.r_min} > --r-max {self.r_max}."
            )
        if self.max_phase > 2 * math.pi:
            raise ConfigError(f"--max-phase must be at most 2*pi, got {self.max_phase}.")

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
TRAINING_KEYS = tuple(f.name for f in dataclasses.fields(LMConfig) if f.metadata["role"] == "binds")


def new_run(given: Mapping[str, Any]) -> LMConfig:
    """A new run's settings: the preset's, the flags `given` over them, a fresh run id."""
    preset = given.get("preset", "cpu")
    if preset not in PRESETS:
        raise ConfigError(f"--preset: expected one of {tuple(PRESETS)}, got {preset!r}.")
    return LMConfig(**{**PRESETS[preset], **given, "run_id": uuid.uuid4().hex})


def resumed_run(saved: Mapping[str, Any], given: Mapping[str, Any], *, out: str) -> LMConfig:
    """A resumed run's settings: `saved` (its `config.json`) with the flags `given` that do
    not bind the run.

    **Raises:** `ConfigError` if `saved` is not a run's settings, or a given binding flag
    differs from the saved value."""
    unknown = [k for k in saved if k not in _NAMES]
    if unknown or not isinstance(saved.get("run_id"), str):
        what = f"unknown settings {unknown}" if unknown else "no run id"
        raise ConfigError(
            f"{out}/config.json is not a language-model run's settings ({what}); it was edited "
            "or written by another tool. Restore the run's own file, or start a new run with "
            "another --out."
        )
    changed = {k: (saved.get(k), v) for k, v in given.items() if k in TRAINING_KEYS}
    changed = {k: ab for k, ab in changed.items() if ab[0] != ab[1]}
    if changed:
        diff = "; ".join(f"{flag(k)}: {a!r} in the run, {b!r} now" for k, (a, b) in changed.items())
        raise ConfigError(
            f"--resume continues the run in {out} exactly, so its settings cannot change "
            f"({diff}). Drop those flags, or start a new run with another --out."
        )
    return LMConfig(**{**saved, **given})

"""The stages of one language-model run, each a record that exists only once filled (the
`Session`, the `Loaded` corpus, the built `Run`), and the state of the run between two
steps (`TrainState`)."""

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from ..runs import checkpoint as ckpt
from ..runs.metrics import MetricsLog
from ..runs.progress import say
from ..runs.signals import Stop
from .config import LMConfig
from .corpus import Corpus
from .model import Programs
from .streams import EvalLayout, TrainStreams

__all__ = ["Session", "Loaded", "Run", "TrainState"]


@dataclasses.dataclass(frozen=True)
class TrainState:
    """The whole state of a run between two steps, replaced as one object: what `last.eqx`
    holds (`tree`), and `pending`, the `(loss, accuracy, lr)` of the steps since the last
    train record (in `last.json`)."""

    step: int
    params: Any
    opt_state: Any
    carry: Any  # the model's carry of every training stream, after chunk `step - 1`
    run_key: Any
    pending: tuple = ()

    def tree(self):
        return (
            self.params,
            self.opt_state,
            self.carry,
            self.run_key,
            np.asarray(self.step, np.int64),
        )


@dataclasses.dataclass(kw_only=True)
class Session:
    """A run once set up: settings, folder (locked), the signal handler; `say` prints
    above the progress bar (`bar`, while training shows one). `started` is the clock
    reading `--time-limit` counts from."""

    args: argparse.Namespace
    cfg: LMConfig
    out: Path
    lock: ckpt.RunLock
    started: float
    stop: Stop | None
    bar: Any = None

    def say(self, msg: str) -> None:
        say(msg, self.bar)


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The corpus, its training streams and held-out layouts, and the baselines' bits
    per byte on the held-out text (`{"val": {...}, "test": {...}}`)."""

    corpus: Corpus
    streams: TrainStreams
    val: EvalLayout
    test: EvalLayout
    baselines: dict[str, dict[str, float]]


@dataclasses.dataclass(kw_only=True)
class Run(Session):
    """A run once built: its session, corpus, the model's static part and state, its
    programs and the metrics log."""

    corpus: Corpus
    streams: TrainStreams
    val: EvalLayout
    test: EvalLayout
    baselines: dict[str, dict[str, float]]
    static: Any
    state: Any
    programs: Programs
    log: MetricsLog

    @classmethod
    def built(
        cls,
        session: Session,
        loaded: Loaded,
        *,
        static: Any,
        state: Any,
        programs: Programs,
        log: MetricsLog,
    ) -> "Run":
        fields = {f.name: getattr(session, f.name) for f in dataclasses.fields(Session)}
        loaded_fields = {f.name: getattr(loaded, f.name) for f in dataclasses.fields(Loaded)}
        return cls(
            **fields, **loaded_fields, static=static, state=state, programs=programs, log=log
        )

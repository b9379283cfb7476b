"""What the stages of one language-model run share (`Run`), and the state of the run
between two steps (`TrainState`)."""

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..runs import checkpoint as ckpt
from ..runs.metrics import MetricsLog
from ..runs.signals import Stop
from .config import LMConfig
from .corpus import Corpus
from .model import Programs
from .streams import EvalLayout, TrainStreams

__all__ = ["Run", "TrainState"]


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


@dataclasses.dataclass
class Run:
    """Settings, folder, corpus, model and programs of one run; `say` prints above the
    progress bar."""

    args: argparse.Namespace
    cfg: LMConfig
    out: Path
    corpus: Corpus | None = None
    streams: TrainStreams | None = None
    val: EvalLayout | None = None
    test: EvalLayout | None = None
    baselines: dict[str, dict[str, float]] | None = None
    static: Any = None
    state: Any = None
    programs: Programs | None = None
    log: MetricsLog | None = None
    bar: Any = None
    started: float | None = None  # the clock reading `--time-limit` counts from
    stop: Stop | None = None
    lock: ckpt.RunLock | None = None
    primary: bool = True

    def say(self, msg: str) -> None:
        try:
            if self.bar is not None:
                self.bar.write(msg, file=sys.stderr)
            else:
                print(msg, file=sys.stderr, flush=True)
        except OSError:  # a closed terminal (after SIGHUP): the run goes on
            pass

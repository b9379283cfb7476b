"""The stages of one training run, each a record that exists only once filled: the
`Session` (settings, folder, devices, signal handler), the `Loaded` data with their
fingerprint, and the built `Run` (the session, the data, the model's static part, the
jitted steps and the metrics log)."""

import argparse
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jax.sharding import Mesh

from ..runs import checkpoint as ckpt
from ..runs.metrics import MetricsLog
from ..runs.progress import say
from ..runs.signals import Stop
from .config import RunConfig
from .data import TaskData
from .steps import Steps

__all__ = ["Session", "Loaded", "Run"]


@dataclasses.dataclass(kw_only=True)
class Session:
    """A run once set up: settings, folder, devices, the signal handler.

    `lock` is held by process 0 only; `bar` is the progress bar while training shows one;
    `started` is the `clock` reading `--time-limit` counts from; `on_record` is
    `MetricsLog`'s hook."""

    args: argparse.Namespace
    cfg: RunConfig
    out: Path
    began: float
    primary: bool
    mesh: Mesh
    lock: ckpt.RunLock | None
    started: float
    stop: Stop | None
    on_record: Callable[[dict[str, Any]], Any] | None
    bar: Any = None
    #: The seconds the run's earlier processes took, to their last checkpoint (`--resume`
    #: reads them from it; the checkpoints record the total so far).
    seconds_before: float = 0.0

    def seconds_total(self) -> float:
        """This process's seconds so far plus the earlier processes'."""
        return self.seconds_before + (time.perf_counter() - self.began)

    def say(self, msg: str) -> None:
        """`msg` above the progress bar (`runs.progress.say`); process 0's only."""
        if self.bar is not None or self.primary:
            say(msg, self.bar)


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The task's data, checked, and their fingerprint (sizes and SHA-256 by split)."""

    data: TaskData
    fingerprint: dict[str, Any]


@dataclasses.dataclass(kw_only=True)
class Run(Session):
    """A run once built: its session, its data, the model's static part, the jitted steps
    and the metrics log."""

    data: TaskData
    fingerprint: dict[str, Any]
    static: Any
    steps: Steps
    log: MetricsLog

    @classmethod
    def built(
        cls, session: Session, loaded: Loaded, *, static: Any, steps: Steps, log: MetricsLog
    ) -> "Run":
        fields = {f.name: getattr(session, f.name) for f in dataclasses.fields(Session)}
        return cls(
            **fields,
            data=loaded.data,
            fingerprint=loaded.fingerprint,
            static=static,
            steps=steps,
            log=log,
        )

"""What the stages of one training run share (`Run`): settings, folder, devices, data,
model, programs, the log and the signal handler."""

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..runs import checkpoint as ckpt
from ..runs.metrics import MetricsLog
from ..runs.signals import Stop
from ..runs.timing import Speed
from .config import RunConfig
from .data import TaskData

__all__ = ["Run"]


@dataclasses.dataclass
class Run:
    """What the steps of `run` share: settings, folder, devices, data, model, programs."""

    args: argparse.Namespace
    cfg: RunConfig
    out: Path
    began: float
    primary: bool = True
    mesh: Any = None
    data: TaskData | None = None
    fingerprint: dict | None = None
    static: Any = None
    steps: Any = None
    log: MetricsLog | None = None
    bar: Any = None
    speed: Speed | None = None
    started: float | None = None  # the `clock` reading `--time-limit` counts from
    stop: Stop | None = None
    lock: ckpt.RunLock | None = None
    on_record: Callable[[dict[str, Any]], Any] | None = None  # `MetricsLog`'s hook

    def say(self, msg: str) -> None:
        try:
            if self.bar is not None:
                self.bar.write(msg, file=sys.stderr)  # above the bar, not through it
            elif self.primary:
                print(msg, file=sys.stderr, flush=True)
        except OSError:  # a closed terminal (after SIGHUP): the run goes on, files are written
            pass

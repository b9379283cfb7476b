"""Small pieces of the training loop: the run's state, signals, speed, deadline, data
fingerprint."""

import dataclasses
import hashlib
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np


__all__ = ["Carry", "Abort", "Stop", "Speed", "Deadline", "data_fingerprint"]


@dataclasses.dataclass(frozen=True)
class Carry:
    """The whole state of a run between two steps; replaced as one object.

    `pending` holds `(loss, accuracy, lr)` of the steps since the last train record; `best`
    the best validation result so far (`{"val_accuracy", "val_loss", "step"}` or None).
    """

    step: int
    params: Any
    bn_state: Any
    opt_state: Any
    run_key: Any
    pending: tuple = ()
    best: dict | None = None

    def tree(self):
        """What `last.eqx` holds."""
        return (self.params, self.bn_state, self.opt_state, self.run_key, np.asarray(self.step, np.int64))


class Abort(BaseException):
    """A second Ctrl-C: leave at once (the checkpoint on disk stays valid)."""


class Stop:
    """SIGINT/SIGTERM -> a flag the loop checks between steps."""

    def __init__(self):
        self.reason: str | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame):
        if self.reason is not None:
            raise Abort(f"second {signal.Signals(signum).name}")
        self.reason = signal.Signals(signum).name
        print(f"\n{self.reason}: finishing this step, then saving a checkpoint (again to "
              "abort; the last checkpoint on disk stays valid).", file=sys.stderr, flush=True)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


class Speed:
    """Train steps per second, excluding compilation, evaluation and checkpointing.

    `rate` is over the whole process; `interval(step)` over the steps since its last call.
    """

    def __init__(self):
        self.seconds, self.steps = 0.0, 0
        self._interval = [0.0, 0]
        self._mark: tuple[float, int] | None = None

    def resume(self, step: int) -> None:
        self._mark = (time.perf_counter(), step)

    def pause(self, step: int) -> None:
        if self._mark is not None:
            seconds, steps = time.perf_counter() - self._mark[0], step - self._mark[1]
            self.seconds += seconds
            self.steps += steps
            self._interval[0] += seconds
            self._interval[1] += steps
            self._mark = None

    def interval(self, step: int) -> float | None:
        running = self.running
        self.pause(step)
        seconds, steps = self._interval
        self._interval = [0.0, 0]
        if running:
            self.resume(step)
        return steps / seconds if seconds > 0 and steps > 0 else None

    @property
    def running(self) -> bool:
        return self._mark is not None

    @property
    def rate(self) -> float | None:
        return self.steps / self.seconds if self.seconds > 0 and self.steps > 0 else None


class Deadline:
    """`--time-limit`: whether one more step (with its evaluation and checkpoint) still
    fits before the deadline, leaving time to write the final checkpoint.

    The reserve is 1.5x the slowest iteration seen (step + logging + evaluation +
    checkpoint; the first one, which compiles, only until others are seen) plus the
    slowest checkpoint write, plus 2 s. `clock` is injectable (seconds, monotonic).
    """

    def __init__(self, minutes: float | None, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.end = None if minutes is None else clock() + 60.0 * minutes
        self._iterations: list[float] = []
        self.save_seconds = 0.0
        self._mark: float | None = None

    def start_iteration(self) -> None:
        self._mark = self.clock()

    def end_iteration(self) -> None:
        if self._mark is not None:
            self._iterations.append(self.clock() - self._mark)
            self._iterations = self._iterations[:1] + sorted(self._iterations[1:])[-1:]
            self._mark = None

    def timed_save(self, save: Callable[[], None]) -> None:
        t0 = self.clock()
        save()
        self.save_seconds = max(self.save_seconds, self.clock() - t0)

    def expired(self) -> bool:
        """True when the next iteration might not end (and be saved) before the deadline."""
        if self.end is None:
            return False
        seen = self._iterations[1:] or self._iterations
        reserve = 1.5 * max(seen, default=0.0) + self.save_seconds + 2.0
        return self.clock() + reserve > self.end


def data_fingerprint(splits: dict[str, Any]) -> dict[str, Any]:
    """Sizes and a SHA-256 of every array of every split: what `--resume` compares."""
    out: dict[str, Any] = {}
    for name, split in splits.items():
        digest = hashlib.sha256()
        for field in dataclasses.fields(split):
            x = getattr(split, field.name)
            if x is None:
                continue
            digest.update(f"{field.name}{x.dtype.str}{x.shape}".encode())
            rows = max(1, (64 << 20) // max(1, x[:1].nbytes))  # 64 MB at a time (memmaps)
            for i in range(0, len(x), rows):
                digest.update(np.ascontiguousarray(x[i : i + rows]).data)
        out[name] = {"examples": len(split), "sha256": digest.hexdigest()}
    return out

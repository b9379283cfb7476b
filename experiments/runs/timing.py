"""Time in a run: steps per second (`Speed`), `--time-limit` (`Deadline`) and the age of
the process (`process_age`)."""

import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Speed", "Deadline", "process_age"]


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
    slowest checkpoint write, plus 2 s. `clock` is injectable (seconds, monotonic);
    `started` is the `clock` reading the limit counts from (default: now; the CLI passes
    the start of the process, so that loading and compiling count too).
    """

    def __init__(
        self,
        minutes: float | None,
        clock: Callable[[], float] = time.monotonic,
        started: float | None = None,
    ):
        self.clock = clock
        self.started = clock() if started is None else started
        self.end = None if minutes is None else self.started + 60.0 * minutes
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

    def timed_save(self, save: Callable[[], Any]) -> Any:
        t0 = self.clock()
        result = save()
        self.save_seconds = max(self.save_seconds, self.clock() - t0)
        return result

    def expired(self) -> bool:
        """True when the next iteration might not end (and be saved) before the deadline."""
        if self.end is None:
            return False
        seen = self._iterations[1:] or self._iterations
        reserve = 1.5 * max(seen, default=0.0) + self.save_seconds + 2.0
        return self.clock() + reserve > self.end


def process_age() -> float:
    """Seconds since this process started (Linux: from `/proc/self/stat`; elsewhere since
    this module was imported)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time since boot
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic() - _IMPORTED


_IMPORTED = time.monotonic()

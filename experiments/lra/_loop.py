"""Small pieces of the training loop: the run's state, signals, speed, deadline, data
fingerprint."""

import contextlib
import dataclasses
import hashlib
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "Carry",
    "Abort",
    "Stop",
    "Speed",
    "Deadline",
    "data_fingerprint",
    "process_age",
    "SIGNALS",
]

#: The signals that stop a run cleanly: Ctrl-C, `kill`/batch schedulers, a closed terminal.
SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


@dataclasses.dataclass(frozen=True)
class Carry:
    """The whole state of a run between two steps; replaced as one object.

    `pending` holds `(loss, accuracy, lr)` of the steps since the last train record; `best`
    the best validation result so far (`{"val_accuracy", "val_loss", "step"}` or None);
    `best_tree` its `(model, bn_state)` on the host while not yet written to `best.eqx`
    (it is written with the next checkpoint, so that `best.*` and `last.*` change together),
    `best_sha256` the digest of the `best.eqx` that holds it once written.
    """

    step: int
    params: Any
    bn_state: Any
    opt_state: Any
    run_key: Any
    pending: tuple = ()
    best: dict | None = None
    best_tree: Any = None
    best_sha256: str | None = None

    def tree(self):
        """What `last.eqx` holds."""
        return (
            self.params,
            self.bn_state,
            self.opt_state,
            self.run_key,
            np.asarray(self.step, np.int64),
        )


class Abort(BaseException):
    """A signal that ends the process without a new checkpoint (the one on disk stays valid)."""


class Stop:
    """SIGINT, SIGTERM and SIGHUP as flags; nothing but flag-setting (and one `os.write`)
    happens inside the handler.

    - Before training (`training` False: loading data, compiling): the first signal raises
      `Abort` there and then (nothing to save yet).
    - While training: the first signal sets `reason`; the loop finishes its step, writes a
      checkpoint and exits with status 130.
    - A second signal during a checkpoint write (`with stop.saving():`) waits for the write
      to finish, then raises `Abort`; outside one it raises `Abort` there and then, or, with
      `hard_abort` (the command line), ends the process at once with `os._exit(130)` (no
      unwinding through JAX); either way the last checkpoint on disk is complete. (In a
      notebook, `hard_abort=False` keeps the kernel alive.)
    """

    def __init__(self, *, hard_abort: bool = False):
        self.hard_abort = hard_abort
        self.reason: str | None = None
        self.training = False
        self._saving = 0
        self._abort: str | None = None
        self._previous: dict[int, Any] = {}

    def _say(self, text: str) -> None:
        with contextlib.suppress(OSError):
            os.write(2, text.encode())

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if not self.training:
            self.reason = name
            raise Abort(f"{name} before training started; nothing to save")
        if self.reason is None:
            self.reason = name
            self._say(
                f"\n{name}: finishing this step, then saving a checkpoint (again to abort; the "
                "last checkpoint on disk stays valid).\n"
            )
        elif self._saving:
            self._abort = name
            self._say(f"\n{name} again: aborting once the checkpoint being written is complete.\n")
        elif self.hard_abort:
            self._say(
                f"\n{name} again: aborted; the last checkpoint on disk is complete (resume with "
                "--resume).\n"
            )
            os._exit(130)
        else:
            raise Abort(f"second {name}; the last checkpoint on disk is complete")

    @contextlib.contextmanager
    def saving(self):
        """A checkpoint write: a second signal waits for its end."""
        self._saving += 1
        try:
            yield
        finally:
            self._saving -= 1
        if self._abort is not None and not self._saving:
            raise Abort(f"second {self._abort}, after the checkpoint was written")

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
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

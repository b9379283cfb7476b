"""Signals during a run: flags the loop reads (`Stop`), or `Abort` when there is nothing to
save or a second signal comes.

- SIGINT, SIGTERM, SIGHUP (`SIGNALS`) interrupt: the run saves a checkpoint after the
  current step and exits with status 130.
- The warnings batch schedulers send before a kill (`--save-signals`, default
  `USR1,USR2,XCPU`: SLURM's `--signal`, LSF's and Grid Engine's SIGUSR1/SIGUSR2, the CPU
  time limit's SIGXCPU) stop the run as `--time-limit` does: a checkpoint after the current
  step, then status 0, resumable with `--resume` (the kill may come any moment: continuing
  would risk the steps after the checkpoint). A repeated warning is ignored; a signal of
  the first kind still aborts. `--save-signals none` leaves them their default action
  (they end the process without a checkpoint).
"""

import contextlib
import os
import signal
import threading
from typing import Any

__all__ = ["SIGNALS", "WARNINGS", "parse_signals", "Abort", "Stop", "exit_on_signal"]

#: The signals that stop a run cleanly: Ctrl-C, `kill`/batch schedulers, a closed terminal.
SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


#: The warnings `--save-signals` may name (those this platform has).
WARNINGS = tuple(
    name for name in ("USR1", "USR2", "XCPU", "ALRM", "PWR") if hasattr(signal, f"SIG{name}")
)


def parse_signals(text: str) -> str:
    """`--save-signals`: a comma-separated list of `WARNINGS` (with or without `SIG`, any
    case), or `none`; returns it as `USR1,USR2` (in `WARNINGS` order), or `none`.

    **Raises:** `ValueError` naming what is not such a signal."""
    words = [w.strip().upper().removeprefix("SIG") for w in str(text).split(",") if w.strip()]
    if words == ["NONE"]:
        return "none"
    bad = [w for w in words if w not in WARNINGS]
    if bad or not words:
        raise ValueError(
            f"expected 'none' or signal names from {', '.join(WARNINGS)} separated by commas, "
            f"got {text!r}"
        )
    return ",".join(name for name in WARNINGS if name in words)


class Abort(BaseException):
    """A signal that ends the process without a new checkpoint (the one on disk stays valid)."""


class Stop:
    """SIGINT, SIGTERM and SIGHUP as flags; nothing but flag-setting (and one `os.write`)
    happens inside the handler.

    - Before training (`training` False: loading data, compiling): the first signal raises
      `Abort` there and then (nothing to save yet); with `hard_abort` (the command line) it
      ends the process at once (`os._exit(130)`) after one line naming the signal and how
      to go on (`hint`): an exception raised there could land where Python only prints
      "Exception ignored" (a finaliser, a callback) and the start-up would go on.
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
        self.warned: str | None = None  # a scheduler's warning (`--save-signals`)
        self.training = False
        self._saving = 0
        self._abort: str | None = None
        self._previous: dict[int, Any] = {}
        #: How to go on after a signal before training (`go_on`).
        self.hint = "run the same command again"
        self._hint_fixed = False

    def go_on(self, hint: str, *, fixed: bool = False) -> None:
        """Say `hint` after a signal before training from now on (a trainer, once the run
        can be resumed); `fixed`: the caller's (a command that runs the trainer), kept."""
        if fixed or not self._hint_fixed:
            self.hint, self._hint_fixed = hint, fixed or self._hint_fixed

    def _before_training(self, name: str):
        self.reason = name
        if self.hard_abort:
            self._say(f"\n{name} before training started: stopped, nothing to save; {self.hint}.\n")
            os._exit(130)
        raise Abort(f"{name} before training started; nothing to save")

    def _say(self, text: str) -> None:
        with contextlib.suppress(OSError):
            os.write(2, text.encode())

    def watch(self, names: str) -> None:
        """Handle the warnings `names` (`parse_signals`'s form) from now on."""
        if names == "none" or threading.current_thread() is not threading.main_thread():
            return
        for name in names.split(","):
            sig = getattr(signal, f"SIG{name}")
            if sig not in self._previous:
                self._previous[sig] = signal.signal(sig, self._warn)

    def _warn(self, signum, frame):
        name = signal.Signals(signum).name
        if not self.training:
            self._before_training(name)
        if self.reason is None and self.warned is None:
            self.warned = name
            self._say(
                f"\n{name}: finishing this step, then saving a checkpoint and stopping "
                "(resumable with --resume).\n"
            )

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if not self.training:
            self._before_training(name)
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


@contextlib.contextmanager
def exit_on_signal(hint: str, *, what: str = "stopped"):
    """While in the block, SIGINT, SIGTERM and SIGHUP end the process at once (status
    130) after one line, `NAME: WHAT; HINT.` (a command's start-up, or a part with
    nothing to save: its files are written atomically). The handlers before are put back
    after. (Outside the main thread: nothing.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame):
        name = signal.Signals(signum).name
        with contextlib.suppress(OSError):
            os.write(2, f"\n{name}: {what}; {hint}.\n".encode())
        os._exit(130)

    previous = {sig: signal.signal(sig, handle) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

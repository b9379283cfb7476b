"""SIGINT, SIGTERM and SIGHUP during a run: flags the loop reads (`Stop`), or `Abort` when
there is nothing to save or a second signal comes."""

import contextlib
import os
import signal
import threading
from typing import Any

__all__ = ["SIGNALS", "Abort", "Stop"]

#: The signals that stop a run cleanly: Ctrl-C, `kill`/batch schedulers, a closed terminal.
SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
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

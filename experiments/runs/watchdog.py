"""The watchdog of a multi-process run: a peer that fails, dies, freezes or never connects
ends every process with one `error:` line and a non-zero status, within a bounded time.

JAX's distributed runtime detects a dead peer by its missing heartbeats, and then ends the
survivors with a native abort (a stack dump, the reason buried in it); a peer that never
connects ends the others the same way after its initialisation timeout. The watchdog acts
first, in the trainer's words:

- `before(seconds, message)`: a timer around a blocking call (`jax.distributed.initialize`,
  whose own timeout the trainer sets longer): when it runs out, `message` and exit 1.
- `Watchdog`: a thread beside the run. Every second it publishes this process's heartbeat
  in the distributed runtime's key-value store and reads the others'. A peer silent for
  `peer_timeout` seconds (`LRA_HEARTBEAT_TIMEOUT`; JAX's own is set 30 s longer), a peer
  that published a failure (`fail`), or a store that stopped answering (process 0, which
  hosts it, is gone) ends this process with one line naming the peer.
- `fail(message, code)`: this process stops: it says why, publishes the failure so that
  the others stop too within a second, waits (at most a few seconds) until they have read
  it or failed too, and exits without JAX's shutdown barrier (which would wait for the
  dead, then abort); process 0, the coordinator's host, exits last.

The key-value store is the client of `jax._src.distributed.global_state`, JAX's own (not
a public API: where a JAX version lacks it, the watchdog stays off and JAX's behaviour
applies).
"""

import contextlib
import json
import os
import sys
import threading
import time

__all__ = ["before", "Watchdog", "current"]

_PREFIX = "lra_watchdog"

#: Seconds a failing process waits, at most, for its peers to know (`Watchdog.fail`).
_TELL_WITHIN = 5.0


def _say(message: str) -> None:
    """`message` as one `error:` line on stderr, now (from any thread)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.write(2, f"error: {message}\n".encode())


def _exit(message: str | None, code: int) -> None:
    """Say `message` (if any) and end the process now (no atexit handlers: JAX's shutdown
    barrier would wait for peers that are gone)."""
    if message is not None:
        _say(message)
    os._exit(code)


@contextlib.contextmanager
def before(seconds: float, message: str):
    """End the process with `message` (status 1) unless the block finishes in `seconds`."""
    done = threading.Event()

    def watch():
        if not done.wait(seconds):
            _exit(message, 1)

    thread = threading.Thread(target=watch, name="lra-deadline", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()


_CURRENT: "Watchdog | None" = None


def current() -> "Watchdog | None":
    """The watchdog of this process's multi-process run, if one is running."""
    return _CURRENT


def _client():
    try:
        from jax._src import distributed

        return distributed.global_state.client
    except (ImportError, AttributeError):
        return None


class Watchdog:
    """Heartbeats and failures of the processes of one run (see the module docstring)."""

    def __init__(self, index: int, count: int, *, peer_timeout: float, poll: float = 1.0):
        self.index, self.count, self.peer_timeout, self.poll = index, count, peer_timeout, poll
        self.client = _client()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _store(self):
        """JAX's key-value store (the coordination service's client): the watchdog runs
        only with one (`start`)."""
        assert self.client is not None
        return self.client

    def start(self) -> "Watchdog":
        global _CURRENT
        if self.client is not None and self.count > 1:
            self._thread = threading.Thread(target=self._run, name="lra-watchdog", daemon=True)
            self._thread.start()
            _CURRENT = self
        return self

    def close(self) -> None:
        """This process is done (it finished, or failed with its peers): stop watching,
        and tell the others not to wait for its heartbeat."""
        global _CURRENT
        self._stop.set()
        with contextlib.suppress(Exception):
            self._store().key_value_set(f"{_PREFIX}/done/{self.index}", "1", allow_overwrite=True)
        if _CURRENT is self:
            _CURRENT = None

    def fail(self, message: str, code: int) -> None:
        """Stop this process with `message` and `code`, and every other with it. The line
        comes first: if process 0 goes first, JAX's runtime ends this process at once.

        It waits (at most `_TELL_WITHIN` s) until every peer has read the failure or failed
        too (peers failing at the same moment read none: their watchdogs have stopped),
        then ends (`_leave`)."""
        self._stop.set()
        _say(message)
        with contextlib.suppress(Exception):
            text = json.dumps({"message": message, "code": code})
            self._store().key_value_set(f"{_PREFIX}/failed/{self.index}", text)
            deadline = time.monotonic() + _TELL_WITHIN
            while time.monotonic() < deadline:  # until every peer knows (or is gone)
                knows = self._names(f"seen/{self.index}") | self._names("failed")
                if len(knows - {str(self.index)}) >= self.count - 1:
                    break
                time.sleep(0.1)
        self._leave(code)

    def _leave(self, code: int) -> None:
        """End this process with `code`; process 0 hosts JAX's coordinator, and when it
        goes JAX's runtime aborts the processes still running: it lets them end first."""
        if self.index == 0:
            time.sleep(2)
        _exit(None, code)

    def _run(self) -> None:
        last: dict[int, tuple[str | None, float]] = {}
        tick = 0
        while not self._stop.wait(self.poll):
            tick += 1
            try:
                self._store().key_value_set(
                    f"{_PREFIX}/alive/{self.index}", str(tick), allow_overwrite=True
                )
                self._read_failures()
                stale = self._stale(last, self._names("done"))
            except Exception as e:  # the store is gone: process 0 (its host) stopped
                if self._stop.is_set():
                    return
                self._lost(e)
                return
            if stale is not None and not self._stop.is_set():
                _exit(
                    f"process {stale} of {self.count} stopped answering for "
                    f"{self.peer_timeout:g} s (killed, crashed or frozen; see its output); this "
                    f"process {self.index} stops too. The last complete checkpoint is kept: "
                    "restart every process with --resume.",
                    1,
                )

    def _dir(self, kind: str) -> list[tuple[str, str]]:
        return self._store().key_value_dir_get(f"{_PREFIX}/{kind}/")

    def _names(self, kind: str) -> set[str]:
        """The last parts of the keys under `kind` (process indices, as text)."""
        return {key.rsplit("/", 1)[-1] for key, _ in self._dir(kind)}

    def _read_failures(self) -> None:
        for key, value in self._dir("failed"):
            peer = int(key.rsplit("/", 1)[-1])
            if peer == self.index:
                continue
            with contextlib.suppress(Exception):
                self._store().key_value_set(f"{_PREFIX}/seen/{peer}/{self.index}", "1")
            failure = json.loads(value)
            self._stop.set()
            _say(f"process {peer} of {self.count}: {failure['message']}")
            self._leave(failure["code"])

    def _stale(self, last: dict[int, tuple[str | None, float]], done: set[str]) -> int | None:
        now = time.monotonic()
        for peer in range(self.count):
            if peer == self.index or str(peer) in done:
                continue
            try:
                beat = self._store().key_value_try_get(f"{_PREFIX}/alive/{peer}")
            except Exception:  # not published yet
                beat = None
            if peer not in last or (beat is not None and beat != last[peer][0]):
                last[peer] = (beat, now)
            elif now - last[peer][1] > self.peer_timeout:
                return peer
        return None

    def _lost(self, error: BaseException) -> None:
        first = next((x for x in str(error).splitlines() if x.strip()), type(error).__name__)
        _exit(
            f"process {self.index} of {self.count} lost contact with process 0, which hosts "
            f"the run's coordinator ({first[:200]}): it stopped or was killed (see its "
            "output). The last complete checkpoint is kept: restart every process with "
            "--resume.",
            1,
        )

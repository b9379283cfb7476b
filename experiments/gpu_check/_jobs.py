"""Child processes with a deadline, and the JSON-lines records they leave.

Every part runs in child processes that append one JSON object per line to a records file
as they go (flushed and synced, so what was written survives a kill). Each child runs in
its own process group, killed as a group at its deadline, and asks the kernel to kill it
if this process dies (`PR_SET_PDEATHSIG`, Linux, set by `_launch.py` before it becomes the
child's command), so a check killed at any moment leaves no process holding the GPU.
"""

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "Job",
    "run_job",
    "read_records",
    "RecordWriter",
    "records_to",
    "tail",
    "KILL_WAIT_S",
    "die_with_parent",
]

#: After SIGTERM, how long a child has to save and exit before SIGKILL.
KILL_WAIT_S = 10.0
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel to kill this process when its parent dies (Linux; elsewhere nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class Job:
    """A child process in its own group, its output in `log`."""

    def __init__(self, cmd: Sequence[str], *, log: Path, env: dict[str, str], cwd: Path):
        log.parent.mkdir(parents=True, exist_ok=True)
        self.cmd = list(cmd)
        self.started = time.monotonic()
        with open(log, "ab") as out:
            out.write(("$ " + " ".join(self.cmd) + "\n").encode())
            out.flush()
            launch = [sys.executable, "-m", "experiments.gpu_check._launch", str(os.getpid())]
            self.proc = subprocess.Popen(
                launch + self.cmd if os.name == "posix" else self.cmd,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        """SIGTERM to the group (the trainer saves a checkpoint), SIGKILL if still there
        after `KILL_WAIT_S`."""
        if self.proc.poll() is None:
            self.signal_group(signal.SIGTERM)
            try:
                self.proc.wait(KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        self.signal_group(signal.SIGKILL)  # anything of the group still there
        self.proc.wait()


def run_job(
    job: Job, *, kill_at: float, on_poll: Callable[[], None] | None = None, poll_s: float = 1.0
) -> tuple[int, bool]:
    """Wait for `job` until `kill_at` (a `time.monotonic()` time), calling `on_poll` about
    every `poll_s` seconds; stop it there. Returns its exit status (negative: the signal
    that ended it) and whether it was stopped for time."""
    try:
        while True:
            left = kill_at - time.monotonic()
            if left <= 0:
                job.stop()
                return job.proc.returncode, True
            try:
                return job.proc.wait(min(poll_s, left)), False
            except subprocess.TimeoutExpired:
                if on_poll is not None:
                    on_poll()
    except BaseException:
        job.stop()
        raise


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a records file, one a line; a line cut short by a kill (the
    last) is left out."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    records = []
    for line in text.splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(line)
            if isinstance(value, dict):
                records.append(value)
    return records


def tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a log file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


class RecordWriter:
    """Appends records to a JSON-lines file, each flushed and synced at once."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._file: TextIO = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def __call__(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        with contextlib.suppress(OSError):
            os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


@contextlib.contextmanager
def records_to(path: str | os.PathLike) -> Iterator[RecordWriter]:
    writer = RecordWriter(path)
    try:
        yield writer
    finally:
        writer.close()

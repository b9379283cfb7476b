"""`RunLock`: one trainer per run folder."""

import errno
import json
import os
import socket
import time
from pathlib import Path

from .store import CheckpointError

__all__ = ["FolderInUse", "RunLock", "take_lock"]


class FolderInUse(CheckpointError):
    """Another live process holds the folder's `RunLock`."""


class RunLock:
    """An exclusive lock on a run folder while one process writes it.

    `flock` on `FOLDER/.lock`: the kernel drops it when its owner exits or dies (even by
    `kill -9`), so a dead owner's lock is simply taken over. The file records the owner's
    pid, host and start time (UTC) for the refusal's message. Where the file system has no
    `flock` (some network mounts), the recorded owner is checked instead: a live pid on this
    host holds the folder, anything else is taken over.

    **Raises** (on `acquire`): `FolderInUse` naming the owner.
    """

    def __init__(self, folder: str | os.PathLike, *, what: str = "--out"):
        self.folder, self.what = Path(folder), what
        self.path = self.folder / ".lock"
        self._fd: int | None = None

    def _owner(self) -> str:
        try:
            owner = json.loads(self.path.read_text() or "{}")
            return (
                f"pid {owner.get('pid', '?')} on {owner.get('host', '?')}, since "
                f"{owner.get('since', '?')}"
            )
        except (OSError, ValueError):
            return "another process"

    def _refuse(self) -> FolderInUse:
        return FolderInUse(
            f"{self.what} {str(self.folder)!r} is in use by another trainer ({self._owner()}): two "
            "trainers would overwrite each other's checkpoints and metrics. Wait for it to end "
            f"(or stop it), or choose another {self.what}."
        )

    def acquire(self) -> "RunLock":
        import fcntl

        # Not through a link planted at .lock (ELOOP: one error line).
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._refuse() from None
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                os.close(fd)
                raise
            if self._live_owner():
                os.close(fd)
                raise self._refuse() from None
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd
        return self

    def _live_owner(self) -> bool:
        try:
            owner = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return False
        if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
            return False
        if owner["pid"] == os.getpid():
            return False
        try:
            os.kill(owner["pid"], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> bool:
        self.release()
        return False


def take_lock(folder: str | os.PathLike, *, what: str = "--out") -> RunLock:
    """`RunLock(folder).acquire()`, its refusals one `UsageError` line: another owner, or
    a lock file that cannot be opened (a symbolic link there, a loop of them), named."""
    from ..errors import UsageError

    lock = RunLock(folder, what=what)
    try:
        return lock.acquire()
    except FolderInUse as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        link = lock.path.is_symlink()
        kind = (
            "a symbolic link; the trainer does not follow links there"
            if link
            else (e.strerror or str(e))
        )
        raise UsageError(
            f"{what} {str(folder)!r}: cannot open its lock file {lock.path} ({kind}). Remove "
            f"{lock.path} (it is recreated), or choose another {what}."
        ) from None

"""Atomic file writes: a reader (or a crash at any instant) sees the old file or the new
one, whole, never a mix; and a write that cannot be turned against its user.

Each write goes to a temporary file in the same folder, is flushed with `fsync`, and is
`os.replace`d onto its name; the folder is then `fsync`ed so that the rename survives a
power loss. Used by the LRA trainer's checkpoints, metrics and outputs, and by the export
command.

**Links.** Nothing is written through a symbolic link: the temporary file is created new
(`O_CREAT | O_EXCL | O_NOFOLLOW`, under a name with a random part, so a link planted at a
guessed name is never opened), and the rename replaces a link at the destination with the
file instead of writing where the link points. A file opened to append (`open_append`)
refuses a link (`ELOOP`: one error line at the command line).

**Permissions.** A rewritten file keeps the permission bits of the file it replaces (a
run folder made group-readable stays so); a new file gets the usual `0o666` less the
umask, as `open` gives.
"""

import errno
import os
import secrets
import stat
from pathlib import Path

__all__ = ["write_atomic", "write_temp", "fsync_folder", "open_append"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _existing_mode(path: Path) -> int | None:
    """The permission bits of the regular file at `path` (not following a link), or None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None


def write_temp(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to a new temporary file beside `path`, flushed to disk, with the
    permissions of the file at `path` if there is one; returns its path (the caller
    `os.replace`s it onto `path`, or removes it). Nothing is left on failure; an `OSError`
    of the write (a full disk) names `path`."""
    path = Path(path)
    mode = _existing_mode(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    tmp = path  # the last name tried, once the loop has run
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temporary name", str(tmp))
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:  # a full disk, an I/O error: named by the file it was for
        tmp.unlink(missing_ok=True)
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror or str(e), str(path)) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` via a temporary file, `fsync` and `os.replace` (a link at
    `path` is replaced, not followed)."""
    path = Path(path)
    tmp = write_temp(path, data)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_folder(path.parent)


def open_append(path: str | os.PathLike):
    """`path` opened to append text (created if needed), refusing a symbolic link there
    (`OSError` `ELOOP` naming it)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP or (e.errno == errno.EMLINK and _NOFOLLOW):
            raise OSError(
                errno.ELOOP,
                "a symbolic link; the trainer does not write through links (remove it)",
                str(path),
            ) from None
        raise
    return os.fdopen(fd, "a")


def fsync_folder(folder: str | os.PathLike) -> None:
    """Make the renames in `folder` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

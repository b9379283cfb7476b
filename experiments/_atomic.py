"""Atomic file writes: a reader (or a crash at any instant) sees the old file or the new
one, whole, never a mix.

Each write goes to a temporary name in the same folder, is flushed with `fsync`, and is
`os.replace`d onto its name; the folder is then `fsync`ed so that the rename survives a
power loss. Used by the LRA trainer's checkpoints, metrics and outputs, and by the export
command.
"""

import os
from pathlib import Path

__all__ = ["write_atomic", "write_temp", "fsync_folder"]


def write_temp(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to a temporary file beside `path`, flushed to disk; returns its path
    (the caller `os.replace`s it onto `path`, or removes it). Nothing is left on failure."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` via a temporary file, `fsync` and `os.replace`."""
    path = Path(path)
    tmp = write_temp(path, data)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_folder(path.parent)


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

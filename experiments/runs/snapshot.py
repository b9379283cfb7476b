"""A consistent read of files that a live process replaces, each atomically, one after the
other (a trainer's `best.*`, then `last.*`): the read is taken again when any of them
changed during it (`os.replace` gives a new inode), and its result is used only from a
read during which none changed. The export and sample commands read a run so while it
trains (a read between the trainer's two replacements saw one new file and one old: a
false alarm, "holds the weights of step ...")."""

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

__all__ = ["read_consistently"]

T = TypeVar("T")


def _stamp(folder: Path, names: Sequence[str]) -> tuple:
    stamps = []
    for name in names:
        try:
            info = os.lstat(folder / name)
        except OSError:
            stamps.append(None)
            continue
        stamps.append((info.st_ino, info.st_mtime_ns, info.st_size))
    return tuple(stamps)


def read_consistently(
    folder: str | os.PathLike,
    names: Sequence[str],
    read: Callable[[], T],
    *,
    errors: tuple[type[BaseException], ...],
    busy: Callable[[int], BaseException],
    attempts: int = 20,
) -> T:
    """`read()`, from a call during which none of `folder`'s files `names` changed. An
    error of `errors` is raised when the files did not change during the call that raised
    it (it is the files', not the race's); `busy(attempts)` when they changed during every
    one of `attempts` calls (with pauses from 0.05 s up to 1 s between them)."""
    folder = Path(folder)
    for attempt in range(attempts):
        before = _stamp(folder, names)
        try:
            result = read()
        except errors:
            if _stamp(folder, names) == before:
                raise
        else:
            if _stamp(folder, names) == before:
                return result
        time.sleep(min(0.05 * 2**attempt, 1.0))
    raise busy(attempts)

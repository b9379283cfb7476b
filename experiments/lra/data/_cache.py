"""The cache of built arrays: `.npy` files plus `meta.json` under `cache_dir/<task>[-max<n>]/`.

Arrays are written under temporary names and moved into place once every one is complete
(`Store.commit`); `meta.json`, written last, holds a fingerprint of the source files (size,
modification and change times, inode: `fingerprint`), so a changed source or an
interrupted build is rebuilt rather than reused.
"""

import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import numpy as np

from ._common import DataError, write_atomic

T = TypeVar("T")

CACHE_VERSION = 1


def cache_folder(cache_dir: Path, name: str) -> Path:
    """`cache_dir/name`, created; a `DataError` if either is a file or cannot be made."""
    for folder in (cache_dir, cache_dir / name):
        if folder.exists() and not folder.is_dir():
            raise DataError(
                f"cache_dir: {str(folder)!r} is a file; expected a folder (or a "
                "path that does not exist yet)."
            )
    cache = cache_dir / name
    cache_io(cache, lambda: cache.mkdir(parents=True, exist_ok=True))
    return cache


def cache_io(cache: Path, action: Callable[[], T]) -> T:
    """Run a file operation on the cache, turning an `OSError` into a `DataError`."""
    try:
        return action()
    except OSError as e:
        raise DataError(f"cache_dir: cannot write the cache in {str(cache)!r} ({e}).") from e


def fingerprint(task: str, task_dir: Path, files: Iterable[Path], max_examples: int | None) -> str:
    """Hash of the source files' names, sizes, inodes and modification and change times,
    plus the load options.

    The change time (`st_ctime_ns`) moves on every write and cannot be set back, unlike
    the modification time (`os.utime`, `touch -r`, `cp -p`, or an edit within the
    filesystem's time resolution): a file rewritten with its size and mtime kept is a new
    source. A file replaced by another (a new inode) is too. Copying the data elsewhere
    rebuilds the cache once (the safe direction)."""
    h = hashlib.sha256(f"{task}|{max_examples}|{CACHE_VERSION}\n".encode())
    for path in sorted(files):
        st = path.stat()
        stamp = f"{st.st_size}\t{st.st_mtime_ns}\t{st.st_ctime_ns}\t{st.st_ino}"
        h.update(f"{path.relative_to(task_dir)}\t{stamp}\n".encode())
    return h.hexdigest()


def load_cache(cache: Path, fingerprint: str) -> tuple[dict[str, np.ndarray], dict] | None:
    """The cached arrays and metadata, or None if absent, stale or unreadable."""
    try:
        meta = json.loads((cache / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if meta.get("version") != CACHE_VERSION or meta.get("fingerprint") != fingerprint:
        return None
    try:
        return open_arrays(cache, meta["arrays"]), meta
    except (OSError, ValueError, KeyError):
        return None


def open_arrays(folder: Path, names: Iterable[str]) -> dict[str, np.ndarray]:
    return {
        name: np.load(folder / f"{name}.npy", mmap_mode="r" if ".inputs" in name else None)
        for name in names
    }


class Store:
    """Where a loader puts the arrays it builds: memory, or (with a cache) `.npy` files
    written under temporary names.

    Array names are `<split>.<field>`, e.g. `train.inputs`, `val.labels`; the fields are
    those of `Split` that the loader's metadata lists in `"fields"`.
    """

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.arrays: dict[str, np.ndarray] = {}
        self._tmp: dict[str, Path] = {}

    def _tmp_path(self, name: str) -> Path:
        assert self.folder is not None
        # A random part: a link planted at a guessable name is never opened (open_memmap
        # follows links).
        return self.folder / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp.npy"

    def empty(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A zero array to fill in place (memory-mapped when caching)."""
        if self.folder is None:
            arr = np.zeros(shape, dtype)
        else:
            path = self._tmp[name] = self._tmp_path(name)
            arr = cache_io(
                self.folder,
                lambda: np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape),
            )
        self.arrays[name] = arr
        return arr

    def put(self, name: str, arr: np.ndarray) -> None:
        """Store a finished array."""
        if self.folder is not None:
            path = self._tmp[name] = self._tmp_path(name)
            cache_io(self.folder, lambda: np.save(path, arr))
        self.arrays[name] = arr

    def truncate(self, name: str, n: int) -> None:
        """Keep only the first `n` rows of array `name`."""
        arr = self.arrays[name]
        if n == len(arr):
            return
        if self.folder is None:
            self.arrays[name] = arr[:n].copy()
            return
        old = self._tmp.pop(name)
        new = self.empty(f"{name}.part", (n, *arr.shape[1:]), arr.dtype)
        for i in range(0, n, 4096):
            new[i : i + 4096] = arr[i : min(i + 4096, n)]
        del self.arrays[f"{name}.part"]
        self._tmp[name] = self._tmp.pop(f"{name}.part")
        self.arrays[name] = new
        del arr
        old.unlink()

    def commit(self) -> dict[str, np.ndarray]:
        """Move temporary files to their final names; return the arrays."""
        if self.folder is None:
            return dict(self.arrays)
        for name, tmp in self._tmp.items():
            arr = self.arrays[name]
            if isinstance(arr, np.memmap):
                arr.flush()
            final = self.folder / f"{name}.npy"
            cache_io(self.folder, lambda tmp=tmp, final=final: os.replace(tmp, final))
        self._tmp.clear()
        names = list(self.arrays)
        self.arrays.clear()
        return open_arrays(self.folder, names)

    def abort(self) -> None:
        self.arrays.clear()
        for tmp in self._tmp.values():
            tmp.unlink(missing_ok=True)
        self._tmp.clear()


def write_meta(cache: Path, meta: dict) -> None:
    text = json.dumps(meta, indent=1, ensure_ascii=False)
    cache_io(cache, lambda: write_atomic(cache / "meta.json", text.encode("utf-8")))

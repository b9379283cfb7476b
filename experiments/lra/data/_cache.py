"""The cache of built arrays: `.npy` files plus `meta.json` under `cache_dir/<task>[-max<n>]/`.

Arrays are written under temporary names and moved into place once every one is complete
(`Store.commit`); `meta.json`, written last, holds a fingerprint of the source files (size,
modification and change times, inode: `fingerprint`), so a changed source or an
interrupted build is rebuilt rather than reused. Its fields are read as a `CacheMeta`,
each checked: a `meta.json` edited by hand is named with the field in one warning, and
the cache rebuilt.
"""

import dataclasses
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ...runs.records import TEXT, WHOLE, Fields, Rule, is_int, kind, shown
from ._common import LOG, SPLITS, DataError, Split, write_atomic

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


#: The fields of a `Split`, as a loader's metadata lists them.
_FIELDS = tuple(f.name for f in dataclasses.fields(Split))


def _names(allowed: Callable[[str], bool], what: str) -> Rule:
    """A list of strings each of which `allowed` accepts (`what`: such a string, in words)."""

    def problem(value: Any) -> str | None:
        if not isinstance(value, list):
            return f"{shown(value)} ({kind(value)})"
        bad = [x for x in value if not (isinstance(x, str) and allowed(x))]
        return f"a list holding {shown(bad[0])}" if bad else None

    return Rule(problem, f"a list of {what}")


def _counts(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"{shown(value)} ({kind(value)})"
    bad = [k for k, v in value.items() if not (is_int(v) and v >= 0)]
    return f"an object whose {bad[0]!r} is {shown(value[bad[0]])}" if bad else None


def _aliases(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"{shown(value)} ({kind(value)})"
    bad = [k for k, v in value.items() if not (k in SPLITS and v in SPLITS)]
    return f"an object whose {bad[0]!r} is {shown(value[bad[0]])}" if bad else None


#: What to do about a malformed `meta.json` (the end of the refusal's line).
_ADVICE = "it was edited, or written by another tool."

_RULES = {
    "version": WHOLE,
    "fingerprint": TEXT,
    "arrays": _names(
        lambda x: x.partition(".")[0] in SPLITS and x.partition(".")[2] in _FIELDS,
        "'<split>.<field>' names",
    ),
    "fields": _names(lambda x: x in _FIELDS, f"fields of a split ({', '.join(_FIELDS)})"),
    "vocab": _names(lambda x: True, "tokens (strings)").or_null(),
    "seq_len": Rule.of(lambda v: is_int(v) and v >= 1, "a whole number >= 1"),
    "dropped": Rule(_counts, "an object of counts (whole numbers >= 0)"),
    "aliases": Rule(_aliases, f"an object naming a split ({', '.join(SPLITS)}) by another"),
}


@dataclasses.dataclass(frozen=True)
class CacheMeta:
    """A task's built arrays described (the cache's `meta.json`, or a fresh build's):
    `version` (`CACHE_VERSION`) and `fingerprint` (of the sources, `fingerprint`); the
    names of the `arrays` (`"<split>.<field>"`) and the `fields` of each split; the
    `vocab` (None for pixel tasks), the padded width `seq_len`, the counts of `dropped`
    items by reason, and the `aliases` of splits stored as another (`{"val": "test"}`)."""

    version: int
    fingerprint: str
    arrays: tuple[str, ...]
    fields: tuple[str, ...]
    vocab: tuple[str, ...] | None
    seq_len: int
    dropped: dict[str, int]
    aliases: dict[str, str]

    @classmethod
    def from_json(cls, obj: Any, *, where: str | os.PathLike, advice: str = _ADVICE) -> "CacheMeta":
        """The record the JSON object `obj` (read from `where`) holds; `aliases` may be
        absent (none). **Raises:** `DataError`, one line naming `where` and the field
        (and ending with `advice`), if a field is missing or does not hold what `load`
        writes, or a split lacks the array of one of its `fields`."""
        f = Fields.of(obj, where=where, error=DataError, advice=advice)
        vocab = f.get("vocab", _RULES["vocab"])
        meta = cls(
            version=f.get("version", _RULES["version"]),
            fingerprint=f.get("fingerprint", _RULES["fingerprint"]),
            arrays=tuple(f.get("arrays", _RULES["arrays"])),
            fields=tuple(f.get("fields", _RULES["fields"])),
            vocab=None if vocab is None else tuple(vocab),
            seq_len=f.get("seq_len", _RULES["seq_len"]),
            dropped=dict(f.get("dropped", _RULES["dropped"])),
            aliases=dict(f.get("aliases", _RULES["aliases"], {})),
        )
        stored = sorted({name.partition(".")[0] for name in meta.arrays})
        needed = [f"{s}.{field}" for s in stored for field in meta.fields]
        missing = [name for name in needed if name not in meta.arrays]
        if missing:
            raise DataError(
                f"{where} is corrupt: its 'arrays' lack {missing[0]!r} (a field it lists "
                f"in 'fields'); {advice}"
            )
        return meta


def load_cache(cache: Path, fingerprint: str) -> tuple[dict[str, np.ndarray], CacheMeta] | None:
    """The cached arrays and their record, or None if absent, stale or unreadable (then
    rebuilt; a `meta.json` whose fields are malformed is named in a warning)."""
    path = cache / "meta.json"
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(obj, dict) and (obj.get("version"), obj.get("fingerprint")) != (
        CACHE_VERSION,
        fingerprint,
    ):
        return None  # another version of the cache, or the sources changed
    try:
        meta = CacheMeta.from_json(obj, where=path)
    except DataError as e:
        LOG.warning("%s The cache is rebuilt.", e)
        return None
    try:
        return open_arrays(cache, meta.arrays), meta
    except (OSError, ValueError):
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

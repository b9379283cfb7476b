"""Loaders for the official Long Range Arena (LRA) files, using numpy and Pillow only.

Every task reads the files as released (see `shared/LRA.md`); nothing is downloaded.
The folder of each task is found by searching under `data_root` (`find_task_dir`),
because the archive nests as `lra_release/lra_release/...`.

| task | folder searched for, files in it | l_max | classes |
|---|---|---|---|
| `listops` | `listops-1000/basic_{train,val,test}.tsv` | 2048 | 10 |
| `text` | `aclImdb/{train,test}/{neg,pos}/*.txt` (`unsup` ignored) | 4096 | 2 |
| `retrieval` | `tsv_data/new_aan_pairs.{train,eval,test}.tsv` | 4000 | 2 |
| `image` | `cifar-10-batches-py/{data_batch_1..5,test_batch}` (pickles) | 1024 | 10 |
| `pathfinder` | `pathfinder32/curv_contour_length_14/{metadata,imgs}` | 1024 | 2 |
| `pathx` | `pathfinder128/curv_contour_length_14/{metadata,imgs}` | 16384 | 2 |

ListOps TSVs have the header `Source<TAB>Target`, then `expression<TAB>label`. AAN TSVs
have no header and 5 tab-separated columns `label id1 id2 text1 text2`; quotes are
literal characters (csv `QUOTE_NONE`) and the label is read as `int(float(x))`.
CIFAR pickles hold `b"data"`, uint8 `(n, 3072)` as R, G, B planes of 32x32, and
`b"labels"`.

**Token tasks** (S5 convention). ListOps: replace `]` by `X`, drop `(` and `)`, split on
whitespace. Text and Retrieval: one token per Unicode code point (`list(text)`). Each
document is truncated to `l_max - 1` tokens and `<eos>` is appended. The vocabulary is
`<pad>`=0, `<unk>`=1, `<eos>`=2, then the train tokens by descending count, ties in
lexicographic order; Text keeps characters seen at least 15 times in the truncated train
texts (rarer ones map to `<unk>`), ListOps and Retrieval keep every train token.
Token arrays are right-padded with `<pad>`=0 to the longest document present in the
three splits (so at most `l_max`; `TaskData.seq_len` is that width). They are stored in
the smallest unsigned dtype that holds the vocabulary (uint8 for every LRA task, which
keeps Retrieval at 1.2 GB instead of 4.7 GB); `TaskData.batch` returns int32.

**Pixel tasks.** Stored as uint8 `(n, H*W, C)` in row-major pixel order and normalised
on the fly by `TaskData.batch`: Image per channel `(x/255 - mean)/std` with mean
(0.4914, 0.4822, 0.4465) and std (0.247, 0.243, 0.261); Pathfinder and PathX
`(x/255 - 0.5)/0.5` in [-1, 1]. Pathfinder metadata files are plain text despite the
`.npy` suffix: one line per image, field 0 `imgs/<batch>`, field 1 `sample_<k>.png`,
field 3 the label. Empty, missing or unreadable PNGs are skipped, counted in
`TaskData.dropped` and logged.

**Splits** (all deterministic):
- ListOps: the three files. Retrieval: `train`, `eval` (= val), `test`.
- Text: IMDB has no validation set; as in LRA and S5, **val is the test split** (the same
  `Split` object). Files are read in sorted name order, interleaving the classes
  (neg, pos, neg, pos, ...) so that every prefix (see `max_examples`) is balanced.
- Image: the 50k train images are permuted with `np.random.default_rng(42)`; the first
  10% of the permutation (5,000) is val, the rest (45,000) train; `test_batch` is test.
- Pathfinder, PathX: all images in metadata order are permuted with
  `np.random.default_rng(42)` and cut 80/10/10 into train/val/test.
Within a split, examples keep file order (random splits are sorted by original index).

**Caching.** With `cache_dir`, the built arrays are written once as `.npy` files
(temporary name + `os.replace`) under `cache_dir/<task>[-max<n>]/` together with
`meta.json` (the vocabulary, dropped counts and a fingerprint of the source files'
names, sizes and mtimes; for Pathfinder and PathX the metadata files). Later calls
reopen them with `np.load(mmap_mode="r")` if the fingerprint still matches, and rebuild
otherwise. Pixel arrays are built straight into
the memory-mapped files, so PathX never needs 3.3 GB of RAM. Without `cache_dir`
everything is built in memory on every call.

**Errors.** Every problem with the data itself raises `DataError` (a `ValueError`) naming
the file, and the line where there is one: a malformed TSV line or label, a file that is
not UTF-8 or cannot be read, a bad CIFAR pickle, a PNG of the wrong size, a `cache_dir`
that is a file or cannot be written, and a split with no examples (`TaskData.sizes` gives
the split sizes). A missing folder or file raises `MissingDataError`, which is both a
`DataError` and a `FileNotFoundError`. The command-line tools print these as one
`error: ...` line with exit status 2.
"""

import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import os
import pickle
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image


__all__ = [
    "DataError",
    "MissingDataError",
    "TASKS",
    "SPECIALS",
    "PAD_ID",
    "UNK_ID",
    "EOS_ID",
    "Split",
    "TaskData",
    "find_task_dir",
    "load_task",
    "batch_indices",
]

_LOG = logging.getLogger(__name__)

TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
SPECIALS = ("<pad>", "<unk>", "<eos>")
PAD_ID, UNK_ID, EOS_ID = 0, 1, 2

TASK_DIRS = {
    "listops": "listops-1000",
    "text": "aclImdb",
    "retrieval": "tsv_data",
    "image": "cifar-10-batches-py",
    "pathfinder": "pathfinder32/curv_contour_length_14",
    "pathx": "pathfinder128/curv_contour_length_14",
}
L_MAX = {"listops": 2048, "text": 4096, "retrieval": 4000}
NUM_CLASSES = {"listops": 10, "text": 2, "retrieval": 2, "image": 10, "pathfinder": 2, "pathx": 2}
IMAGE_SIDE = {"image": 32, "pathfinder": 32, "pathx": 128}
IN_CHANNELS = {"image": 3, "pathfinder": 1, "pathx": 1}
TEXT_MIN_FREQ = 15
SPLIT_SEED = 42
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.247, 0.243, 0.261)
SEARCH_DEPTH = 4

_SPLITS = ("train", "val", "test")
_CACHE_VERSION = 1
_MAX_CODE_POINT = 0x110000
_READ_CHUNK = 2048


# --------------------------------------------------------------------------- public types


class DataError(ValueError):
    """A problem with the data a user gave: a malformed, unreadable or missing file (named,
    with its line where there is one), an empty split, or an unusable cache folder.

    Command-line tools catch it and print one `error: ...` line with exit status 2.
    """


class MissingDataError(DataError, FileNotFoundError):
    """A task folder or file that should exist does not (also a `FileNotFoundError`)."""


@dataclasses.dataclass(frozen=True, eq=False)
class Split:
    """One split of a task. Arrays may be read-only `np.memmap`s.

    - `inputs`: token ids `(n, L)` right-padded with 0 (smallest unsigned dtype holding
      the vocabulary), or uint8 pixels `(n, L, C)`.
    - `lengths`: int32 `(n,)` valid lengths including `<eos>`; `L` for pixel tasks.
    - `labels`: int32 `(n,)`.
    - `inputs2`, `lengths2`: the second document of each Retrieval pair, else None.
    """

    inputs: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    inputs2: np.ndarray | None = None
    lengths2: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)


@dataclasses.dataclass(frozen=True, eq=False)
class TaskData:
    """A loaded task: three splits plus what a model needs to know about them.

    `seq_len` is the padded width `L` of `inputs`; `vocab` is the id -> token table
    (None for pixel tasks); `in_channels` is 3 (Image), 1 (Pathfinder, PathX) or None
    (token tasks); `dropped` counts skipped items per reason (`{}` if none).
    """

    task: str
    train: Split
    val: Split
    test: Split
    num_classes: int
    seq_len: int
    vocab: tuple[str, ...] | None
    in_channels: int | None
    dropped: dict[str, int]

    @property
    def sizes(self) -> dict[str, int]:
        """Examples per split, `{"train": n, "val": n, "test": n}` (all >= 1 once loaded)."""
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}

    def batch(self, split: Split, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Gather examples `indices` of `split` into model-ready arrays.

        **Returns:** `{"inputs", "lengths", "labels"}` and, for Retrieval, `"inputs2"`,
        `"lengths2"`. Token inputs are int32 `(B, L)`; pixel inputs are float32
        `(B, L, C)`, normalised as described in the module docstring.
        """
        idx = _check_indices(indices, len(split))
        out = {
            "inputs": self._inputs(split.inputs, idx),
            "lengths": np.asarray(split.lengths[idx], dtype=np.int32),
            "labels": np.asarray(split.labels[idx], dtype=np.int32),
        }
        if split.inputs2 is not None and split.lengths2 is not None:
            out["inputs2"] = self._inputs(split.inputs2, idx)
            out["lengths2"] = np.asarray(split.lengths2[idx], dtype=np.int32)
        return out

    def _inputs(self, inputs: np.ndarray, idx: np.ndarray) -> np.ndarray:
        if self.in_channels is None:
            return np.asarray(inputs[idx], dtype=np.int32)
        scale, offset = _pixel_affine(self.task)
        return np.asarray(inputs[idx], dtype=np.float32) * scale + offset


# --------------------------------------------------------------------------- public functions


def batch_indices(
    n: int, batch_size: int, *, seed: int, epoch: int, shuffle: bool, drop_last: bool
) -> list[np.ndarray]:
    """Split `range(n)` into batches of indices, deterministically from `(seed, epoch)`.

    With `shuffle`, the order is `np.random.default_rng([seed, epoch]).permutation(n)`, so
    a resumed run reproduces the exact batches of any epoch. With `drop_last` the final
    incomplete batch is dropped (the result is empty when `n < batch_size`).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    if seed < 0 or epoch < 0:
        raise ValueError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}.")
    order = np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)
    stop = n - n % batch_size if drop_last else n
    return [order[i : i + batch_size] for i in range(0, stop, batch_size)]


def find_task_dir(data_root: str | os.PathLike, relative: str | os.PathLike) -> Path:
    """Find the folder `relative` (e.g. `"listops-1000"`) under `data_root`.

    Looks breadth-first up to `SEARCH_DEPTH` levels below `data_root` (hidden folders
    skipped) and returns the shallowest match, the lexicographically smallest path among
    equally deep ones. `data_root` may also be the task folder itself.

    **Raises:** `FileNotFoundError` listing the searched folders if there is no match.
    """
    root = Path(data_root).expanduser()
    rel = Path(relative)
    if not root.is_dir():
        raise MissingDataError(f"data_root {str(root)!r} is not a directory.")
    if len(root.parts) >= len(rel.parts) and Path(*root.parts[-len(rel.parts) :]) == rel:
        return root
    searched: list[Path] = []
    level = [root]
    for depth in range(SEARCH_DEPTH + 1):
        searched.extend(level)
        hits = [folder / rel for folder in level if (folder / rel).is_dir()]
        if hits:
            return hits[0]
        if depth < SEARCH_DEPTH:
            level = sorted(child for folder in level for child in _subfolders(folder))
    shown = ", ".join(str(p) for p in searched[:12]) + (", ..." if len(searched) > 12 else "")
    raise MissingDataError(
        f"Could not find the folder {str(rel)!r} under {str(root)!r} (searched "
        f"{len(searched)} folders up to {SEARCH_DEPTH} levels deep: {shown}). Extract "
        "lra_release.gz (ListOps, Retrieval, Pathfinder, PathX), aclImdb (Text) or "
        "cifar-10-batches-py (Image) below data_root, or pass the folder containing it."
    )


def load_task(
    task: str,
    data_root: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
) -> TaskData:
    """Load one LRA task from the official files under `data_root`.

    **Arguments:**
    - `task`: one of `TASKS`.
    - `data_root`: a folder containing the task folder at any depth up to `SEARCH_DEPTH`.
    - `cache_dir`: where to keep built arrays and the vocabulary (recommended, required in
      practice for PathX); None builds in memory every time.
    - `max_examples`: keep at most this many examples of each split (the first ones in
      split order); the vocabulary is then built from the kept train examples.

    **Raises:** `DataError` for a malformed or unreadable file (naming the file and line),
    an empty split or an unusable `cache_dir`; `MissingDataError` (a `DataError` and a
    `FileNotFoundError`) for a missing folder or file; `ValueError` for an unknown `task`
    or a bad `max_examples`.
    """
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; expected one of {TASKS}.")
    if max_examples is not None and (not isinstance(max_examples, int) or max_examples < 1):
        raise ValueError(f"max_examples must be a positive int or None, got {max_examples!r}.")
    task_dir = find_task_dir(data_root, TASK_DIRS[task])
    fingerprint = _fingerprint(task, task_dir, max_examples)
    cache = None
    if cache_dir is not None:
        name = task if max_examples is None else f"{task}-max{max_examples}"
        cache = _cache_folder(Path(cache_dir).expanduser(), name)
        cached = _load_cache(cache, fingerprint)
        if cached is not None:
            return _assemble(task, *cached)
        _cache_io(cache, lambda: (cache / "meta.json").unlink(missing_ok=True))
        _LOG.info("Building the %s cache in %s", task, cache)
    store = _Store(cache)
    try:
        meta = _BUILDERS[task](task_dir, store, max_examples)
        _check_nonempty(task, task_dir, store.arrays)
        arrays = store.commit()
    except BaseException:
        store.abort()
        raise
    meta = {"version": _CACHE_VERSION, "fingerprint": fingerprint, "arrays": sorted(arrays), **meta}
    if cache is not None:
        text = json.dumps(meta, indent=1, ensure_ascii=False)
        _cache_io(cache, lambda: _write_atomic(cache / "meta.json", text.encode("utf-8")))
    if meta["dropped"]:
        _LOG.warning("%s: skipped items %s under %s", task, meta["dropped"], task_dir)
    return _assemble(task, arrays, meta)


# --------------------------------------------------------------------------- helpers: misc


def _check_indices(indices: np.ndarray, n: int) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.ndim != 1 or not (np.issubdtype(idx.dtype, np.integer) or idx.size == 0):
        raise ValueError(
            f"indices must be a 1-D integer array, got shape {idx.shape} and dtype {idx.dtype}."
        )
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(f"indices must lie in [0, {n}), got min {idx.min()} and max {idx.max()}.")
    return idx.astype(np.intp)


def _pixel_affine(task: str) -> tuple[np.ndarray, np.ndarray]:
    """`x * scale + offset` equals `(x/255 - mean)/std` per channel."""
    if task == "image":
        mean, std = np.asarray(CIFAR_MEAN), np.asarray(CIFAR_STD)
    else:
        mean, std = np.asarray([0.5]), np.asarray([0.5])
    return (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)


def _subfolders(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries if not e.name.startswith(".") and e.is_dir()]
    except OSError:
        return []


def _parse_label(text: str, num_classes: int, where: str, *, via_float: bool = False) -> int:
    try:
        value = int(float(text)) if via_float else int(text)
    except (ValueError, OverflowError):
        raise DataError(f"{where}: label {text!r} is not an integer.") from None
    if not 0 <= value < num_classes:
        raise DataError(f"{where}: label {value} is out of range [0, {num_classes}).")
    return value


def _read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield `(line_number, line)` of a UTF-8 file, lines split on `\\n` only."""
    if not path.is_file():
        raise MissingDataError(f"Missing file {str(path)!r}.")
    lineno = 0
    try:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                try:
                    text = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    raise DataError(f"{path}:{lineno}: not valid UTF-8 ({e}).") from None
                yield lineno, text
    except OSError as e:
        raise DataError(f"{path}:{lineno + 1}: cannot read the file ({e}).") from None


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _split_permutation(n: int, val_fraction: float, test_fraction: float) -> dict[str, np.ndarray]:
    """Deterministic random split of `range(n)`; each part sorted."""
    perm = np.random.default_rng(SPLIT_SEED).permutation(n)
    n_val, n_test = int(n * val_fraction), int(n * test_fraction)
    n_train = n - n_val - n_test
    cuts = {"train": (0, n_train), "val": (n_train, n_train + n_val), "test": (n_train + n_val, n)}
    return {k: np.sort(perm[a:b]) for k, (a, b) in cuts.items()}


# --------------------------------------------------------------------------- helpers: cache


def _cache_folder(cache_dir: Path, name: str) -> Path:
    """`cache_dir/name`, created; a `DataError` if either is a file or cannot be made."""
    for folder in (cache_dir, cache_dir / name):
        if folder.exists() and not folder.is_dir():
            raise DataError(f"cache_dir: {str(folder)!r} is a file; expected a folder (or a "
                            "path that does not exist yet).")
    cache = cache_dir / name
    _cache_io(cache, lambda: cache.mkdir(parents=True, exist_ok=True))
    return cache


def _cache_io(cache: Path, action: Callable[[], object]) -> object:
    """Run a file operation on the cache, turning an `OSError` into a `DataError`."""
    try:
        return action()
    except OSError as e:
        raise DataError(f"cache_dir: cannot write the cache in {str(cache)!r} ({e}).") from e


def _split_sources(task: str, task_dir: Path) -> dict[str, str]:
    """Where each split comes from, for messages."""
    if task == "listops":
        return {s: str(task_dir / f"basic_{s}.tsv") for s in _SPLITS}
    if task == "retrieval":
        files = {"train": "train", "val": "eval", "test": "test"}
        return {s: str(task_dir / f"new_aan_pairs.{f}.tsv") for s, f in files.items()}
    if task == "text":
        return {s: f"{task_dir / f}/{{neg,pos}}/*.txt" for s, f in
                {"train": "train", "val": "test", "test": "test"}.items()}
    if task == "image":
        train = f"{task_dir}/data_batch_{{1..5}} (90/10 train/val split)"
        return {"train": train, "val": train, "test": str(task_dir / "test_batch")}
    usable = f"the usable images listed in {task_dir / 'metadata'} (80/10/10 split)"
    return dict.fromkeys(_SPLITS, usable)


def _check_nonempty(task: str, task_dir: Path, arrays: Mapping[str, np.ndarray]) -> None:
    sizes = {n.split(".")[0]: len(a) for n, a in arrays.items() if n.endswith(".labels")}
    empty = [s for s in _SPLITS if sizes.get(s, 1) == 0]
    if empty:
        shown = "/".join(str(sizes.get(s, sizes.get("test"))) for s in _SPLITS)
        sources = _split_sources(task, task_dir)
        names = empty[0] if len(empty) == 1 else f"{', '.join(empty[:-1])} and {empty[-1]}"
        raise DataError(
            f"{task}: the {names} split{'s are' if len(empty) > 1 else ' is'} "
            f"empty (train/val/test sizes {shown}; {empty[0]} comes from {sources[empty[0]]}). "
            "Every split needs at least one example."
        )


def _fingerprint(task: str, task_dir: Path, max_examples: int | None) -> str:
    """Hash of the source files' names, sizes and mtimes plus the load options."""
    h = hashlib.sha256(f"{task}|{max_examples}|{_CACHE_VERSION}\n".encode())
    for path in sorted(_source_files(task, task_dir)):
        st = path.stat()
        h.update(f"{path.relative_to(task_dir)}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _source_files(task: str, task_dir: Path) -> Iterable[Path]:
    if task == "listops":
        return [p for p in task_dir.glob("basic_*.tsv")]
    if task == "retrieval":
        return [p for p in task_dir.glob("new_aan_pairs.*.tsv")]
    if task == "text":
        folders = [task_dir / s / c for s in ("train", "test") for c in ("neg", "pos")]
        return [p for folder in folders for p in folder.glob("*.txt")]
    if task == "image":
        return [p for p in task_dir.iterdir() if p.is_file()]
    return [p for p in (task_dir / "metadata").glob("*.npy")]  # images are named by metadata


def _load_cache(cache: Path, fingerprint: str) -> tuple[dict[str, np.ndarray], dict] | None:
    try:
        meta = json.loads((cache / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if meta.get("version") != _CACHE_VERSION or meta.get("fingerprint") != fingerprint:
        return None
    try:
        return _open_arrays(cache, meta["arrays"]), meta
    except (OSError, ValueError, KeyError):
        return None


def _open_arrays(folder: Path, names: Iterable[str]) -> dict[str, np.ndarray]:
    return {
        name: np.load(folder / f"{name}.npy", mmap_mode="r" if ".inputs" in name else None)
        for name in names
    }


class _Store:
    """Where built arrays go: memory, or `.npy` files written under temporary names."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.arrays: dict[str, np.ndarray] = {}
        self._tmp: dict[str, Path] = {}

    def _tmp_path(self, name: str) -> Path:
        assert self.folder is not None
        return self.folder / f".{name}.{os.getpid()}.tmp.npy"

    def empty(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A zero array to fill in place (memory-mapped when caching)."""
        if self.folder is None:
            arr = np.zeros(shape, dtype)
        else:
            path = self._tmp[name] = self._tmp_path(name)
            arr = _cache_io(self.folder, lambda: np.lib.format.open_memmap(
                path, mode="w+", dtype=dtype, shape=shape))
        self.arrays[name] = arr
        return arr

    def put(self, name: str, arr: np.ndarray) -> None:
        """Store a finished array."""
        if self.folder is not None:
            path = self._tmp[name] = self._tmp_path(name)
            _cache_io(self.folder, lambda: np.save(path, arr))
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
            _cache_io(self.folder, lambda tmp=tmp, final=final: os.replace(tmp, final))
        self._tmp.clear()
        names = list(self.arrays)
        self.arrays.clear()
        return _open_arrays(self.folder, names)

    def abort(self) -> None:
        self.arrays.clear()
        for tmp in self._tmp.values():
            tmp.unlink(missing_ok=True)
        self._tmp.clear()


def _assemble(task: str, arrays: Mapping[str, np.ndarray], meta: Mapping) -> TaskData:
    stored = {name.split(".")[0] for name in arrays}
    splits = {s: Split(**{f: arrays[f"{s}.{f}"] for f in meta["fields"]}) for s in sorted(stored)}
    splits.update({alias: splits[target] for alias, target in meta["aliases"].items()})
    vocab = meta["vocab"]
    return TaskData(
        task=task,
        train=splits["train"],
        val=splits["val"],
        test=splits["test"],
        num_classes=NUM_CLASSES[task],
        seq_len=int(meta["seq_len"]),
        vocab=None if vocab is None else tuple(vocab),
        in_channels=IN_CHANNELS.get(task),
        dropped=dict(meta["dropped"]),
    )


# --------------------------------------------------------------------------- token tasks

# An example is (label, documents); a document is a list of word tokens (ListOps) or an
# array of Unicode code points (Text, Retrieval), already truncated to l_max - 1.
_Example = tuple[int, tuple[Sequence, ...]]
_Source = Callable[[], Iterator[_Example]]


def _take(examples: Iterator[_Example], limit: int | None) -> Iterator[_Example]:
    for i, example in enumerate(examples):
        if limit is not None and i >= limit:
            return
        yield example


def _build_vocab(counts: Mapping[str, int], min_freq: int) -> tuple[str, ...]:
    """Specials, then tokens with count >= min_freq by descending count, ties lexicographic."""
    kept = [t for t, c in counts.items() if c >= min_freq and t not in SPECIALS]
    return SPECIALS + tuple(sorted(kept, key=lambda t: (-counts[t], t)))


def _count_words(source: _Source) -> Counter:
    counts: Counter = Counter()
    for _, docs in source():
        for doc in docs:
            counts.update(doc)
    return counts


def _count_chars(source: _Source) -> dict[str, int]:
    total = np.zeros(_MAX_CODE_POINT, np.int64)
    buffer: list[np.ndarray] = []
    size = 0
    for _, docs in source():
        buffer.extend(docs)
        size += sum(len(d) for d in docs)
        if size > 1 << 22:
            total += np.bincount(np.concatenate(buffer), minlength=_MAX_CODE_POINT)
            buffer, size = [], 0
    if buffer:
        total += np.bincount(np.concatenate(buffer), minlength=_MAX_CODE_POINT)
    return {chr(cp): int(total[cp]) for cp in np.flatnonzero(total)}


def _word_encoder(vocab: tuple[str, ...]) -> Callable[[Sequence], np.ndarray]:
    index = {t: i for i, t in enumerate(vocab)}
    return lambda doc: np.fromiter((index.get(t, UNK_ID) for t in doc), np.int64, len(doc))


def _char_encoder(vocab: tuple[str, ...]) -> Callable[[Sequence], np.ndarray]:
    lut = np.full(_MAX_CODE_POINT, UNK_ID, np.int64)
    for i, token in enumerate(vocab):
        if token not in SPECIALS:
            lut[ord(token)] = i
    return lambda doc: lut[np.asarray(doc, dtype=np.intp)]


def _token_dtype(vocab_size: int) -> np.dtype:
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise DataError(f"vocabulary of {vocab_size} tokens is too large")


def _build_token_task(
    store: _Store,
    sources: Mapping[str, _Source],
    *,
    chars: bool,
    min_freq: int,
    n_docs: int,
) -> dict:
    """Count train tokens, build the vocabulary, encode every split and store it."""
    counts = _count_chars(sources["train"]) if chars else _count_words(sources["train"])
    vocab = _build_vocab(counts, min_freq)
    encode = (_char_encoder if chars else _word_encoder)(vocab)
    dtype = _token_dtype(len(vocab))
    encoded: dict[str, tuple[list[int], list[list[np.ndarray]]]] = {}
    for split, source in sources.items():
        labels: list[int] = []
        rows: list[list[np.ndarray]] = [[] for _ in range(n_docs)]
        for label, docs in source():
            labels.append(label)
            for rows_k, doc in zip(rows, docs, strict=True):
                rows_k.append(np.append(encode(doc), EOS_ID).astype(dtype))
        encoded[split] = labels, rows
    lengths = (len(r) for _, rows in encoded.values() for rows_k in rows for r in rows_k)
    width = max(lengths, default=1)  # an all-empty task is refused by load_task
    suffixes = ("", "2")[:n_docs]
    for split, (labels, rows) in encoded.items():
        store.put(f"{split}.labels", np.asarray(labels, np.int32))
        for suffix, rows_k in zip(suffixes, rows, strict=True):
            padded = np.zeros((len(rows_k), width), dtype)
            for i, row in enumerate(rows_k):
                padded[i, : len(row)] = row
            store.put(f"{split}.inputs{suffix}", padded)
            store.put(f"{split}.lengths{suffix}", np.asarray([len(r) for r in rows_k], np.int32))
    fields = ["inputs", "lengths", "labels"] + (["inputs2", "lengths2"] if n_docs == 2 else [])
    return {"vocab": list(vocab), "seq_len": width, "fields": fields, "dropped": {}}


def _code_points(text: str, limit: int) -> np.ndarray:
    return np.frombuffer(text[:limit].encode("utf-32-le"), dtype="<u4")


def _listops_tokens(source: str) -> list[str]:
    return source.replace("]", "X").replace("(", "").replace(")", "").split()


def _listops_examples(path: Path) -> Iterator[_Example]:
    lines = _read_lines(path)
    first = next(lines, None)
    if first is None or first[1] != "Source\tTarget":
        got = "an empty file" if first is None else repr(first[1][:40])
        raise DataError(f"{path}:1: expected the header 'Source<TAB>Target', got {got}.")
    for lineno, line in lines:
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(
                f"{path}:{lineno}: expected 2 tab-separated columns (Source, Target), "
                f"found {len(fields)}."
            )
        label = _parse_label(fields[1], 10, f"{path}:{lineno}")
        yield label, (_listops_tokens(fields[0])[: L_MAX["listops"] - 1],)


def _build_listops(task_dir: Path, store: _Store, limit: int | None) -> dict:
    paths = {s: task_dir / f"basic_{s}.tsv" for s in _SPLITS}
    sources = {s: (lambda p=p: _take(_listops_examples(p), limit)) for s, p in paths.items()}
    return {**_build_token_task(store, sources, chars=False, min_freq=1, n_docs=1), "aliases": {}}


def _aan_examples(path: Path) -> Iterator[_Example]:
    """Rows `label id1 id2 text1 text2`; tabs split columns, quotes are literal (QUOTE_NONE)."""
    limit = L_MAX["retrieval"] - 1
    for lineno, line in _read_lines(path):
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) != 5:
            raise DataError(
                f"{path}:{lineno}: expected 5 tab-separated columns (label, id1, id2, text1, "
                f"text2), found {len(fields)}."
            )
        label = _parse_label(fields[0], 2, f"{path}:{lineno}", via_float=True)
        yield label, (_code_points(fields[3], limit), _code_points(fields[4], limit))


def _build_retrieval(task_dir: Path, store: _Store, limit: int | None) -> dict:
    names = {"train": "train", "val": "eval", "test": "test"}
    paths = {s: task_dir / f"new_aan_pairs.{f}.tsv" for s, f in names.items()}
    sources = {s: (lambda p=p: _take(_aan_examples(p), limit)) for s, p in paths.items()}
    return {**_build_token_task(store, sources, chars=True, min_freq=1, n_docs=2), "aliases": {}}


def _imdb_files(task_dir: Path, split: str) -> list[tuple[Path, int]]:
    """Sorted review files of one split, classes interleaved: neg, pos, neg, pos, ..."""
    ranked = []
    for label, name in enumerate(("neg", "pos")):
        folder = task_dir / split / name
        if not folder.is_dir():
            raise MissingDataError(
                f"Missing folder {str(folder)!r}: expected aclImdb/{split}/{name}/*.txt."
            )
        ranked += [(rank, label, p) for rank, p in enumerate(sorted(folder.glob("*.txt")))]
    return [(p, label) for _, label, p in sorted(ranked)]


def _imdb_examples(files: list[tuple[Path, int]]) -> Iterator[_Example]:
    limit = L_MAX["text"] - 1
    for path, label in files:
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: not valid UTF-8 ({e}).") from None
        except OSError as e:
            raise DataError(f"{path}: cannot read the file ({e}).") from None
        yield label, (_code_points(text, limit),)


def _build_text(task_dir: Path, store: _Store, limit: int | None) -> dict:
    files = {s: _imdb_files(task_dir, s)[:limit] for s in ("train", "test")}
    sources = {s: (lambda f=f: _imdb_examples(f)) for s, f in files.items()}
    meta = _build_token_task(store, sources, chars=True, min_freq=TEXT_MIN_FREQ, n_docs=1)
    return {**meta, "aliases": {"val": "test"}}


# --------------------------------------------------------------------------- pixel tasks


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 pickle as uint8 `(n, 1024, 3)` row-major pixels and int32 labels."""
    if not path.is_file():
        raise MissingDataError(f"Missing CIFAR-10 file {str(path)!r}.")
    try:
        with open(path, "rb") as f:  # pickle is the official format of cifar-10-batches-py
            d = pickle.load(f, encoding="bytes")
    except Exception as e:
        raise DataError(f"{path}: not a readable CIFAR-10 pickle ({e!r}).") from None
    data = d.get(b"data", d.get("data")) if isinstance(d, dict) else None
    labels = d.get(b"labels", d.get("labels")) if isinstance(d, dict) else None
    if data is None or labels is None:
        raise DataError(f"{path}: expected a dict with keys b'data' and b'labels'.")
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataError(
            f"{path}: b'data' must be uint8 of shape (n, 3072), got {data.dtype} {data.shape}."
        )
    labels = np.asarray(labels)
    if labels.shape != (len(data),) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(
            f"{path}: b'labels' must hold {len(data)} integers, got {labels.dtype} {labels.shape}."
        )
    if labels.size and (labels.min() < 0 or labels.max() >= 10):
        bad = int(np.flatnonzero((labels < 0) | (labels >= 10))[0])
        raise DataError(f"{path}: label {labels[bad]} of image {bad} is out of range [0, 10).")
    pixels = data.reshape(-1, 3, 1024).transpose(0, 2, 1)
    return np.ascontiguousarray(pixels), labels.astype(np.int32)


def _build_image(task_dir: Path, store: _Store, limit: int | None) -> dict:
    train = [_cifar_batch(task_dir / f"data_batch_{i}") for i in range(1, 6)]
    pixels = np.concatenate([p for p, _ in train])
    labels = np.concatenate([y for _, y in train])
    parts = _split_permutation(len(labels), 0.1, 0.0)
    test_pixels, test_labels = _cifar_batch(task_dir / "test_batch")
    splits = {
        "train": (pixels[parts["train"]], labels[parts["train"]]),
        "val": (pixels[parts["val"]], labels[parts["val"]]),
        "test": (test_pixels, test_labels),
    }
    for split, (x, y) in splits.items():
        store.put(f"{split}.inputs", x[:limit])
        store.put(f"{split}.lengths", np.full(len(y[:limit]), 1024, np.int32))
        store.put(f"{split}.labels", y[:limit])
    return _pixel_meta(1024, {})


def _pixel_meta(seq_len: int, dropped: Mapping[str, int]) -> dict:
    return {
        "vocab": None,
        "seq_len": seq_len,
        "fields": ["inputs", "lengths", "labels"],
        "dropped": dict(sorted(dropped.items())),
        "aliases": {},
    }


def _pathfinder_metadata(task_dir: Path) -> list[tuple[Path, int]]:
    """All `(png_path, label)` in metadata order (files sorted by integer stem)."""
    meta_dir = task_dir / "metadata"
    if not meta_dir.is_dir():
        raise MissingDataError(
            f"Missing folder {str(meta_dir)!r} (expected metadata/<batch>.npy files)."
        )
    files = []
    for path in meta_dir.glob("*.npy"):
        if not path.stem.isdigit():
            raise DataError(
                f"{path}: metadata files must be named <integer>.npy; move other files away."
            )
        files.append((int(path.stem), path))
    items = []
    for _, path in sorted(files):
        for lineno, line in _read_lines(path):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 4:
                raise DataError(
                    f"{path}:{lineno}: expected at least 4 space-separated fields "
                    f"(imgs/<batch> sample_<k>.png index label ...), found {len(fields)}."
                )
            label = _parse_label(fields[3], 2, f"{path}:{lineno}")
            items.append((task_dir / fields[0] / fields[1], label))
    if not items:
        raise DataError(f"{meta_dir}: no metadata lines found.")
    return items


def _read_png(path: Path, side: int) -> np.ndarray | str:
    """The image as uint8 `(side*side,)`, or the reason it is skipped."""
    try:
        if path.stat().st_size == 0:
            return "empty_image"
    except FileNotFoundError:
        return "missing_image"
    try:
        with Image.open(path) as img:
            pixels = np.asarray(img.convert("L"), dtype=np.uint8)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return "unreadable_image"
    if pixels.shape != (side, side):
        height, width = pixels.shape
        raise DataError(f"{path}: expected a {side}x{side} image, got {width}x{height}.")
    return pixels.reshape(-1)


def _read_pngs(
    items: Sequence[tuple[Path, int]], side: int, out: np.ndarray, dropped: Counter
) -> np.ndarray:
    """Decode PNGs (threaded) into `out[:, :, 0]`, compacting skipped ones; return labels."""
    labels = []
    workers = min(8, os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for start in range(0, len(items), _READ_CHUNK):
            chunk = items[start : start + _READ_CHUNK]
            decoded = pool.map(lambda item: _read_png(item[0], side), chunk)
            for (path, label), pixels in zip(chunk, decoded, strict=True):
                if isinstance(pixels, str):
                    dropped[pixels] += 1
                    _LOG.warning("Skipping %s (%s)", path, pixels)
                    continue
                out[len(labels), :, 0] = pixels
                labels.append(label)
    return np.asarray(labels, np.int32)


def _build_pathfinder(task_dir: Path, store: _Store, limit: int | None, *, side: int) -> dict:
    items = _pathfinder_metadata(task_dir)
    parts = _split_permutation(len(items), 0.1, 0.1)
    dropped: Counter = Counter()
    for split, idx in parts.items():
        chosen = [items[i] for i in idx[:limit]]
        out = store.empty(f"{split}.inputs", (len(chosen), side * side, 1), np.dtype(np.uint8))
        labels = _read_pngs(chosen, side, out, dropped)
        del out
        store.truncate(f"{split}.inputs", len(labels))
        store.put(f"{split}.lengths", np.full(len(labels), side * side, np.int32))
        store.put(f"{split}.labels", labels)
    return _pixel_meta(side * side, dropped)


_BUILDERS: dict[str, Callable[[Path, _Store, int | None], dict]] = {
    "listops": _build_listops,
    "text": _build_text,
    "retrieval": _build_retrieval,
    "image": _build_image,
    "pathfinder": lambda d, s, n: _build_pathfinder(d, s, n, side=IMAGE_SIDE["pathfinder"]),
    "pathx": lambda d, s, n: _build_pathfinder(d, s, n, side=IMAGE_SIDE["pathx"]),
}

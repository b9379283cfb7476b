"""What every loader shares: the error types, the loaded-task types and small file helpers."""

import dataclasses
import logging
import math
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ...runs import atomic as _atomic

LOG = logging.getLogger(__package__)

SPECIALS = ("<pad>", "<unk>", "<eos>")
PAD_ID, UNK_ID, EOS_ID = 0, 1, 2
SPLIT_SEED = 42
SEARCH_DEPTH = 4
SPLITS = ("train", "val", "test")


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
    (token tasks); `dropped` counts skipped items per reason (`{}` if none);
    `pixel_mean` and `pixel_std` (per channel, pixel tasks) normalise `x / 255`.
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
    pixel_mean: tuple[float, ...] | None = None
    pixel_std: tuple[float, ...] | None = None

    @property
    def sizes(self) -> dict[str, int]:
        """Examples per split, `{"train": n, "val": n, "test": n}` (all >= 1 once loaded)."""
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}

    def batch(self, split: Split, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Gather examples `indices` of `split` into model-ready arrays.

        **Returns:** `{"inputs", "lengths", "labels"}` and, for Retrieval, `"inputs2"`,
        `"lengths2"`. Token inputs are int32 `(B, L)`; pixel inputs are float32
        `(B, L, C)`, `(x/255 - pixel_mean)/pixel_std` per channel.
        """
        idx = check_indices(indices, len(split))
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
        scale, offset = pixel_affine(self.pixel_mean or (0.0,), self.pixel_std or (1.0,))
        return np.asarray(inputs[idx], dtype=np.float32) * scale + offset


def check_indices(indices: np.ndarray, n: int) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.ndim != 1 or not (np.issubdtype(idx.dtype, np.integer) or idx.size == 0):
        raise ValueError(
            f"indices must be a 1-D integer array, got shape {idx.shape} and dtype {idx.dtype}."
        )
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(f"indices must lie in [0, {n}), got min {idx.min()} and max {idx.max()}.")
    return idx.astype(np.intp)


def pixel_affine(mean, std) -> tuple[np.ndarray, np.ndarray]:
    """`(scale, offset)` such that `x * scale + offset` equals `(x/255 - mean)/std`."""
    mean, std = np.asarray(mean), np.asarray(std)
    return (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)


_INTEGER = re.compile(r"[+-]?[0-9]+")
#: ASCII only: Python's `float` also reads "1_0", "nan" and other scripts' digits ("١").
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def parse_label(text: str, num_classes: int, where: str, *, via_float: bool = False) -> int:
    """The integer `text` holds (digits with an optional sign; with `via_float` also a
    float of integral value such as `"1.0"`, the form of AAN's labels) in
    `[0, num_classes)`, else a `DataError` naming `where` (e.g. `"path:line"`). A
    fractional `"1.5"`, Python's `"1_0"` or another script's digit `"١"` is not an integer
    label."""
    text = text.strip()
    value = None
    if _INTEGER.fullmatch(text):
        value = int(text)
    elif via_float and _FLOAT.fullmatch(text):
        number = float(text)
        if math.isfinite(number) and number.is_integer():
            value = int(number)
    if value is None:
        raise DataError(f"{where}: label {text!r} is not an integer.")
    if not 0 <= value < num_classes:
        raise DataError(f"{where}: label {value} is out of range [0, {num_classes}).")
    return value


def check_file(path: Path, what: str = "file") -> Path:
    """`path`; a `MissingDataError` if nothing is there, a `DataError` if something other
    than a regular file is (a folder, a broken link), naming it."""
    if path.is_file():
        return path
    if not path.exists() and not path.is_symlink():
        raise MissingDataError(f"Missing {what} {str(path)!r}.")
    kind = "a folder" if path.is_dir() else "not a regular file (a broken link?)"
    raise DataError(f"{str(path)!r} is {kind}; expected a {what} there.")


def check_folder(path: Path, what: str) -> Path:
    """`path`; a `MissingDataError` if nothing is there, a `DataError` if it is a file."""
    if path.is_dir():
        return path
    if not path.exists() and not path.is_symlink():
        raise MissingDataError(f"Missing folder {str(path)!r}: expected {what}.")
    raise DataError(f"{str(path)!r} is not a folder; expected {what}.")


def inside(folder: Path, path: Path, where: str | None = None) -> Path:
    """`path`, or a `DataError` naming `where` (default `path`) if `path` leads outside
    `folder` once `..` and symbolic links are resolved: a loader reads only its folder."""
    root, resolved = folder.resolve(), path.resolve()
    if resolved == root or root in resolved.parents:
        return path
    raise DataError(
        f"{where or path}: {str(path)!r} leads outside the task folder {str(root)!r} (to "
        f"{str(resolved)!r}); loaders read only inside their folder: copy the file in, or "
        "fix the link or the path."
    )


def read_lines(path: Path, folder: Path | None = None) -> Iterator[tuple[int, str]]:
    """Yield `(line_number, line)` of a UTF-8 file, lines split on `\\n` only; a missing,
    unreadable or non-UTF-8 file, a folder in its place, or (given the task `folder`) a
    path leading outside `folder` raises `MissingDataError` / `DataError` naming it."""
    check_file(path)
    if folder is not None:
        inside(folder, path)
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


def write_atomic(path: Path, data: bytes) -> None:
    """`experiments.runs.atomic.write_atomic`: never through a link planted in the cache."""
    _atomic.write_atomic(path, data)


def split_permutation(n: int, val_fraction: float, test_fraction: float) -> dict[str, np.ndarray]:
    """Deterministic random split of `range(n)` (permuted with `SPLIT_SEED`); each part sorted."""
    perm = np.random.default_rng(SPLIT_SEED).permutation(n)
    n_val, n_test = int(n * val_fraction), int(n * test_fraction)
    n_train = n - n_val - n_test
    cuts = {"train": (0, n_train), "val": (n_train, n_train + n_val), "test": (n_train + n_val, n)}
    return {k: np.sort(perm[a:b]) for k, (a, b) in cuts.items()}

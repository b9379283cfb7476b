"""Pixel tasks: Image (CIFAR-10 pickles), Pathfinder and PathX (PNGs listed in metadata).

Pixels are stored as uint8 `(n, H*W, C)` in row-major order and normalised on the fly by
`TaskData.batch`. Each loader has the signature of `experiments.lra.tasks.Loader`.
"""

import concurrent.futures
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from . import _cifar_pickle as cifar_pickle
from ._cache import Store
from ._common import (
    LOG,
    DataError,
    check_file,
    check_folder,
    inside,
    parse_label,
    read_lines,
    split_permutation,
)

_READ_CHUNK = 2048


def pixel_meta(seq_len: int, dropped: Mapping[str, int]) -> dict:
    """The metadata a pixel loader returns: no vocabulary, the fields of one image."""
    return {
        "vocab": None,
        "seq_len": seq_len,
        "fields": ["inputs", "lengths", "labels"],
        "dropped": dict(sorted(dropped.items())),
    }


# --------------------------------------------------------------------------- Image (CIFAR-10)


def _cifar_batch(path: Path, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 pickle as uint8 `(n, 1024, 3)` row-major pixels and int32 labels
    (through `cifar_pickle.load`: a pickle that asks for anything else runs nothing)."""
    check_file(path, "CIFAR-10 file")
    inside(path.parent, path)
    try:
        with open(path, "rb") as f:  # pickle is the official format of cifar-10-batches-py
            d = cifar_pickle.load(f)
    except cifar_pickle.RefusedGlobal as e:
        raise DataError(f"{path}: {e}") from None
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
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        bad = int(np.flatnonzero((labels < 0) | (labels >= num_classes))[0])
        raise DataError(
            f"{path}: label {labels[bad]} of image {bad} is out of range [0, {num_classes})."
        )
    pixels = data.reshape(-1, 3, 1024).transpose(0, 2, 1)
    return np.ascontiguousarray(pixels), labels.astype(np.int32)


def image_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.is_file()]


def load_image(task, folder: Path, store: Store, max_examples: int | None) -> dict:
    """`data_batch_{1..5}` (90/10 train/val, permuted with seed 42) and `test_batch`."""
    train = [_cifar_batch(folder / f"data_batch_{i}", task.num_classes) for i in range(1, 6)]
    pixels = np.concatenate([p for p, _ in train])
    labels = np.concatenate([y for _, y in train])
    parts = split_permutation(len(labels), 0.1, 0.0)
    test_pixels, test_labels = _cifar_batch(folder / "test_batch", task.num_classes)
    splits = {
        "train": (pixels[parts["train"]], labels[parts["train"]]),
        "val": (pixels[parts["val"]], labels[parts["val"]]),
        "test": (test_pixels, test_labels),
    }
    for split, (x, y) in splits.items():
        store.put(f"{split}.inputs", x[:max_examples])
        store.put(f"{split}.lengths", np.full(len(y[:max_examples]), 1024, np.int32))
        store.put(f"{split}.labels", y[:max_examples])
    return pixel_meta(1024, {})


# --------------------------------------------------------------------------- Pathfinder, PathX


def _pathfinder_metadata(folder: Path, num_classes: int) -> list[tuple[Path, int]]:
    """All `(png_path, label)` in metadata order (files sorted by integer stem)."""
    meta_dir = check_folder(folder / "metadata", "metadata/<batch>.npy files")
    inside(folder, meta_dir)
    files = []
    for path in meta_dir.glob("*.npy"):
        if not path.stem.isdigit():
            raise DataError(
                f"{path}: metadata files must be named <integer>.npy; move other files away."
            )
        files.append((int(path.stem), path))
    items = []
    for _, path in sorted(files):
        for lineno, line in read_lines(path, folder):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 4:
                raise DataError(
                    f"{path}:{lineno}: expected at least 4 space-separated fields "
                    f"(imgs/<batch> sample_<k>.png index label ...), found {len(fields)}."
                )
            label = parse_label(fields[3], num_classes, f"{path}:{lineno}")
            items.append((_image_path(folder, fields[0], fields[1], f"{path}:{lineno}"), label))
    if not items:
        raise DataError(f"{meta_dir}: no metadata lines found.")
    _check_folders_inside(folder, {image.parent for image, _ in items})
    return items


def _image_path(folder: Path, subfolder: str, name: str, where: str) -> Path:
    """`folder/subfolder/name`, or a `DataError` naming `where` if the metadata's path is
    absolute or climbs out with `..` (links are checked by `_check_folders_inside` and
    `_read_png`)."""
    relative = Path(subfolder) / name
    if relative.is_absolute() or ".." in relative.parts:
        raise DataError(
            f"{where}: the image path {str(relative)!r} leads outside the task folder "
            f"{str(folder)!r}; metadata names images relative to it (imgs/<batch> "
            "sample_<k>.png), without '..'."
        )
    return folder / relative


def _check_folders_inside(folder: Path, parents: set[Path]) -> None:
    """Each image folder (a few: `imgs/<batch>`) resolves inside `folder`."""
    for parent in sorted(parents):
        inside(folder, parent)


def _read_png(path: Path, side: int, folder: Path) -> np.ndarray | str:
    """The image as uint8 `(side*side,)`, or the reason it is skipped; a `DataError` if
    it is a link leading outside `folder` (its folder was checked already)."""
    try:
        if path.is_symlink():
            inside(folder, path)
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
    items: Sequence[tuple[Path, int]], side: int, out: np.ndarray, dropped: Counter, folder: Path
) -> np.ndarray:
    """Decode PNGs (threaded) into `out[:, :, 0]`, compacting skipped ones; return labels."""
    labels = []
    workers = min(8, os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for start in range(0, len(items), _READ_CHUNK):
            chunk = items[start : start + _READ_CHUNK]
            decoded = pool.map(lambda item: _read_png(item[0], side, folder), chunk)
            for (path, label), pixels in zip(chunk, decoded, strict=True):
                if isinstance(pixels, str):
                    dropped[pixels] += 1
                    LOG.warning("Skipping %s (%s)", path, pixels)
                    continue
                out[len(labels), :, 0] = pixels
                labels.append(label)
    return np.asarray(labels, np.int32)


def pathfinder_files(folder: Path) -> list[Path]:
    return list((folder / "metadata").glob("*.npy"))  # images are named by metadata


def load_pathfinder(task, folder: Path, store: Store, max_examples: int | None) -> dict:
    """The images listed in `metadata/*.npy` (permuted with seed 42, cut 80/10/10), square,
    of side `sqrt(task.seq_len)`; empty, missing or unreadable PNGs are skipped and counted."""
    side = math.isqrt(task.seq_len)
    items = _pathfinder_metadata(folder, task.num_classes)
    parts = split_permutation(len(items), 0.1, 0.1)
    dropped: Counter = Counter()
    for split, idx in parts.items():
        chosen = [items[i] for i in idx[:max_examples]]
        out = store.empty(f"{split}.inputs", (len(chosen), side * side, 1), np.dtype(np.uint8))
        labels = _read_pngs(chosen, side, out, dropped, folder)
        del out
        store.truncate(f"{split}.inputs", len(labels))
        store.put(f"{split}.lengths", np.full(len(labels), side * side, np.int32))
        store.put(f"{split}.labels", labels)
    return pixel_meta(side * side, dropped)

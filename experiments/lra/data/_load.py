"""`load`: find a task's folder, build (or reopen from the cache) its arrays."""

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from . import _cache
from ._common import LOG, SEARCH_DEPTH, SPLITS, DataError, MissingDataError, Split, TaskData


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


def _subfolders(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries if not e.name.startswith(".") and e.is_dir()]
    except OSError:
        return []


def load(
    spec,
    data_root: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
) -> TaskData:
    """Load one LRA task from the official files under `data_root`.

    **Arguments:**
    - `spec`: the task's registry entry (an `experiments.lra.tasks.Task`: its folder,
      loader, sizes); `tasks.load_task(name, ...)` looks it up by name.
    - `data_root`: a folder containing the task folder at any depth up to `SEARCH_DEPTH`.
    - `cache_dir`: where to keep built arrays and the vocabulary (recommended, required in
      practice for PathX); None builds in memory every time.
    - `max_examples`: keep at most this many examples of each split (the first ones in
      split order); the vocabulary is then built from the kept train examples.

    **Raises:** `DataError` for a malformed or unreadable file (naming the file and line),
    an empty split or an unusable `cache_dir`; `MissingDataError` (a `DataError` and a
    `FileNotFoundError`) for a missing folder or file; `ValueError` for a bad
    `max_examples`.
    """
    task = spec.name
    if max_examples is not None and (not isinstance(max_examples, int) or max_examples < 1):
        raise ValueError(f"max_examples must be a positive int or None, got {max_examples!r}.")
    task_dir = find_task_dir(data_root, spec.folder)
    fingerprint = _cache.fingerprint(task, task_dir, spec.source_files(task_dir), max_examples)
    cache = None
    if cache_dir is not None:
        name = task if max_examples is None else f"{task}-max{max_examples}"
        cache = _cache.cache_folder(Path(cache_dir).expanduser(), name)
        cached = _cache.load_cache(cache, fingerprint)
        if cached is not None:
            return _assemble(spec, *cached)
        _cache.cache_io(cache, lambda: (cache / "meta.json").unlink(missing_ok=True))
        LOG.info("Building the %s cache in %s", task, cache)
    return _build(spec, task_dir, cache, fingerprint, max_examples)


def _build(spec, task_dir: Path, cache: Path | None, fingerprint: str, max_examples) -> TaskData:
    """Build the task's arrays with its loader (into `cache`, or memory), checked, and
    write the cache's `meta.json` last."""
    store = _cache.Store(cache)
    try:
        made = spec.loader(spec, task_dir, store, max_examples)
        made.setdefault("aliases", {})
        written = {
            "version": _cache.CACHE_VERSION,
            "fingerprint": fingerprint,
            "arrays": sorted(store.arrays),
            **made,
        }
        meta = _cache.CacheMeta.from_json(
            written,
            where=f"the metadata the {spec.name} loader returned",
            advice="a bug of the loader (experiments/lra/data).",
        )
        _check_loader(spec, meta)
        _check_nonempty(spec, task_dir, store.arrays)
        arrays = store.commit()
    except BaseException:
        store.abort()
        raise
    if cache is not None:
        _cache.write_meta(cache, written)
    if meta.dropped:
        LOG.warning("%s: skipped items %s under %s", spec.name, meta.dropped, task_dir)
    return _assemble(spec, arrays, meta)


def _check_loader(spec, meta: _cache.CacheMeta) -> None:
    """The loader's output fits its entry: pairs for the retrieval model, pixels for pixel tasks."""
    pairs, pixels = "inputs2" in meta.fields, meta.vocab is None
    if pairs != (spec.model == "retrieval") or pixels != (spec.in_channels is not None):
        raise ValueError(
            f"Task {spec.name!r}: its loader returned {'pairs of' if pairs else 'single'} "
            f"{'pixel' if pixels else 'token'} sequences, but its registry entry says model="
            f"{spec.model!r}, in_channels={spec.in_channels!r}. Make the loader and the entry "
            "agree (pairs: model='retrieval'; pixels: in_channels set and vocab None)."
        )


def _check_nonempty(spec, task_dir: Path, arrays: Mapping[str, np.ndarray]) -> None:
    sizes = {n.split(".")[0]: len(a) for n, a in arrays.items() if n.endswith(".labels")}
    empty = [s for s in SPLITS if sizes.get(s, 1) == 0]
    if empty:
        shown = "/".join(str(sizes.get(s, sizes.get("test"))) for s in SPLITS)
        sources = spec.split_sources(task_dir)
        names = empty[0] if len(empty) == 1 else f"{', '.join(empty[:-1])} and {empty[-1]}"
        raise DataError(
            f"{spec.name}: the {names} split{'s are' if len(empty) > 1 else ' is'} "
            f"empty (train/val/test sizes {shown}; {empty[0]} comes from {sources[empty[0]]}). "
            "Every split needs at least one example."
        )


def _assemble(spec, arrays: Mapping[str, np.ndarray], meta: _cache.CacheMeta) -> TaskData:
    stored = {name.split(".")[0] for name in arrays}
    splits = {s: Split(**{f: arrays[f"{s}.{f}"] for f in meta.fields}) for s in sorted(stored)}
    splits.update({alias: splits[target] for alias, target in meta.aliases.items()})
    return TaskData(
        task=spec.name,
        train=splits["train"],
        val=splits["val"],
        test=splits["test"],
        num_classes=spec.num_classes,
        seq_len=meta.seq_len,
        vocab=meta.vocab,
        in_channels=spec.in_channels,
        dropped=dict(meta.dropped),
        pixel_mean=spec.pixel_mean,
        pixel_std=spec.pixel_std,
    )

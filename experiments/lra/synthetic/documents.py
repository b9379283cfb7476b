"""Text, Retrieval and Image data in the official files' layouts: random documents and
images, for checking that every task loads and trains end to end (they carry no signal).

- Text: IMDB's `aclImdb/{train,test}/{neg,pos}/<id>_<rating>.txt` (val is test);
- Retrieval: AAN's `tsv_data/new_aan_pairs.{train,eval,test}.tsv`, 5 columns;
- Image: CIFAR-10's `cifar-10-batches-py/{data_batch_1..5,test_batch}` pickles.

Documents are long enough to fill l_max by default (Text 4096, Retrieval 4000).
"""

import pickle
from pathlib import Path

import numpy as np

__all__ = ["write_text_task", "write_retrieval_task", "write_image_task"]

_CHARS = np.array(
    list("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ.,;:!?'\"()-0123456789éü")
)


def _random_text(rng: np.random.Generator, low: int, high: int) -> str:
    return "".join(rng.choice(_CHARS, int(rng.integers(low, high))))


def write_text_task(
    root: Path,
    counts: tuple[int, int, int],
    *,
    seed: int = 0,
    length: tuple[int, int] = (3000, 6000),
) -> Path:
    """IMDB layout `aclImdb/{train,test}/{neg,pos}/<id>_<rating>.txt` (val is test)."""
    rng = np.random.default_rng([seed, 1])
    folder = root / "aclImdb"
    for split, n in (("train", counts[0]), ("test", counts[2])):
        for label, name in enumerate(("neg", "pos")):
            (folder / split / name).mkdir(parents=True, exist_ok=True)
            for i in range((n + 1 - label) // 2):
                text = _random_text(rng, *length)
                (folder / split / name / f"{i}_{7 * label + 2}.txt").write_text(text, "utf-8")
    return folder


def write_retrieval_task(
    root: Path,
    counts: tuple[int, int, int],
    *,
    seed: int = 0,
    length: tuple[int, int] = (3000, 5000),
) -> Path:
    """AAN layout `tsv_data/new_aan_pairs.{train,eval,test}.tsv`: label id1 id2 text1 text2."""
    rng = np.random.default_rng([seed, 2])
    folder = root / "tsv_data"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in zip(("train", "eval", "test"), counts, strict=True):
        rows = [
            f"{i % 2}.0\tdoc{2 * i}\tdoc{2 * i + 1}\t{_random_text(rng, *length)}\t"
            f"{_random_text(rng, *length)}\n"
            for i in range(n)
        ]
        (folder / f"new_aan_pairs.{split}.tsv").write_text("".join(rows), "utf-8")
    return folder


def write_image_task(root: Path, counts: tuple[int, int, int], *, seed: int = 0) -> Path:
    """CIFAR-10 layout `cifar-10-batches-py/{data_batch_1..5,test_batch}` (pickles)."""
    rng = np.random.default_rng([seed, 3])
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    per_batch = -(-counts[0] // 5)
    sizes = {f"data_batch_{i}": per_batch for i in range(1, 6)} | {"test_batch": counts[2]}
    for name, n in sizes.items():
        batch = {
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"labels": rng.integers(0, 10, n).tolist(),
        }
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    return folder

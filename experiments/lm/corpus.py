r"""The text the language model learns: source files read as bytes, split by file.

**What.** By default the Python standard library's own source and docstrings
(`sysconfig.get_paths()["stdlib"]`): real text that every machine with Python has, with no
download. Any folder of text files works (`--corpus DIR`; the tests write a small one).

**Bytes, not characters.** The model reads bytes (a vocabulary of 256): no vocabulary is
built from the data (it would differ between Python versions and corpora), every file is
valid input whatever its encoding, and sampling cannot produce an unknown symbol. The
standard library's source is almost all ASCII (one byte per character; the run reports
the share of bytes above 127), so bits per byte are bits per character; on other text a
character of several UTF-8 bytes counts its bytes.

**Deterministic.** The files are the folder's `*.py` files outside `site-packages`,
`dist-packages` and `__pycache__`, named by their path relative to the folder. Each file
goes to one split, train, validation or test, by the SHA-256 of its name (90 / 5 / 5 out
of 100), so a file never straddles two splits and adding a file elsewhere does not move
it. Within a split the files come in the order of that digest (a spread over the whole
library rather than its first modules alphabetically), each followed by one NUL byte (the
start of the next file: an empty sampling prompt starts a file), until the split's byte
budget is reached; the last file is cut there. The same folder and budgets give the same
bytes on every machine.

**Recorded.** `Corpus.fingerprint()` (the SHA-256 of the three splits, their sizes and
file counts, the folder and the Python version) goes into the run's `config.json`;
`--resume` refuses another corpus (another Python's standard library differs).
"""

import dataclasses
import hashlib
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SPLITS", "SEPARATOR", "Corpus", "CorpusError", "default_folder", "read_corpus"]

SPLITS = ("train", "val", "test")
#: Out of 100 buckets of a file name's digest: the first 90 train, 5 validation, 5 test.
_BUCKETS = {"train": range(0, 90), "val": range(90, 95), "test": range(95, 100)}
#: The byte after every file (the start of the next).
SEPARATOR = 0
_SKIPPED = frozenset({"site-packages", "dist-packages", "__pycache__"})


class CorpusError(ValueError):
    """A corpus folder that is missing or holds too little text; the message says what to
    change."""


def default_folder() -> Path:
    """The standard library of the running Python."""
    return Path(sysconfig.get_paths()["stdlib"])


def _digest(name: str) -> bytes:
    """The SHA-256 of a file's relative name, by its bytes on disk: a name that is not
    UTF-8 (its bytes decoded as surrogates) is digested as it is stored, not refused by
    the codec ("surrogates not allowed"); a UTF-8 name gives the same digest as before."""
    return hashlib.sha256(name.encode("utf-8", "surrogateescape")).digest()


def _split_of(name: str) -> str:
    bucket = int.from_bytes(_digest(name)[:8], "big") % 100
    return next(split for split, rng in _BUCKETS.items() if bucket in rng)


def _files(folder: Path) -> list[str]:
    """The corpus files of `folder`: relative POSIX names, in digest order."""
    names = [
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*.py")
        if path.is_file() and not _SKIPPED.intersection(path.relative_to(folder).parts)
    ]
    return sorted(names, key=lambda n: (_digest(n), n))


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Three splits of bytes (`uint8` arrays) and where they come from."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    folder: str
    files: dict[str, int]

    def split(self, name: str) -> np.ndarray:
        return getattr(self, name)

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        for name in SPLITS:
            digest.update(f"{name}:{self.split(name).size}:".encode())
            digest.update(self.split(name).tobytes())
        return digest.hexdigest()

    def fingerprint(self) -> dict[str, Any]:
        """What a run records of its corpus (and `--resume` compares: `sha256`)."""
        high = sum(int(np.count_nonzero(self.split(n) > 127)) for n in SPLITS)
        total = sum(self.split(n).size for n in SPLITS)
        return {
            "sha256": self.sha256,
            "bytes": {n: int(self.split(n).size) for n in SPLITS},
            "files": dict(self.files),
            "non_ascii_fraction": high / max(total, 1),
            "folder": self.folder,
            "python": sys.version.split()[0],
        }


def read_corpus(folder: str | os.PathLike | None, budgets: dict[str, int]) -> Corpus:
    """Read the corpus of `folder` (None: the standard library) within `budgets`, the
    bytes of each split (`{"train": ..., "val": ..., "test": ...}`).

    **Raises:** `CorpusError` if `folder` is not a folder, or a split would hold fewer
    than its budget (too few files go to it: lower the budget, or add files).
    """
    folder = default_folder() if folder is None else Path(folder).expanduser()
    if not folder.is_dir():
        raise CorpusError(
            f"--corpus {str(folder)!r} is not a folder; give a folder of *.py files (or leave "
            "--corpus out for the Python standard library)."
        )
    parts: dict[str, list[bytes]] = {n: [] for n in SPLITS}
    sizes = {n: 0 for n in SPLITS}
    files = {n: 0 for n in SPLITS}
    for name in _files(folder):
        split = _split_of(name)
        room = budgets[split] - sizes[split]
        if room <= 0:
            if all(sizes[n] >= budgets[n] for n in SPLITS):
                break
            continue
        data = ((folder / name).read_bytes() + bytes([SEPARATOR]))[:room]
        parts[split].append(data)
        sizes[split] += len(data)
        files[split] += 1
    short = [n for n in SPLITS if sizes[n] < budgets[n]]
    if short:
        found = ", ".join(f"{n} {sizes[n]:,} of {budgets[n]:,}" for n in short)
        raise CorpusError(
            f"the corpus in {folder} holds too little text for the byte budgets ({found} bytes; "
            f"files go to train/val/test by a digest of their name, 90/5/5). Lower "
            f"--train-bytes/--val-bytes/--test-bytes, or use a folder with more *.py files."
        )
    arrays = {n: np.frombuffer(b"".join(parts[n]), np.uint8) for n in SPLITS}
    return Corpus(**arrays, folder=str(folder), files=files)

"""Token tasks: ListOps (word tokens), Text and Retrieval (Unicode code points).

Each loader has the signature of `experiments.lra.tasks.Loader`: it reads the files of
one task from its folder, builds the vocabulary from the train split and puts the encoded
splits into the `Store` (`build_token_task`), and returns the task's metadata.
"""

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from ._cache import Store
from ._common import (
    EOS_ID,
    SPECIALS,
    SPLITS,
    UNK_ID,
    DataError,
    check_folder,
    inside,
    parse_label,
    read_lines,
)

TEXT_MIN_FREQ = 15
_MAX_CODE_POINT = 0x110000

#: An example is (label, documents); a document is a list of word tokens (ListOps) or an
#: array of Unicode code points (Text, Retrieval), already truncated to l_max - 1.
Document = Sequence | np.ndarray
Example = tuple[int, tuple[Document, ...]]
#: A split's examples, afresh on every call (the train split is read twice).
Source = Callable[[], Iterator[Example]]


def take(examples: Iterator[Example], limit: int | None) -> Iterator[Example]:
    """The first `limit` examples (all if `limit` is None)."""
    for i, example in enumerate(examples):
        if limit is not None and i >= limit:
            return
        yield example


def build_vocab(counts: Mapping[str, int], min_freq: int) -> tuple[str, ...]:
    """Specials, then tokens with count >= min_freq by descending count, ties lexicographic."""
    kept = [t for t, c in counts.items() if c >= min_freq and t not in SPECIALS]
    return SPECIALS + tuple(sorted(kept, key=lambda t: (-counts[t], t)))


def _count_words(source: Source) -> Counter:
    counts: Counter = Counter()
    for _, docs in source():
        for doc in docs:
            counts.update(doc)
    return counts


def _count_chars(source: Source) -> dict[str, int]:
    total = np.zeros(_MAX_CODE_POINT, np.int64)
    buffer: list[Document] = []
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


def _word_encoder(vocab: tuple[str, ...]) -> Callable[[Document], np.ndarray]:
    index = {t: i for i, t in enumerate(vocab)}
    return lambda doc: np.fromiter((index.get(t, UNK_ID) for t in doc), np.int64, len(doc))


def _char_encoder(vocab: tuple[str, ...]) -> Callable[[Document], np.ndarray]:
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


def build_token_task(
    store: Store,
    sources: Mapping[str, Source],
    *,
    chars: bool,
    min_freq: int,
    n_docs: int,
) -> dict:
    """Count train tokens, build the vocabulary, encode every split and store it.

    **Arguments:**
    - `store`: where the arrays go.
    - `sources`: split name -> `Source`; must include `"train"` (the vocabulary's).
    - `chars`: documents are code-point arrays (else lists of word tokens).
    - `min_freq`: tokens seen fewer times in train map to `<unk>`.
    - `n_docs`: documents per example (1, or 2 for pairs).

    **Returns:** the task's metadata (`vocab`, `seq_len`, `fields`, `dropped`).
    """
    counts = _count_chars(sources["train"]) if chars else _count_words(sources["train"])
    vocab = build_vocab(counts, min_freq)
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


def code_points(text: str, limit: int) -> np.ndarray:
    """The first `limit` Unicode code points of `text`, as uint32."""
    return np.frombuffer(text[:limit].encode("utf-32-le"), dtype="<u4")


# --------------------------------------------------------------------------- ListOps


def _listops_tokens(source: str) -> list[str]:
    return source.replace("]", "X").replace("(", "").replace(")", "").split()


def _listops_examples(path: Path, num_classes: int, limit: int) -> Iterator[Example]:
    lines = read_lines(path, path.parent)
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
        label = parse_label(fields[1], num_classes, f"{path}:{lineno}")
        yield label, (_listops_tokens(fields[0])[:limit],)


def listops_files(folder: Path) -> dict[str, Path]:
    return {s: folder / f"basic_{s}.tsv" for s in SPLITS}


def load_listops(task, folder: Path, store: Store, max_examples: int | None) -> dict:
    """`basic_{train,val,test}.tsv`: header `Source<TAB>Target`, then `expression<TAB>label`."""

    def source(path):
        examples = _listops_examples
        return lambda: take(examples(path, task.num_classes, task.seq_len - 1), max_examples)

    sources = {s: source(p) for s, p in listops_files(folder).items()}
    return build_token_task(store, sources, chars=False, min_freq=1, n_docs=1)


# --------------------------------------------------------------------------- Retrieval (AAN)


def _aan_examples(path: Path, num_classes: int, limit: int) -> Iterator[Example]:
    """Rows `label id1 id2 text1 text2`; tabs split columns, quotes are literal (QUOTE_NONE)."""
    for lineno, line in read_lines(path, path.parent):
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) != 5:
            raise DataError(
                f"{path}:{lineno}: expected 5 tab-separated columns (label, id1, id2, text1, "
                f"text2), found {len(fields)}."
            )
        label = parse_label(fields[0], num_classes, f"{path}:{lineno}", via_float=True)
        yield label, (code_points(fields[3], limit), code_points(fields[4], limit))


def retrieval_files(folder: Path) -> dict[str, Path]:
    names = {"train": "train", "val": "eval", "test": "test"}
    return {s: folder / f"new_aan_pairs.{f}.tsv" for s, f in names.items()}


def load_retrieval(task, folder: Path, store: Store, max_examples: int | None) -> dict:
    """`new_aan_pairs.{train,eval,test}.tsv`, eval as val: 5 columns, no header."""

    def source(path):
        return lambda: take(_aan_examples(path, task.num_classes, task.seq_len - 1), max_examples)

    sources = {s: source(p) for s, p in retrieval_files(folder).items()}
    return build_token_task(store, sources, chars=True, min_freq=1, n_docs=2)


# --------------------------------------------------------------------------- Text (IMDB)


def _imdb_files(folder: Path, split: str) -> list[tuple[Path, int]]:
    """Sorted review files of one split, classes interleaved: neg, pos, neg, pos, ..."""
    ranked = []
    for label, name in enumerate(("neg", "pos")):
        path = check_folder(folder / split / name, f"aclImdb/{split}/{name}/*.txt")
        inside(folder, path)
        ranked += [(rank, label, p) for rank, p in enumerate(sorted(path.glob("*.txt")))]
    return [(p, label) for _, label, p in sorted(ranked)]


def _imdb_examples(folder: Path, files: list[tuple[Path, int]], limit: int) -> Iterator[Example]:
    for path, label in files:
        if path.is_symlink():  # its folder is checked (`_imdb_files`); a review may link out
            inside(folder, path)
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: not valid UTF-8 ({e}).") from None
        except OSError as e:
            raise DataError(f"{path}: cannot read the file ({e}).") from None
        yield label, (code_points(text, limit),)


def text_files(folder: Path) -> list[Path]:
    folders = [folder / s / c for s in ("train", "test") for c in ("neg", "pos")]
    return [p for f in folders for p in f.glob("*.txt")]


def load_text(task, folder: Path, store: Store, max_examples: int | None) -> dict:
    """`aclImdb/{train,test}/{neg,pos}/*.txt`; val is the test split (IMDB has no val)."""
    files = {s: _imdb_files(folder, s)[:max_examples] for s in ("train", "test")}
    sources = {
        s: (lambda f=f: _imdb_examples(folder, f, task.seq_len - 1)) for s, f in files.items()
    }
    meta = build_token_task(store, sources, chars=True, min_freq=TEXT_MIN_FREQ, n_docs=1)
    return {**meta, "aliases": {"val": "test"}}

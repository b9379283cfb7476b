"""Loaders for the official Long Range Arena (LRA) files, using numpy and Pillow only.

Every task reads the files as released (see `shared/LRA.md`); nothing is downloaded.
The folder of each task is found by searching under `data_root` (`find_task_dir`),
because the archive nests as `lra_release/lra_release/...`. Which folder, which loader and
which sizes belong to a task is the task's entry in `experiments/lra/tasks.py`; the
loaders live here by concern: `_tokens.py` (ListOps, Text, Retrieval), `_pixels.py`
(Image, Pathfinder, PathX), `_cache.py` (the `.npy` cache), `_load.py` (`load`, which
`tasks.load_task(name, ...)` calls with the task's entry).

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

from ._cache import Store
from ._common import (
    EOS_ID,
    PAD_ID,
    SEARCH_DEPTH,
    SPECIALS,
    SPLIT_SEED,
    SPLITS,
    UNK_ID,
    DataError,
    MissingDataError,
    Split,
    TaskData,
    parse_label,
    read_lines,
    split_permutation,
)
from ._load import batch_indices, find_task_dir, load
from ._pixels import pixel_meta
from ._tokens import build_token_task, code_points, take

__all__ = [
    "DataError",
    "MissingDataError",
    "SPECIALS",
    "PAD_ID",
    "UNK_ID",
    "EOS_ID",
    "Split",
    "TaskData",
    "find_task_dir",
    "load",
    "batch_indices",
    "SEARCH_DEPTH",
    "SPLIT_SEED",
    # for writing a loader (see experiments/lra/tasks.py)
    "Store",
    "SPLITS",
    "build_token_task",
    "pixel_meta",
    "read_lines",
    "parse_label",
    "split_permutation",
    "code_points",
    "take",
]

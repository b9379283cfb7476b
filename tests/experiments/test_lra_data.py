"""Tests of `experiments.lra.data` on small files written in the official LRA formats."""

import json
import logging
import math
import pickle
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from experiments.lra import data, tasks
from experiments.lra.data import EOS_ID, PAD_ID, UNK_ID, _cache, batch_indices, find_task_dir
from experiments.lra.tasks import load_task


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def assert_same_task(a: data.TaskData, b: data.TaskData) -> None:
    for attr in ("vocab", "seq_len", "dropped", "num_classes", "in_channels"):
        assert getattr(a, attr) == getattr(b, attr)
    for name in ("train", "val", "test"):
        sa, sb = getattr(a, name), getattr(b, name)
        for field in ("inputs", "lengths", "labels", "inputs2", "lengths2"):
            x, y = getattr(sa, field), getattr(sb, field)
            assert (x is None) == (y is None)
            if x is not None:
                np.testing.assert_array_equal(x, y)


# --------------------------------------------------------------------------- find_task_dir


def test_find_task_dir_nested_shallowest_and_sorted(tmp_path):
    deep = tmp_path / "lra_release" / "lra_release" / "listops-1000"
    deep.mkdir(parents=True)
    assert find_task_dir(tmp_path, "listops-1000") == deep
    assert find_task_dir(deep, "listops-1000") == deep  # data_root is the task folder
    (tmp_path / "b" / "listops-1000").mkdir(parents=True)
    (tmp_path / "a" / "listops-1000").mkdir(parents=True)
    assert find_task_dir(tmp_path, "listops-1000") == tmp_path / "a" / "listops-1000"
    (tmp_path / "listops-1000").mkdir()
    assert find_task_dir(tmp_path, "listops-1000") == tmp_path / "listops-1000"


def test_find_task_dir_multi_part_and_missing(tmp_path):
    target = tmp_path / "x" / "pathfinder32" / "curv_contour_length_14"
    target.mkdir(parents=True)
    (tmp_path / "y" / "pathfinder32" / "curv_baseline").mkdir(parents=True)
    assert find_task_dir(tmp_path, "pathfinder32/curv_contour_length_14") == target
    with pytest.raises(FileNotFoundError, match=r"tsv_data.*searched \d+ folders"):
        find_task_dir(tmp_path, "tsv_data")
    with pytest.raises(FileNotFoundError, match="not a directory"):
        find_task_dir(tmp_path / "nope", "tsv_data")
    with pytest.raises(FileNotFoundError, match="listops-1000"):
        load_task("listops", tmp_path)


# --------------------------------------------------------------------------- ListOps

LISTOPS_TRAIN = [
    ("( ( ( [MAX 2 ) 9 ) ] )", 9),
    ("( ( ( [MIN 2 ) 3 ) ] )", 2),
    ("( ( ( [SM 2 ) 9 ) ] )", 1),
]
# train counts: 2:3, X:3, 9:2, then 3, [MAX, [MIN, [SM once; ties lexicographic
LISTOPS_VOCAB = ("<pad>", "<unk>", "<eos>", "2", "X", "9", "3", "[MAX", "[MIN", "[SM")
LONG_EXPR = "( [SM " + "1 " * 2100 + "] )"


def write_listops(root: Path, rows: dict[str, list[tuple[str, int]]] | None = None) -> Path:
    rows = rows or {
        "train": LISTOPS_TRAIN,
        "val": [("( ( ( [MED 7 ) 2 ) ] )", 4)],
        "test": [(LONG_EXPR, 0), ("( ( [MAX 5 ) ] )", 5)],
    }
    folder = root / "lra_release" / "lra_release" / "listops-1000"
    for split, examples in rows.items():
        body = "".join(f"{src}\t{label}\n" for src, label in examples)
        write(folder / f"basic_{split}.tsv", "Source\tTarget\n" + body)
    return folder


def test_listops_tokens_vocab_and_padding(tmp_path):
    write_listops(tmp_path)
    task = load_task("listops", tmp_path)
    assert task.vocab == LISTOPS_VOCAB
    assert (task.num_classes, task.in_channels, task.dropped) == (10, None, {})
    assert task.seq_len == 2048  # the long test expression is truncated to 2047 + <eos>
    assert [len(task.train), len(task.val), len(task.test)] == [3, 1, 2]
    assert task.vocab is not None
    ids = {t: i for i, t in enumerate(task.vocab)}
    np.testing.assert_array_equal(task.train.labels, [9, 2, 1])
    np.testing.assert_array_equal(task.train.lengths, [5, 5, 5])
    expected = [ids["[MAX"], ids["2"], ids["9"], ids["X"], EOS_ID]
    np.testing.assert_array_equal(task.train.inputs[0, :5], expected)
    assert PAD_ID == 0 and (task.train.inputs[:, 5:] == PAD_ID).all()
    # unseen train tokens map to <unk>
    expected = [UNK_ID, UNK_ID, ids["2"], ids["X"], EOS_ID]
    np.testing.assert_array_equal(task.val.inputs[0, :5], expected)
    # truncation: 2047 tokens then <eos>, exactly l_max
    assert task.test.lengths[0] == 2048
    assert task.test.inputs[0, -1] == EOS_ID
    assert task.test.inputs[0, 0] == ids["[SM"] and UNK_ID in task.test.inputs[0]
    batch = task.batch(task.test, np.array([1, 0]))
    assert batch["inputs"].dtype == np.int32 and batch["inputs"].shape == (2, 2048)
    np.testing.assert_array_equal(batch["lengths"], [4, 2048])
    np.testing.assert_array_equal(batch["labels"], [5, 0])
    assert "inputs2" not in batch


def test_listops_pads_to_longest_present_and_max_examples(tmp_path):
    rows = {"train": LISTOPS_TRAIN, "val": LISTOPS_TRAIN[:1], "test": LISTOPS_TRAIN}
    write_listops(tmp_path, rows)
    task = load_task("listops", tmp_path)
    assert task.seq_len == 5 and task.train.inputs.shape == (3, 5)
    small = load_task("listops", tmp_path, max_examples=2)
    assert [len(small.train), len(small.val), len(small.test)] == [2, 1, 2]
    assert small.vocab is not None
    assert "[SM" not in small.vocab  # the vocabulary comes from the kept train rows
    with pytest.raises(ValueError, match="max_examples"):
        load_task("listops", tmp_path, max_examples=0)
    with pytest.raises(ValueError, match="Unknown task"):
        load_task("cifar", tmp_path)


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("( [MAX 1 ] )\t3\textra", r"basic_val.tsv:3: expected 2 tab-separated columns"),
        ("( [MAX 1 ] )\tseven", r"basic_val.tsv:3: label 'seven' is not an integer"),
        ("( [MAX 1 ] )\t1.0", r"basic_val.tsv:3: label '1.0' is not an integer"),
        ("( [MAX 1 ] )\t10", r"basic_val.tsv:3: label 10 is out of range"),
    ],
)
def test_listops_malformed_lines(tmp_path, bad_line, message):
    folder = write_listops(tmp_path)
    write(folder / "basic_val.tsv", f"Source\tTarget\n( [MAX 1 ] )\t1\n{bad_line}\n")
    with pytest.raises(ValueError, match=message):
        load_task("listops", tmp_path)


def test_listops_bad_header_and_missing_file(tmp_path):
    folder = write_listops(tmp_path)
    write(folder / "basic_train.tsv", "( [MAX 1 ] )\t1\n")
    with pytest.raises(ValueError, match=r"basic_train.tsv:1: expected the header"):
        load_task("listops", tmp_path)
    (folder / "basic_train.tsv").unlink()
    with pytest.raises(FileNotFoundError, match="basic_train.tsv"):
        load_task("listops", tmp_path)


# --------------------------------------------------------------------------- Text (IMDB)


def write_imdb(root: Path) -> Path:
    folder = root / "aclImdb"
    write(folder / "train" / "neg" / "0_1.txt", "a" * 20 + "é" * 15 + "z" * 14)
    write(folder / "train" / "neg" / "1_2.txt", "a" * 4095 + "q" * 20)  # q lies past the cut
    write(folder / "train" / "pos" / "0_9.txt", "b" * 16 + "日" * 3)
    write(folder / "train" / "pos" / "1_8.txt", "c" * 16 + "🙂")
    write(folder / "train" / "unsup" / "0_0.txt", "u" * 100)  # ignored
    write(folder / "test" / "neg" / "5_3.txt", "zab")
    write(folder / "test" / "pos" / "7_7.txt", "éé日")
    return folder


def test_text_chars_vocab_and_val_is_test(tmp_path):
    write_imdb(tmp_path)
    task = load_task("text", tmp_path)
    # min_freq 15 over truncated train text: a 4115, b = c = 16 (lexicographic tie), é 15
    assert task.vocab == ("<pad>", "<unk>", "<eos>", "a", "b", "c", "é")
    assert task.val is task.test
    np.testing.assert_array_equal(task.train.labels, [0, 1, 0, 1])  # neg, pos interleaved
    np.testing.assert_array_equal(task.train.lengths, [50, 20, 4096, 18])
    assert task.seq_len == 4096 and task.train.inputs.shape == (4, 4096)
    row = task.train.inputs[2]
    assert (row[:4095] == 3).all() and row[4095] == EOS_ID
    assert task.train.inputs[1, 16] == UNK_ID and task.train.inputs[1, 19] == EOS_ID
    np.testing.assert_array_equal(task.test.inputs[0, :4], [UNK_ID, 3, 4, EOS_ID])
    np.testing.assert_array_equal(task.test.inputs[1, :4], [6, 6, UNK_ID, EOS_ID])
    np.testing.assert_array_equal(task.test.labels, [0, 1])


def test_text_missing_class_folder_and_bad_utf8(tmp_path):
    folder = write_imdb(tmp_path)
    (folder / "test" / "neg" / "5_3.txt").write_bytes(b"ok \xff\xfe")
    with pytest.raises(ValueError, match=r"5_3.txt: not valid UTF-8"):
        load_task("text", tmp_path)
    for path in (folder / "test" / "neg").iterdir():
        path.unlink()
    (folder / "test" / "neg").rmdir()
    with pytest.raises(FileNotFoundError, match=r"test/neg"):
        load_task("text", tmp_path)


# --------------------------------------------------------------------------- Retrieval (AAN)


def aan_row(label: str, text1: str, text2: str) -> str:
    return f"{label}\tid-a\tid-b\t{text1}\t{text2}\n"


def write_aan(root: Path, eval_rows: str | None = None) -> Path:
    folder = root / "tsv_data"
    train = aan_row("1.0", 'say "hi"', "xx") + aan_row("0", "yy", "x")
    write(folder / "new_aan_pairs.train.tsv", train)
    write(folder / "new_aan_pairs.eval.tsv", eval_rows or aan_row("0.0", "x" * 4500, "hi!"))
    write(folder / "new_aan_pairs.test.tsv", aan_row("1", "h", ""))
    return folder


def test_retrieval_two_documents(tmp_path):
    write_aan(tmp_path)
    task = load_task("retrieval", tmp_path)
    # counts over train text1 + text2: x 3, y 3, '"' 2, then ' ', a, h, i, s once each
    assert task.vocab == ("<pad>", "<unk>", "<eos>", "x", "y", '"', " ", "a", "h", "i", "s")
    assert task.vocab is not None and task.train.inputs2 is not None
    assert task.val.inputs2 is not None
    ids = {t: i for i, t in enumerate(task.vocab)}
    np.testing.assert_array_equal(task.train.labels, [1, 0])
    np.testing.assert_array_equal(task.train.lengths, [9, 3])
    np.testing.assert_array_equal(task.train.lengths2, [3, 2])
    np.testing.assert_array_equal(task.train.inputs[0, :9], [ids[c] for c in 'say "hi"'] + [EOS_ID])
    np.testing.assert_array_equal(task.train.inputs2[1, :2], [ids["x"], EOS_ID])
    assert task.seq_len == 4000  # the 4500-char eval document is cut to 3999 + <eos>
    assert task.val.lengths[0] == 4000 and task.val.inputs[0, -1] == EOS_ID
    np.testing.assert_array_equal(task.val.inputs2[0, :4], [ids["h"], ids["i"], UNK_ID, EOS_ID])
    np.testing.assert_array_equal(task.test.lengths2, [1])  # an empty document is just <eos>
    batch = task.batch(task.train, np.array([1]))
    assert set(batch) == {"inputs", "lengths", "labels", "inputs2", "lengths2"}
    assert batch["inputs2"].dtype == np.int32 and batch["inputs2"].shape == (1, 4000)


@pytest.mark.parametrize(
    "row, message",
    [
        ("1\tid\tid\tonly four\n", r"eval.tsv:2: expected 5 tab-separated columns"),
        ("one\tid\tid\ta\tb\n", r"eval.tsv:2: label 'one' is not an integer"),
        ("2\tid\tid\ta\tb\n", r"eval.tsv:2: label 2 is out of range"),
    ],
)
def test_retrieval_malformed_lines(tmp_path, row, message):
    write_aan(tmp_path, eval_rows=aan_row("1", "a", "b") + row)
    with pytest.raises(ValueError, match=message):
        load_task("retrieval", tmp_path)


# --------------------------------------------------------------------------- Image (CIFAR-10)


def write_cifar(root: Path, n_per_batch: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (6 * n_per_batch, 3072), dtype=np.uint8)
    labels = rng.integers(0, 10, 6 * n_per_batch)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        part = slice(i * n_per_batch, (i + 1) * n_per_batch)
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": pixels[part], b"labels": labels[part].tolist()}, f)
    return pixels, labels


def test_image_layout_split_and_normalisation(tmp_path):
    pixels, labels = write_cifar(tmp_path)
    task = load_task("image", tmp_path)
    assert (task.seq_len, task.in_channels, task.vocab, task.num_classes) == (1024, 3, None, 10)
    assert [len(task.train), len(task.val), len(task.test)] == [45, 5, 10]
    assert task.train.inputs.shape == (45, 1024, 3) and task.train.inputs.dtype == np.uint8
    # row-major pixels with channels last: pixel p of channel c is data[c * 1024 + p]
    expected = pixels[50:].reshape(10, 3, 1024).transpose(0, 2, 1)
    np.testing.assert_array_equal(task.test.inputs, expected)
    np.testing.assert_array_equal(task.test.labels, labels[50:])
    np.testing.assert_array_equal(task.test.lengths, np.full(10, 1024))
    # train + val is a partition of the 50 train images, labels kept with their images
    original = {pixels[i].tobytes(): labels[i] for i in range(50)}
    rows = [x.transpose(1, 0).tobytes() for s in (task.train, task.val) for x in s.inputs]
    assert sorted(rows) == sorted(original)
    got = np.concatenate([task.train.labels, task.val.labels])
    assert [original[r] for r in rows] == list(got)
    batch = task.batch(task.test, np.arange(3))
    assert batch["inputs"].dtype == np.float32 and batch["inputs"].shape == (3, 1024, 3)
    mean, std = np.array([0.4914, 0.4822, 0.4465]), np.array([0.247, 0.243, 0.261])
    want = (expected[:3] / 255 - mean) / std
    np.testing.assert_allclose(batch["inputs"], want, rtol=1e-5, atol=1e-5)
    assert_same_task(task, load_task("image", tmp_path))  # deterministic split


def test_image_malformed_pickle(tmp_path):
    write_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    with open(path, "wb") as f:
        pickle.dump({b"data": np.zeros((2, 3000), np.uint8), b"labels": [0, 1]}, f)
    with pytest.raises(ValueError, match=r"data_batch_3: b'data' must be uint8 of shape \(n, 3072"):
        load_task("image", tmp_path)
    with open(path, "wb") as f:
        pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}, f)
    with pytest.raises(ValueError, match=r"data_batch_3: label 10 of image 1 is out of range"):
        load_task("image", tmp_path)


# --------------------------------------------------------------------------- Pathfinder, PathX


def write_pathfinder(root: Path, side: int = 32, batches: dict[int, int] | None = None) -> Path:
    """Images of constant value v with label v % 2; batch 2 holds v = 10.., batch 10 v = 20.."""
    folder = root / f"pathfinder{side}" / "curv_contour_length_14"
    batches = batches or {10: 10, 2: 10}
    for batch, count in batches.items():
        (folder / "imgs" / str(batch)).mkdir(parents=True)
        lines = []
        for k in range(count):
            value = 10 * (1 + (batch == 10)) + k
            image = np.full((side, side), value, np.uint8)
            Image.fromarray(image).save(folder / "imgs" / str(batch) / f"sample_{k}.png")
            lines.append(f"imgs/{batch} sample_{k}.png {k} {value % 2} 1.0 14 4 2 0.5 1 1\n")
        write(folder / "metadata" / f"{batch}.npy", "".join(lines))
    return folder


def test_pathfinder_order_split_and_normalisation(tmp_path):
    write_pathfinder(tmp_path / "lra_release" / "lra_release")
    task = load_task("pathfinder", tmp_path)
    assert (task.seq_len, task.in_channels, task.num_classes, task.dropped) == (1024, 1, 2, {})
    assert [len(task.train), len(task.val), len(task.test)] == [16, 2, 2]
    values = []
    for split in (task.train, task.val, task.test):
        assert split.inputs.shape[1:] == (1024, 1) and split.inputs.dtype == np.uint8
        v = split.inputs[:, 0, 0].astype(int)
        assert (split.inputs == v[:, None, None]).all()
        np.testing.assert_array_equal(split.labels, v % 2)
        assert (np.diff(v) > 0).all()  # metadata sorted by integer stem: batch 2 before 10
        values += list(v)
    assert sorted(values) == list(range(10, 30))
    batch = task.batch(task.train, np.array([0, 1]))
    assert batch["inputs"].shape == (2, 1024, 1) and batch["inputs"].dtype == np.float32
    want = task.train.inputs[:2, 0, 0] / 127.5 - 1
    np.testing.assert_allclose(batch["inputs"][:, 0, 0], want, rtol=1e-6)
    assert_same_task(task, load_task("pathfinder", tmp_path))


def test_pathfinder_normalisation_range(tmp_path):
    folder = write_pathfinder(tmp_path, batches={0: 10})
    for k, value in ((0, 0), (1, 255)):
        image = Image.fromarray(np.full((32, 32), value, np.uint8))
        image.save(folder / "imgs" / "0" / f"sample_{k}.png")
    task = load_task("pathfinder", tmp_path)
    splits = (task.train, task.val, task.test)
    everything = np.concatenate([task.batch(s, np.arange(len(s)))["inputs"] for s in splits])
    assert everything.min() == -1.0 and everything.max() == 1.0


def test_pathfinder_counts_skipped_images(tmp_path, caplog):
    folder = write_pathfinder(tmp_path)
    (folder / "imgs" / "2" / "sample_3.png").write_bytes(b"")
    (folder / "imgs" / "10" / "sample_4.png").write_bytes(b"not a png at all")
    (folder / "imgs" / "10" / "sample_5.png").unlink()
    with caplog.at_level(logging.WARNING, logger="experiments.lra.data"):
        task = load_task("pathfinder", tmp_path)
    assert task.dropped == {"empty_image": 1, "missing_image": 1, "unreadable_image": 1}
    assert len(task.train) + len(task.val) + len(task.test) == 17
    assert "sample_3.png" in caplog.text and "empty_image" in caplog.text
    kept = np.concatenate([s.inputs[:, 0, 0] for s in (task.train, task.val, task.test)])
    assert not {13, 24, 25} & set(kept.tolist())


@pytest.mark.parametrize(
    "line, message",
    [
        ("imgs/2 sample_0.png 0", r"2.npy:2: expected at least 4 space-separated fields"),
        ("imgs/2 sample_0.png 0 yes 1.0", r"2.npy:2: label 'yes' is not an integer"),
        ("imgs/2 sample_0.png 0 3 1.0", r"2.npy:2: label 3 is out of range"),
    ],
)
def test_pathfinder_malformed_metadata(tmp_path, line, message):
    folder = write_pathfinder(tmp_path)
    write(folder / "metadata" / "2.npy", f"imgs/2 sample_0.png 0 0 1.0 14 4 2 0.5 1 1\n{line}\n")
    with pytest.raises(ValueError, match=message):
        load_task("pathfinder", tmp_path)


def test_pathfinder_wrong_size_and_bad_metadata_name(tmp_path):
    folder = write_pathfinder(tmp_path)
    Image.fromarray(np.zeros((16, 32), np.uint8)).save(folder / "imgs" / "2" / "sample_0.png")
    with pytest.raises(ValueError, match=r"sample_0.png: expected a 32x32 image, got 32x16"):
        load_task("pathfinder", tmp_path)
    write(folder / "metadata" / "notes.npy", "")
    with pytest.raises(ValueError, match=r"notes.npy: metadata files must be named <integer>.npy"):
        load_task("pathfinder", tmp_path)


def test_pathx_cache_memmap_and_invalidation(tmp_path):
    folder = write_pathfinder(tmp_path / "data", side=128, batches={0: 10})
    (folder / "imgs" / "0" / "sample_7.png").write_bytes(b"")
    cache = tmp_path / "cache"
    first = load_task("pathx", tmp_path / "data", cache_dir=cache)
    assert first.seq_len == 16384 and first.dropped == {"empty_image": 1}
    assert isinstance(first.train.inputs, np.memmap)  # reopened from the cache
    assert first.train.inputs.shape[1:] == (16384, 1) and first.train.inputs.dtype == np.uint8
    assert len(first.train) + len(first.val) + len(first.test) == 9
    assert not [p for p in (cache / "pathx").iterdir() if p.name.startswith(".")]  # no temp files
    fresh = load_task("pathx", tmp_path / "data")
    assert_same_task(first, fresh)
    again = load_task("pathx", tmp_path / "data", cache_dir=cache)
    assert_same_task(first, again)
    # changing a metadata file invalidates the cache: every label becomes 1
    lines = "".join(f"imgs/0 sample_{k}.png {k} 1 1.0 14 4 2 0.5 1 1\n" for k in range(10))
    write(folder / "metadata" / "0.npy", lines)
    changed = load_task("pathx", tmp_path / "data", cache_dir=cache)
    assert changed.sizes == first.sizes and sum(changed.sizes.values()) == 9
    assert all((s.labels == 1).all() for s in (changed.train, changed.val, changed.test))


# --------------------------------------------------------------------------- cache, vocab files


def test_token_cache_saves_and_reloads_vocab(tmp_path):
    write_imdb(tmp_path / "data")
    cache = tmp_path / "cache"
    built = load_task("text", tmp_path / "data", cache_dir=cache, max_examples=3)
    meta = (cache / "text-max3" / "meta.json").read_text(encoding="utf-8")
    assert '"vocab"' in meta and "é" in meta
    reloaded = load_task("text", tmp_path / "data", cache_dir=cache, max_examples=3)
    assert isinstance(reloaded.train.inputs, np.memmap)
    assert reloaded.val is reloaded.test
    assert_same_task(built, reloaded)
    assert_same_task(built, load_task("text", tmp_path / "data", max_examples=3))
    assert len(built.train) == 3 and built.vocab == ("<pad>", "<unk>", "<eos>", "a", "b", "é")


#: A cache's `meta.json` as `load` writes it for a token task (val stored as test).
CACHE_META = {
    "version": _cache.CACHE_VERSION,
    "fingerprint": "f" * 64,
    "arrays": [f"{s}.{f}" for s in ("test", "train") for f in ("inputs", "labels", "lengths")],
    "vocab": ["<pad>", "<unk>", "<eos>", "a"],
    "seq_len": 12,
    "fields": ["inputs", "lengths", "labels"],
    "dropped": {},
    "aliases": {"val": "test"},
}
_ABSENT = object()
# A field of meta.json edited by hand: (field, value, what the line says). When the cache
# was reopened, each was a traceback (KeyError, TypeError) or was read as it was (a width
# of "12" or 0, a count of -1).
MALFORMED_CACHE = [
    ("seq_len", "12", "its 'seq_len' is \"12\" (a string), not a whole number >= 1"),
    ("seq_len", 0, "its 'seq_len' is 0 (a number)"),
    ("fields", ["inputs", "pixels"], "its 'fields' is a list holding \"pixels\""),
    ("vocab", 5, "its 'vocab' is 5 (a number), not null or a list of tokens"),
    ("dropped", {"empty_image": -1}, "its 'dropped' is an object whose 'empty_image' is -1"),
    ("arrays", ["train.inputs"], "its 'arrays' lack 'train.lengths'"),
    ("aliases", {"val": "dev"}, "its 'aliases' is an object whose 'val' is \"dev\""),
    ("fields", _ABSENT, "it lacks 'fields'"),
]


@pytest.mark.parametrize("field, value, words", MALFORMED_CACHE)
def test_a_malformed_cache_record_is_one_line_naming_the_field(field, value, words, tmp_path):
    path = tmp_path / "meta.json"
    meta = {k: v for k, v in {**CACHE_META, field: value}.items() if v is not _ABSENT}
    with pytest.raises(data.DataError) as e:
        _cache.CacheMeta.from_json(meta, where=path)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{path} is corrupt: {words}"), line
    record = _cache.CacheMeta.from_json(CACHE_META, where=path)
    assert record.vocab == ("<pad>", "<unk>", "<eos>", "a") and record.aliases == {"val": "test"}


def test_a_hand_edited_cache_record_is_named_and_the_cache_rebuilt(tmp_path, caplog):
    write_listops(tmp_path / "data")
    cache = tmp_path / "cache"
    built = load_task("listops", tmp_path / "data", cache_dir=cache)
    path = cache / "listops" / "meta.json"
    meta = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**meta, "seq_len": "wide"}), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        again = load_task("listops", tmp_path / "data", cache_dir=cache)
    assert_same_task(built, again)
    warned = [r.getMessage() for r in caplog.records if str(path) in r.getMessage()]
    assert warned == [
        f"{path} is corrupt: its 'seq_len' is \"wide\" (a string), not a whole number >= 1; "
        "it was edited, or written by another tool. The cache is rebuilt."
    ]
    assert json.loads(path.read_text(encoding="utf-8")) == meta  # written again as it was


# --------------------------------------------------------------------------- batching


def test_batch_indices_deterministic_and_complete():
    a = batch_indices(103, 10, seed=3, epoch=2, shuffle=True, drop_last=False)
    b = batch_indices(103, 10, seed=3, epoch=2, shuffle=True, drop_last=False)
    assert len(a) == 11 and [len(x) for x in a] == [10] * 10 + [3]
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    np.testing.assert_array_equal(np.sort(np.concatenate(a)), np.arange(103))
    np.testing.assert_array_equal(np.concatenate(a), np.random.default_rng([3, 2]).permutation(103))
    other = batch_indices(103, 10, seed=3, epoch=3, shuffle=True, drop_last=False)
    assert not np.array_equal(np.concatenate(a), np.concatenate(other))
    dropped = batch_indices(103, 10, seed=3, epoch=2, shuffle=True, drop_last=True)
    assert [len(x) for x in dropped] == [10] * 10
    ordered = batch_indices(7, 3, seed=0, epoch=0, shuffle=False, drop_last=False)
    assert [x.tolist() for x in ordered] == [[0, 1, 2], [3, 4, 5], [6]]
    assert batch_indices(5, 8, seed=0, epoch=0, shuffle=True, drop_last=True) == []
    with pytest.raises(ValueError, match="batch_size"):
        batch_indices(5, 0, seed=0, epoch=0, shuffle=False, drop_last=False)


def test_batch_rejects_bad_indices(tmp_path):
    write_listops(tmp_path)
    task = load_task("listops", tmp_path)
    with pytest.raises(IndexError, match=r"\[0, 3\)"):
        task.batch(task.train, np.array([0, 3]))
    with pytest.raises(ValueError, match="1-D integer"):
        task.batch(task.train, np.array([[0]]))


# --------------------------------------------------------------------------- configs


def _config(task):
    return types.SimpleNamespace(**tasks.get_task(task).settings)


def test_configs_match_paper_and_loader():
    for task in tasks.names():
        entry, cfg = tasks.get_task(task), _config(task)
        assert entry.input_kind == ("tokens" if entry.in_channels is None else "features")
        assert tuple(entry.settings) == tasks.SETTINGS  # named as RunConfig's fields
        assert (cfg.depth, cfg.weight_decay, cfg.warmup_fraction) == (6, 0.05, 0.1)
        assert cfg.bidirectional == (task in ("pathfinder", "pathx"))
    table9 = {  # H, N, steps, batch, lr factor, dropout
        "image": (512, 384, 180_000, 50, 0.25, 0.1),
        "listops": (128, 256, 80_000, 32, 0.5, 0.0),
        "text": (256, 192, 50_000, 32, 0.1, 0.1),
        "retrieval": (128, 256, 100_000, 64, 0.5, 0.1),
        "pathfinder": (192, 256, 500_000, 64, 0.25, 0.0),
        "pathx": (128, 256, 250_000, 32, 0.25, 0.0),
    }
    for task, row in table9.items():
        c = _config(task)
        assert (c.d_model, c.d_state, c.steps, c.batch_size, c.lr_factor, c.dropout) == row
    assert (_config("pathx").r_min, _config("pathx").r_max) == (0.999, 0.9999)
    assert _config("pathx").max_phase == pytest.approx(math.pi / 10)
    assert (_config("listops").r_min, _config("listops").r_max) == (0.0, 0.99)
    assert _config("text").lr == 4e-3  # S5's IMDB learning rate (the guide's sources)
    assert [_config(t).glu for t in tasks.names()].count("half") == 1
    assert _config("pathx").glu == "half"
    with pytest.raises(ValueError, match="Unknown LRA task 'imdb'"):
        _config("imdb")

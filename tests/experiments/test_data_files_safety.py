"""Data files cannot be turned against their user, and their mistakes are named right.

No data file runs code (CIFAR pickles go through a reader that builds only what the
official batches hold), no loader reads outside its task folder (`..` or absolute paths in
Pathfinder's metadata, links leading out), and three classes left from the last round: a
fractional label taken as an integer, a cache reused after its source changed with its
size and modification time kept, and a folder where a data file should be reported as a
missing file. Issue 27.
"""

import io
import os
import pickle
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pytest
from test_lra_data import write, write_aan, write_cifar, write_imdb, write_listops, write_pathfinder

from experiments.lra.data import DataError, MissingDataError
from experiments.lra.data import _cifar_pickle as cifar_pickle
from experiments.lra.tasks import load_task

# --------------------------------------------------------------------------- pickles


class _RunsCode:
    """Pickles as a call of `os.system`: what a crafted "CIFAR batch" would hold."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_runs_nothing(tmp_path):
    """The old loader's `pickle.load` ran `os.system` before refusing the file."""
    write_cifar(tmp_path)
    marker = tmp_path / "ran"
    crafted = {b"data": _RunsCode(marker), b"labels": [0]}
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(pickle.dumps(crafted))
    with pytest.raises(DataError) as excinfo:
        load_task("image", tmp_path)
    assert not marker.exists()
    message = str(excinfo.value)
    assert "data_batch_3: not a CIFAR-10 batch: the pickle asks for" in message, message
    assert f"{os.system.__module__}.system" in message and "\n" not in message


class _Python2Pickler(pickle._Pickler):
    """Protocol 2 as Python 2 wrote the official batches: byte strings as BINSTRING (no
    `_codecs` call, which Python 3 uses for bytes below protocol 3)."""

    # The pure-Python pickler's own methods and table, which typeshed does not describe.
    write: Callable[[bytes], object]
    memoize: Callable[[object], None]
    dispatch: dict[type, Callable[..., None]]

    def save_bytes(self, obj):
        self.write(
            pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj
            if len(obj) < 256
            else pickle.BINSTRING + len(obj).to_bytes(4, "little") + obj
        )
        self.memoize(obj)

    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[bytes] = save_bytes


def _python2_batch(batch: dict) -> bytes:
    out = io.BytesIO()
    _Python2Pickler(out, protocol=2).dump(batch)
    # NumPy 1's module path, as in the official files.
    return out.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def test_the_official_layout_loads_in_every_protocol(tmp_path):
    """Keys, pixels, labels, batch label and file names as in `cifar-10-batches-py`, in
    Python 2's protocol 2 and in protocols 3 to 5 (files re-saved by Python 3)."""
    rng = np.random.default_rng(0)
    batch = {
        b"batch_label": b"training batch 1 of 5",
        b"labels": [3, 0, 9],
        b"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8),
        b"filenames": [b"a.png", b"b.png", b"c.png"],
    }
    encodings = [_python2_batch(batch)] + [pickle.dumps(batch, protocol=p) for p in (3, 4, 5)]
    assert b"numpy.core.multiarray\n_reconstruct" in encodings[0]
    for encoded in encodings:
        got = cast(dict[bytes, Any], cifar_pickle.load(io.BytesIO(encoded)))
        assert sorted(got) == sorted(batch) and got[b"labels"] == [3, 0, 9]
        np.testing.assert_array_equal(got[b"data"], batch[b"data"])
    write_cifar(tmp_path, n_per_batch=3)
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(encodings[0])
    task = load_task("image", tmp_path)
    np.testing.assert_array_equal(task.test.labels, [3, 0, 9])
    np.testing.assert_array_equal(task.test.inputs[1, :, 2], batch[b"data"][1, 2048:])


# --------------------------------------------------------------------------- outside the folder


def test_pathfinder_metadata_naming_a_file_outside_is_refused(tmp_path):
    secret = write(tmp_path / "secret.png", "not for the trainer")
    folder = write_pathfinder(tmp_path / "data")
    meta = folder / "metadata" / "2.npy"
    lines = meta.read_text().splitlines(keepends=True)
    for path in ["../../../secret.png", str(secret)]:
        bad = f"imgs/2 {path} 0 1 1.0 14 4 2 0.5 1 1\n"
        meta.write_text("".join(lines[:3] + [bad] + lines[3:]))
        with pytest.raises(DataError) as excinfo:
            load_task("pathfinder", tmp_path / "data")
        message = str(excinfo.value)
        assert message.startswith(f"{meta}:4: the image path") and "leads outside" in message


def test_links_leading_out_of_the_task_folder_are_refused(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # A Pathfinder image, and a whole image folder.
    folder = write_pathfinder(tmp_path / "data")
    image = folder / "imgs" / "2" / "sample_3.png"
    os.replace(image, outside / "sample_3.png")
    image.symlink_to(outside / "sample_3.png")
    with pytest.raises(DataError, match=r"sample_3.png' leads outside the task folder"):
        load_task("pathfinder", tmp_path / "data")
    image.unlink()
    os.replace(folder / "imgs" / "10", outside / "10")
    (folder / "imgs" / "10").symlink_to(outside / "10")
    with pytest.raises(DataError, match=r"imgs/10' leads outside the task folder"):
        load_task("pathfinder", tmp_path / "data")
    # A ListOps split and an IMDB review.
    listops = write_listops(tmp_path / "lo")
    os.replace(listops / "basic_val.tsv", outside / "val.tsv")
    (listops / "basic_val.tsv").symlink_to(outside / "val.tsv")
    with pytest.raises(DataError, match=r"basic_val.tsv' leads outside the task folder"):
        load_task("listops", tmp_path / "lo")
    imdb = write_imdb(tmp_path / "imdb")
    os.replace(imdb / "test" / "pos" / "7_7.txt", outside / "7_7.txt")
    (imdb / "test" / "pos" / "7_7.txt").symlink_to(outside / "7_7.txt")
    with pytest.raises(DataError, match=r"7_7.txt' leads outside the task folder"):
        load_task("text", tmp_path / "imdb")


def test_links_inside_the_task_folder_are_read(tmp_path):
    folder = write_listops(tmp_path)
    expected = load_task("listops", tmp_path)
    os.replace(folder / "basic_val.tsv", folder / "val-copy.tsv")
    (folder / "basic_val.tsv").symlink_to("val-copy.tsv")
    got = load_task("listops", tmp_path)
    np.testing.assert_array_equal(got.val.inputs, expected.val.inputs)


# --------------------------------------------------------------------------- last round's classes


@pytest.mark.parametrize("label", ["1.5", "0.999", "nan", "inf", "1_0", "\u0661"])
def test_a_fractional_label_is_not_an_integer(tmp_path, label):
    """Retrieval read `int(float("1.5")) == 1` and `float("\\u0661") == 1.0` (an Arabic-Indic
    digit, found by test_loader_properties); ListOps took Python's `int("0_1") == 1`."""
    write_aan(tmp_path, eval_rows=f"{label}\tid\tid\ta\tb\n")
    with pytest.raises(DataError, match=rf"new_aan_pairs.eval.tsv:1: label '{label}' is not"):
        load_task("retrieval", tmp_path)


def test_integer_labels_with_underscores_are_not_integers(tmp_path):
    folder = write_listops(tmp_path)
    write(folder / "basic_val.tsv", "Source\tTarget\n( [MAX 1 ] )\t0_1\n")
    with pytest.raises(DataError, match=r"basic_val.tsv:2: label '0_1' is not an integer"):
        load_task("listops", tmp_path)


def test_a_source_rewritten_with_its_size_and_mtime_kept_rebuilds_the_cache(tmp_path):
    folder = write_listops(tmp_path / "data")
    first = load_task("listops", tmp_path / "data", cache_dir=tmp_path / "cache")
    path = folder / "basic_test.tsv"
    stat = path.stat()
    text = path.read_text()
    changed = text.replace("\t0\n", "\t7\n")  # a label changed, the size kept
    assert changed != text and len(changed) == len(text)
    path.write_text(changed)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as `touch -r`, `cp -p`
    assert path.stat().st_mtime_ns == stat.st_mtime_ns
    second = load_task("listops", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert list(first.test.labels) == [0, 5]
    assert list(second.test.labels) == [7, 5]


def test_a_folder_where_a_data_file_should_be_is_named_as_such(tmp_path):
    """Was `MissingDataError: Missing file ...` for a path that exists."""
    folder = write_listops(tmp_path / "lo")
    (folder / "basic_val.tsv").unlink()
    (folder / "basic_val.tsv").mkdir()
    cifar = tmp_path / "img"
    write_cifar(cifar)
    (cifar / "cifar-10-batches-py" / "data_batch_2").unlink()
    (cifar / "cifar-10-batches-py" / "data_batch_2").mkdir()
    pathfinder = write_pathfinder(tmp_path / "pf")
    (pathfinder / "metadata" / "2.npy").unlink()
    (pathfinder / "metadata" / "2.npy").mkdir()
    imdb = write_imdb(tmp_path / "imdb")
    for review in (imdb / "train" / "neg").iterdir():
        review.unlink()
    (imdb / "train" / "neg").rmdir()
    (imdb / "train" / "neg").write_text("")
    cases = [
        ("listops", tmp_path / "lo", "basic_val.tsv' is a folder; expected a file there"),
        ("image", cifar, "data_batch_2' is a folder; expected a CIFAR-10 file there"),
        ("pathfinder", tmp_path / "pf", "2.npy' is a folder; expected a file there"),
        ("text", tmp_path / "imdb", "train/neg' is not a folder; expected aclImdb/train/neg"),
    ]
    for task, root, message in cases:
        with pytest.raises(DataError) as excinfo:
            load_task(task, root)
        assert not isinstance(excinfo.value, MissingDataError), excinfo.value
        assert message in str(excinfo.value)

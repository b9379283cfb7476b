"""Bad data and bad generator flags get one clear error naming the file (and line) or flag.

`load_task` raises `DataError` for every user-caused data problem (`MissingDataError`, also
a `FileNotFoundError`, for missing files); `generate`'s command line prints one `error:`
line with status 2. Issue 12, items 1 (empty splits), 6 (`--size 0`) and 8.
"""

import pickle

import numpy as np
import pytest
from test_lra_data import write, write_aan, write_cifar, write_listops, write_pathfinder

from experiments.lra import generate as gen
from experiments.lra.data import DataError, MissingDataError
from experiments.lra.tasks import load_task


def test_error_classes():
    assert issubclass(DataError, ValueError)
    assert issubclass(MissingDataError, DataError)
    assert issubclass(MissingDataError, FileNotFoundError)


# --------------------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    "body, message",
    [
        ("( [MAX 1 ] )\t3\n( [MAX 1 ] )\n", r"basic_val.tsv:3: expected 2 tab-separated"),
        ("( [MAX 1 ] )\tseven\n", r"basic_val.tsv:2: label 'seven' is not an integer"),
        ("( [MAX 1 ] )\t1\n( [MAX \xff ] )\t1\n", None),  # written as bytes below
    ],
)
def test_malformed_listops_is_a_data_error(tmp_path, body, message):
    folder = write_listops(tmp_path)
    if message is None:  # invalid UTF-8 on line 3
        (folder / "basic_val.tsv").write_bytes(b"Source\tTarget\n( [MAX 1 ] )\t1\n\xff\t1\n")
        message = r"basic_val.tsv:3: not valid UTF-8"
    else:
        write(folder / "basic_val.tsv", "Source\tTarget\n" + body)
    with pytest.raises(DataError, match=message):
        load_task("listops", tmp_path)


def test_malformed_retrieval_is_a_data_error(tmp_path):
    write_aan(tmp_path, eval_rows="1\tid\tid\ta\tb\n0.5x\tid\tid\ta\tb\n")
    with pytest.raises(DataError, match=r"new_aan_pairs.eval.tsv:2: label '0.5x'"):
        load_task("retrieval", tmp_path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", r"data_batch_2: not a readable CIFAR-10 pickle"),
        (b"\x80\x04garbage", r"data_batch_2: not a readable CIFAR-10 pickle"),
        (pickle.dumps([1, 2, 3]), r"data_batch_2: expected a dict with keys b'data'"),
        (
            pickle.dumps({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}),
            r"data_batch_2: b'data' must be uint8",
        ),
        (
            pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}),
            r"data_batch_2: b'labels' must hold 2 integers",
        ),
    ],
)
def test_bad_cifar_pickle_is_a_data_error(tmp_path, content, message):
    write_cifar(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(content)
    with pytest.raises(DataError, match=message):
        load_task("image", tmp_path)


def test_wrong_size_png_is_a_data_error(tmp_path):
    from PIL import Image

    folder = write_pathfinder(tmp_path)
    Image.fromarray(np.zeros((31, 32), np.uint8)).save(folder / "imgs" / "2" / "sample_1.png")
    with pytest.raises(DataError, match=r"imgs/2/sample_1.png: expected a 32x32 image, got 32x31"):
        load_task("pathfinder", tmp_path)


def test_unreadable_pngs_that_empty_a_split_are_a_data_error(tmp_path):
    folder = write_pathfinder(tmp_path, batches={0: 10})
    for k in range(10):
        (folder / "imgs" / "0" / f"sample_{k}.png").write_bytes(b"not a png")
    with pytest.raises(
        DataError,
        match=r"pathfinder: the train, val and test splits are empty"
        r".*train/val/test sizes 0/0/0.*metadata",
    ):
        load_task("pathfinder", tmp_path)


# --------------------------------------------------------------------------- missing files


def test_missing_files_are_data_errors(tmp_path):
    folder = write_listops(tmp_path)
    (folder / "basic_test.tsv").unlink()
    with pytest.raises(MissingDataError, match=r"basic_test.tsv"):
        load_task("listops", tmp_path)
    write_cifar(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(MissingDataError, match=r"test_batch"):
        load_task("image", tmp_path)
    with pytest.raises(MissingDataError, match=r"tsv_data"):
        load_task("retrieval", tmp_path)
    with pytest.raises(MissingDataError, match=r"not a directory"):
        load_task("listops", tmp_path / "nowhere")


# --------------------------------------------------------------------------- cache folder


def test_cache_dir_that_is_a_file_is_a_data_error(tmp_path):
    write_listops(tmp_path / "data")
    (tmp_path / "cache").write_text("not a folder")
    with pytest.raises(DataError, match=r"cache_dir: '.*cache' is a file; expected a folder"):
        load_task("listops", tmp_path / "data", cache_dir=tmp_path / "cache")
    (tmp_path / "cache2").mkdir()
    (tmp_path / "cache2" / "listops").write_text("")
    with pytest.raises(DataError, match=r"cache_dir: '.*cache2/listops' is a file"):
        load_task("listops", tmp_path / "data", cache_dir=tmp_path / "cache2")


# --------------------------------------------------------------------------- empty splits


def test_empty_listops_split_is_a_data_error_naming_the_file(tmp_path):
    folder = write_listops(tmp_path)
    write(folder / "basic_val.tsv", "Source\tTarget\n")
    with pytest.raises(
        DataError,
        match=r"listops: the val split is empty \(train/val/test sizes "
        r"3/0/2; val comes from .*basic_val.tsv\)",
    ):
        load_task("listops", tmp_path)
    for split in ("train", "val", "test"):  # every split empty: still the same clear error
        write(folder / f"basic_{split}.tsv", "Source\tTarget\n")
    with pytest.raises(DataError, match=r"the train, val and test splits are empty"):
        load_task("listops", tmp_path)


def test_too_few_images_for_a_val_split_is_a_data_error(tmp_path):
    write_cifar(tmp_path, n_per_batch=1)  # 5 train images: the 10% val split is empty
    with pytest.raises(DataError, match=r"image: the val split is empty .*5/0/1.*data_batch_"):
        load_task("image", tmp_path)


def test_split_sizes_are_reported(tmp_path):
    write_listops(tmp_path)
    task = load_task("listops", tmp_path)
    assert task.sizes == {"train": 3, "val": 1, "test": 2}


# --------------------------------------------------------------------------- generate CLI


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--task", "listops", "--size", "0"],
            "argument --size: expected an integer >= 1 and <= 2147483647 (a 32-bit integer), "
            "got '0'",
        ),
        (["--task", "pathfinder", "--size", "0"], "argument --size: expected an integer >= 1"),
        (["--task", "listops", "--size", "-5"], "argument --size: expected an integer >= 1"),
        (
            ["--task", "listops", "--split-sizes", "40", "0", "2"],
            "argument --split-sizes: expected an integer >= 1 and <= 2147483647 (a 32-bit "
            "integer), got '0'",
        ),
        (["--task", "listops", "--split-sizes", "40", "-1", "2"], "argument --split-sizes"),
        (["--task", "listops", "--size", "2"], "argument --size: ListOps needs at least 3"),
        (
            ["--task", "listops", "--size", "9", "--split-sizes", "3", "3", "3"],
            "either --size or --split-sizes",
        ),
        (
            ["--task", "pathfinder", "--workers", "0"],
            "argument --workers: expected an integer >= 1",
        ),
        (
            ["--task", "pathfinder", "--resolution", "8"],
            "argument --resolution: expected an integer >= 16",
        ),
        (["--task", "listops", "--seed", "-1"], "argument --seed: expected an integer >= 0"),
    ],
)
def test_generate_refuses_bad_flags_in_one_line(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        gen.main([*flags, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not any(tmp_path.iterdir())  # nothing written


def test_generate_reports_impossible_settings_and_unwritable_out(tmp_path, capsys):
    flags = ["--task", "listops", "--size", "3", "--min-length", "5", "--max-length", "6"]
    assert gen.main([*flags, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No integer length lies strictly between") and err.count("\n") == 1
    (tmp_path / "file").write_text("")
    flags = ["--task", "pathfinder", "--size", "3", "--out", str(tmp_path / "file" / "x")]
    with pytest.raises(SystemExit) as exit_info:  # the parser's check (runs.flags)
        gen.main(flags)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: argument --out:") and err.count("\n") == 1
    assert "file/x" in err and "is not a writable folder" in err
    gen.main(["--task", "pathfinder", "--size", "2", "--out", str(tmp_path / "pf")])
    capsys.readouterr()
    assert gen.main(["--task", "pathfinder", "--size", "2", "--out", str(tmp_path / "pf")]) == 2
    assert "pass --overwrite" in capsys.readouterr().err

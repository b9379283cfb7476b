"""Property-based: every file a loader may meet either loads (labels in range, lengths >= 1)
or is refused with one `DataError` line naming it; never another exception (issue 27).

Generated ListOps and Retrieval rows (columns, labels as integers, floats, words, odd
whitespace and Unicode), Pathfinder metadata lines (paths with `..`, absolute, missing
images, odd labels and field counts) and CIFAR batches (dicts of arrays of odd dtypes and
shapes, odd labels, other objects, pickle protocols 2 to 5, raw bytes). Bounded examples,
the same every run (`derandomize`), no shrinking (a failure reports its first example).
"""

import math
import os
import pickle
import re
import tempfile
from pathlib import Path
from typing import cast

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_lra_data import write, write_aan, write_cifar, write_listops, write_pathfinder

from experiments.lra.data import DataError
from experiments.lra.tasks import load_task

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=cast("list[HealthCheck]", list(HealthCheck)),
)


def _loads_or_refuses(task: str, root: Path, *, must_refuse: bool = False):
    """The loaded task (sane arrays), or `None` after one `DataError` line; `must_refuse`:
    the file is wrong by the format's definition, so loading it is a failure."""
    try:
        data = load_task(task, root)
    except DataError as e:
        message = str(e)
        assert message and "\n" not in message.strip(), message
        return None
    assert not must_refuse, f"{task}: accepted a file the format does not allow"
    for split in (data.train, data.val, data.test):
        assert len(split) >= 1
        assert ((split.labels >= 0) & (split.labels < data.num_classes)).all()
        assert (split.lengths >= 1).all() and (split.lengths <= data.seq_len).all()
    return data


def _label(text: str, num_classes: int, *, float_ok: bool) -> int | None:
    """The oracle: the label `text` holds by the format's definition, else `None`: ASCII
    digits with a sign (surrounding spaces allowed); for AAN also a float of integral
    value ("1.0"); in `[0, num_classes)`."""
    text = text.strip()
    value = None
    if re.fullmatch(r"[+-]?[0-9]+", text):
        value = int(text)
    elif float_ok and re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", text):
        number = float(text)
        value = int(number) if math.isfinite(number) and number.is_integer() else None
    return value if value is not None and 0 <= value < num_classes else None


_WORDS = st.text(alphabet=st.sampled_from(list("[]()0123456789 MAXINMEDSM\t\r\u00e9\u2028")))
_ODD_LABELS = ["1.5", "1e0", "nan", "inf", "1_0", " 1", "+1", "-0", "0x1", "١", "", "seven"]
_ODD_LABELS += ["1.0000001", "0.999", "9" * 30, "-1", "2", "12"]
#: Mostly valid binary labels (so that one odd label is often the only fault), else odd.
_LABELS = st.sampled_from(["0", "1", "1.0", "0.0"] * 8 + _ODD_LABELS)


@SETTINGS
@given(st.lists(st.tuples(_WORDS, _LABELS, st.booleans()), max_size=4), st.booleans())
def test_listops_rows(rows, header):
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_listops(Path(tmp))
        tail = {True: "\tx", False: ""}
        body = "".join(f"{src}\t{label}{tail[extra]}\n" for src, label, extra in rows)
        write(folder / "basic_val.tsv", ("Source\tTarget\n" if header else "") + body)
        labels = [_label(label, 10, float_ok=False) for _, label, _ in rows]
        columns_ok = all("\t" not in src and not extra for src, _, extra in rows)
        wrong = not header or not columns_ok or None in labels
        data = _loads_or_refuses("listops", Path(tmp), must_refuse=wrong)
        if data is not None:
            assert list(data.val.labels) == labels


@SETTINGS
@given(
    st.lists(
        st.tuples(_LABELS, _WORDS, _WORDS, st.sampled_from([5, 5, 5, 3, 6])), min_size=1, max_size=2
    )
)
def test_retrieval_rows(rows):
    with tempfile.TemporaryDirectory() as tmp:
        lines = []
        for label, a, b, columns in rows:
            fields = [label, "id-a", "id-b", a.replace("\t", " "), b.replace("\t", " ")]
            fields += ["extra"] * max(columns - 5, 0)
            lines.append("\t".join(fields[:columns]) + "\n")
        write_aan(Path(tmp), eval_rows="".join(lines))
        labels = [_label(label, 2, float_ok=True) for label, *_ in rows]
        data = _loads_or_refuses("retrieval", Path(tmp), must_refuse=None in labels)
        if data is not None:
            assert list(data.val.labels) == labels


_IMAGE_PATHS = st.sampled_from(
    ["imgs/2 sample_1.png", "imgs/10 sample_0.png"] * 4
    + ["imgs/2 missing.png", "imgs/../.. etc", "/ sample_1.png", "imgs/2 ../../../x.png"]
    + ["imgs/2/../../.. secret.png", "imgs sample_1.png", "imgs/2"]
)


@SETTINGS
@given(
    st.lists(st.tuples(_IMAGE_PATHS, st.sampled_from(["0", "1"]), st.integers(0, 3)), max_size=3)
)
def test_pathfinder_metadata_lines(lines):
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_pathfinder(Path(tmp))
        meta = folder / "metadata" / "2.npy"
        extra = "".join(f"{path} 0 {label}{' 1' * more}\n" for path, label, more in lines)
        meta.write_text(meta.read_text() + extra)
        outside = any(".." in path or path.startswith("/") for path, *_ in lines)
        _loads_or_refuses("pathfinder", Path(tmp), must_refuse=outside)


_ARRAYS = st.sampled_from(
    [
        np.zeros((2, 3072), np.uint8),
        np.zeros((2, 3072), np.float32),
        np.zeros((2, 3071), np.uint8),
        np.zeros((3072,), np.uint8),
        np.zeros((0, 3072), np.uint8),
        np.array(["x"] * 2),
        np.zeros((2, 3072), np.uint8).tolist(),
        None,
    ]
)
_LABEL_LISTS = st.one_of(
    st.lists(st.integers(-2, 11), max_size=3),
    st.sampled_from([[0.0, 1.0], [0.5, 1], ["1", "2"], np.array([1, 2]), None, 3, [True, 2]]),
)


class _RunsCode:
    """Pickles as a call of `os.mkdir(marker)`: a batch that would run code."""

    marker = ""

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@SETTINGS
@given(
    st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                b"data": _ARRAYS,
                b"labels": _LABEL_LISTS,
                "data": _ARRAYS,
                b"batch_label": st.binary(max_size=4),
                b"filenames": st.just(_RunsCode()),
            },
        ),
        st.sampled_from([[1, 2], "text", b"bytes", 3.5, {1: 2}, (np.uint8(1),), np.float64(2)]),
    ),
    st.integers(2, 5),
    st.one_of(st.none(), st.binary(max_size=40)),
)
def test_cifar_batches(batch, protocol, raw):
    with tempfile.TemporaryDirectory() as tmp:
        write_cifar(Path(tmp), n_per_batch=2)
        _RunsCode.marker = str(Path(tmp) / "ran")
        content = raw if raw is not None else pickle.dumps(batch, protocol=protocol)
        (Path(tmp) / "cifar-10-batches-py" / "data_batch_4").write_bytes(content)
        runs_code = raw is None and isinstance(batch, dict) and b"filenames" in batch
        _loads_or_refuses("image", Path(tmp), must_refuse=runs_code)
        assert not (Path(tmp) / "ran").exists(), "the pickle ran code"

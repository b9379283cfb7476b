"""Property-based tests of `eqx_lru.export`'s arguments (issue 34), as exist for the LRA
loaders and flags: any `export(model, state, format=, program=, reads=, dt=, description=,
metadata=)`, `write(exported, path, overwrite=)`, `Tokens(...)`/`Features(...)` either
works or raises one `ExportError`, `ValueError` or `TypeError` line that names an
argument it was given wrong (or, for `write`, the path).

Bounded: 25 examples each, derandomised. The library's own checks are called through
`inspect.unwrap`, as a user meets them (the suite's jaxtyping import hook would refuse a
wrong kind first, in several lines). Serialisation is replaced by a stub (`_cheap`): the
arguments, the tracing of each program with a symbolic batch and length and the manifest
are the real ones; the formats' bytes are tested elsewhere (`test_export_library.py`,
`test_export_invalid_rows.py`), and a compile per example would not fit the budget."""

import dataclasses
import functools
import hashlib
import inspect
import json
import math
import os
import tempfile
from pathlib import Path
from unittest import mock

import equinox as eqx
import jax
import numpy as np
from conformance import FORMATS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_export_contract import OWN

import eqx_lru
import eqx_lru.export
from eqx_lru.export import ExportError, Features, Tokens, _export

VOCAB, CLASSES, D_MODEL, D_STATE = 7, 3, 6, 5
BOUNDED = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ERRORS = (ExportError, ValueError, TypeError)

export = inspect.unwrap(eqx_lru.export.export)
write = inspect.unwrap(eqx_lru.export.write)


def _cheap(program, description) -> bytes:
    del description
    return f"stub {program.kind} {[n for n, _, _ in program.inputs]}".encode()


#: The library's formats (`conformance.FORMATS`), serialised by the stub.
CHEAP = {
    name: dataclasses.replace(eqx_lru.export.FORMATS[name], serialise=_cheap) for name in FORMATS
}


@functools.cache
def _model():
    """A classifier of token ids with batch norm (it keeps state; its core takes `dt`)."""
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, CLASSES, D_MODEL, D_STATE, 1, encoder="embedding", key=jax.random.PRNGKey(0)
    )


def _one_line(error: Exception, *names: str) -> None:
    message = str(error)
    assert isinstance(error, ERRORS) and "\n" not in message, (type(error), message)
    assert any(n in message for n in names), (names, message)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
_NOT_JSON = st.sampled_from([object(), {1, 2}, b"bytes", np.arange(2), {("a",): 1}])


def _argument(valid, invalid, weight=2):
    """`(value, is_valid)`: a valid value about `weight` times as often as an invalid one."""
    return st.one_of(*[valid.map(lambda v: (v, True))] * weight, invalid.map(lambda v: (v, False)))


_FORMAT = _argument(
    st.sampled_from(sorted(FORMATS)),
    st.sampled_from(["tflite", "", "STABLEHLO", 3, None, ["onnx"], {"onnx": 1}]),
)
_PROGRAM = _argument(
    st.sampled_from(["sequence", "step"]),
    st.sampled_from(["pair", "loop", "", 0, None, ("step",)]),
)
_READS = _argument(
    st.sampled_from([None, Tokens(VOCAB)]),
    st.sampled_from([Tokens(VOCAB + 1), Features(D_MODEL), "tokens", VOCAB, Tokens]),
)
_DT = _argument(st.booleans(), st.sampled_from(["yes", 1, 0, None, np.bool_(True)]), weight=1)
_DESCRIPTION = _argument(st.text(max_size=20), st.sampled_from([3, None, b"text", ["a"]]))
_OWN = list(OWN)
_METADATA = _argument(
    st.none()
    | st.dictionaries(
        st.text(min_size=1, max_size=6).filter(lambda k: k not in _OWN), _JSON, max_size=3
    ),
    st.one_of(
        st.sampled_from([[("task", 1)], "task", 3]),
        st.sampled_from(["sha256", "format", "checked", "notes", "artifact"]).map(
            lambda k: {k: "mine"}
        ),
        _NOT_JSON.map(lambda v: {"task": v}),
        st.sampled_from([{1: "a"}, {None: "a"}]),
    ),
)
_STATE = _argument(st.just("the model's"), st.sampled_from([None, 3, {"state": 1}]), weight=4)

#: How a message names each argument.
_NAMES = {
    "format": ("`format`",),
    "program": ("`program`", "program="),
    "reads": ("`reads`",),
    "dt": ("`dt`",),
    "description": ("`description`",),
    "metadata": ("`metadata",),
    "state": ("`state`",),
}
_traced: dict = {}


@BOUNDED
@given(_FORMAT, _PROGRAM, _READS, _DT, _DESCRIPTION, _METADATA, _STATE)
def test_export_arguments(fmt, program, reads, dt, description, metadata, state):
    drawn = dict(
        format=fmt, program=program, reads=reads, dt=dt, description=description,
        metadata=metadata, state=state,
    )  # fmt: skip
    wrong = [n for name, (_, valid) in drawn.items() if not valid for n in _NAMES[name]]
    model, model_state = _model()
    kwargs = {name: value for name, (value, _) in drawn.items() if name != "state"}
    given_state = model_state if state[1] else state[0]
    key = (fmt[0], program[0], reads[0], dt[0]) if not wrong else None
    if key is not None and repr(key) in _traced:
        return  # traced once already: the same program
    with mock.patch.object(_export, "FORMATS", CHEAP):
        try:
            exported = export(model, given_state, **kwargs)
        except ERRORS as e:
            assert wrong, f"valid arguments refused: {e}"
            _one_line(e, *wrong)
            return
    assert not wrong, f"{wrong} accepted"
    _traced[repr(key)] = True
    info = exported.manifest
    assert info["format"] == fmt[0] and info["program"] == program[0]
    assert info["sha256"] == hashlib.sha256(exported.data).hexdigest()
    assert {k: info[k] for k in (metadata[0] or {})} == json.loads(json.dumps(metadata[0] or {}))
    names = [i["name"] for i in info["inputs"]]
    first = {"sequence": ["x", "length", "dt"], "step": ["x_t", "dt_t"]}[program[0]]
    expected = first if dt[0] else first[:-1]
    assert names[: len(expected)] == expected and ("dt" in names or "dt_t" in names) == dt[0]


@BOUNDED
@given(
    st.one_of(
        st.integers(-3, 2**70), st.sampled_from([1.5, "7", None, True, math.inf, np.int64(4)])
    ),
    st.sampled_from(
        ["float32", "bfloat16", "int8", "complex64", "nope", None, object(), np.float16]
    ),
)
def test_reads_records(size, dtype):
    integer = not isinstance(size, bool) and isinstance(size, int | np.integer)
    positive = integer and 1 <= size < 2**31  # ids and sizes are int32
    for make, names in (
        (lambda: Tokens(size), ["`vocab_size`"]),  # pyright: ignore[reportArgumentType]
        (lambda: Features(size, dtype), ["`size`", "`dtype`"]),  # pyright: ignore[reportArgumentType]
    ):
        try:
            reads = make()
        except (ValueError, TypeError) as e:
            # The suite's import hook names the parameter, in several lines; the library's
            # own check (where the hook is not) in one.
            if not str(e).startswith("Type-check error"):
                _one_line(e, *names)
            continue
        assert positive and isinstance(reads.position()[0], tuple)
        if isinstance(reads, Features):
            assert reads.position()[1] in (np.float32, np.float16, np.int8, jax.numpy.bfloat16)


_NAME = st.one_of(
    st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=12),
    st.integers(200, 300).map(lambda n: "m" * n),
    st.sampled_from(["", ".", "..", "a/", "a\0b", "sub/model.onnx", "é" * 130, ".hidden"]),
)
_BEFORE = st.sampled_from(["nothing", "ours", "foreign", "folder", "link"])


@functools.cache
def _exported():
    model, state = _model()
    with mock.patch.object(_export, "FORMATS", CHEAP):
        return export(model, state, program="step")


@BOUNDED
@given(_NAME, _BEFORE, st.one_of(st.booleans(), st.sampled_from([None, "no", 1])), st.booleans())
def test_write_arguments(name, before, overwrite, real):
    exported = _exported() if real else {"data": b"x"}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "out" / name if "\0" not in name else folder + "/out/" + name
        target = Path(folder) / "out" / "model"
        if before != "nothing" and "\0" not in name and name not in ("", ".", ".."):
            _place(before, Path(path), target)
        try:
            written = write(exported, path, overwrite=overwrite)
        except ERRORS as e:
            _one_line(
                e,
                "`exported`",
                "`path`",
                "`overwrite`",
                str(Path(path).name)[:50] or "`path`",
                folder,
            )
            return
        assert real and isinstance(overwrite, bool)
        manifest = json.loads(written.with_name(written.name + ".json").read_text())
        assert manifest["artifact"] == written.name
        assert manifest["sha256"] == hashlib.sha256(written.read_bytes()).hexdigest()
        assert not [p for p in os.listdir(written.parent) if p.endswith((".tmp", ".lock"))]


def _place(before: str, path: Path, target: Path) -> None:
    """What is at `path` before the write."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if before == "ours":
            eqx_lru.export.write(_exported(), path)
        elif before == "foreign":
            path.write_bytes(b"another tool's")
        elif before == "folder":
            path.mkdir()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"keep")
            path.symlink_to(target)
    except (OSError, ExportError):
        pass  # a name the file system refuses: the write meets it as it is

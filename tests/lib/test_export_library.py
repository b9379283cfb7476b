"""`eqx_lru.export`: a model built by hand from `LRUBlock`s, out of JAX.

The model (`Tagger`) is a module of one's own, not an `LRUModel` nor a trainer run: an
embedding, a complex-LRU block with batch norm (non-trivial running statistics) and a
real-LRU block with layer norm, and a linear head per position; it follows the library's
contract (call, `init_carry`, `step`). It is exported in both formats and both programs,
and each artifact runs in a fresh process that does not import eqx_lru, reading only the
artifact and its manifest: equal to JAX within 1e-5 (StableHLO at two batch sizes and
lengths: the dimensions are symbolic). A format of one's own is one `Format` record.
"""

import functools
import json
import subprocess
import sys
import textwrap
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import FORMATS, export_formats

import eqx_lru
from eqx_lru.export import ExportError, Format, Tokens

VOCAB, D_MODEL, D_STATE, OUT = 11, 6, 5, 4


class Tagger(eqx.Module):
    """Token ids -> embedding -> two `LRUBlock`s -> a linear head at every position."""

    embedding: eqx.nn.Embedding
    blocks: tuple[eqx_lru.LRUBlock, ...]
    head: eqx.nn.Linear

    def __init__(self, *, key):
        k_embed, k_first, k_second, k_head = jax.random.split(key, 4)
        self.embedding = eqx.nn.Embedding(VOCAB, D_MODEL, key=k_embed)
        self.blocks = (
            eqx_lru.LRUBlock(D_MODEL, D_STATE, core="complex", norm="batch", key=k_first),
            eqx_lru.LRUBlock(D_MODEL, D_STATE, core="real", norm="layer", key=k_second),
        )
        self.head = eqx.nn.Linear(D_MODEL, OUT, key=k_head)

    def __call__(self, x, state, *, length=None, inference=None, key=None):
        h = jax.vmap(self.embedding)(x)
        for block in self.blocks:
            h, state = block(h, state, length=length, inference=inference)
        mask = eqx_lru.valid_mask(length, x.shape[0])
        return eqx_lru.where_valid(mask, jax.vmap(self.head)(h)), state

    def init_carry(self):
        return tuple(block.init_carry() for block in self.blocks)

    def step(self, carry, x_t, state):
        h, new = self.embedding(x_t), []
        for block, block_carry in zip(self.blocks, carry, strict=True):
            block_carry, h = block.step(block_carry, h, state)
            new.append(block_carry)
        return tuple(new), self.head(h)


@pytest.fixture(scope="module")
def tagger():
    model, state = eqx.nn.make_with_state(Tagger)(key=jax.random.PRNGKey(4))
    rng = np.random.default_rng(0)
    stats = (
        jnp.asarray(5, jnp.int32),
        jnp.asarray(rng.normal(size=D_MODEL), jnp.float32),
        jnp.asarray(rng.uniform(0.5, 2.0, D_MODEL), jnp.float32),
    )
    return model, state.set(cast(eqx_lru.MaskedBatchNorm, model.blocks[0].norm).state_index, stats)


@eqx.filter_jit
def _call(model, state, x, length):
    return jax.vmap(lambda x, n: model(x, state, length=n, inference=True)[0])(x, length)


def _sequence(model, state, x, length):
    with jax.default_matmul_precision("highest"):
        return np.asarray(_call(model, state, x, length))


def _stream(model, state, x):
    def one(x):
        return jax.lax.scan(lambda c, t: model.step(c, t, state), model.init_carry(), x)

    with jax.default_matmul_precision("highest"):
        carry, ys = jax.jit(jax.vmap(one))(x)
    return np.asarray(ys), [np.asarray(c) for c in jax.tree_util.tree_leaves(carry)]


def _tokens(shape, seed):
    return np.random.default_rng(seed).integers(0, VOCAB, shape).astype(np.int32)


_RUN = textwrap.dedent(
    """
    import json, sys
    import numpy as np

    loader, artifact, inputs, destination = sys.argv[1:5]
    with open(artifact + ".json") as f:
        manifest = json.load(f)
    data = np.load(inputs)
    scope = {}
    with open(loader) as f:  # the format's loader (conformance.FORMATS): defines load()
        exec(f.read(), scope)
    with open(artifact, "rb") as f:
        run = scope["load"](f.read())

    def zeros(batch):  # the carry at the start of a stream, from the manifest alone
        return [np.zeros([batch if d == "batch" else d for d in c["shape"]], c["dtype"])
                for c in manifest["carry"] or []]

    results = {}
    if manifest["program"] == "step":
        stream = data["stream"]
        carry, ys = zeros(stream.shape[0]), []
        for t in range(stream.shape[1]):
            y, *carry = run(stream[:, t], *carry)
            ys.append(y)
        results["stream"] = np.stack(ys, axis=1)
        results.update({f"carry{i}": c for i, c in enumerate(carry)})
    else:
        for k in ("a", "b"):
            x, length = data["x_" + k], data["length_" + k]
            out, *carry = run(x, length, *zeros(x.shape[0]))
            results["out_" + k] = out
            results.update({f"carry_{k}{i}": c for i, c in enumerate(carry)})
    assert "eqx_lru" not in sys.modules, "the artifact needs no eqx_lru"
    np.savez(destination, **results)
    """
)


def _run_elsewhere(fmt, artifact, tmp_path, **inputs):
    """The artifact's outputs computed in a fresh process that imports JAX or onnxruntime
    and NumPy only (and never eqx_lru), reading only the artifact and its manifest."""
    np.savez(tmp_path / "in.npz", **inputs)
    (tmp_path / "run.py").write_text(_RUN)
    (tmp_path / "loader.py").write_text(FORMATS[fmt].loader)
    command = [sys.executable, str(tmp_path / "run.py"), str(tmp_path / "loader.py"), str(artifact)]
    subprocess.run(
        [*command, str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
        check=True,
        cwd=tmp_path,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"},
    )
    return np.load(tmp_path / "out.npz")


def _inputs():
    x_a, length_a = _tokens((3, 17), 1), np.array([17, 9, 1], np.int32)
    x_b, length_b = _tokens((2, 26), 2), np.array([4, 26], np.int32)
    return dict(x_a=x_a, length_a=length_a, x_b=x_b, length_b=length_b)


def _check(got, model, state, inputs, stream):
    for k in ("a", "b"):
        x, length = inputs["x_" + k], inputs["length_" + k]
        expected = _sequence(model, state, x, length)
        assert got["out_" + k].shape == expected.shape == (*x.shape, OUT)
        np.testing.assert_allclose(got["out_" + k], expected, rtol=1e-5, atol=1e-5)
    ys, _ = _stream(model, state, stream)
    np.testing.assert_allclose(got["stream"], ys, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", export_formats())
def test_hand_built_model_runs_without_eqx_lru(fmt, tagger, tmp_path):
    """Both programs of the hand-built model in `fmt`, run where eqx_lru is not imported."""
    for module in FORMATS[fmt].needs:
        pytest.importorskip(module)
    model, state = tagger
    inputs, stream = _inputs(), _tokens((2, 9), 3)
    got = {}
    for program in ("sequence", "step"):
        exported = eqx_lru.export.export(
            model, state, format=fmt, program=program, reads=Tokens(VOCAB)
        )
        artifact = eqx_lru.export.write(exported, tmp_path / program / f"tagger.{fmt}")
        folder = artifact.parent
        got.update(_run_elsewhere(fmt, artifact, folder, **inputs, stream=stream))
    _check(got, model, state, inputs, stream)
    if got.get("carry_b0") is not None:  # a loop over the step (ONNX) returns the carry
        # after the last position, in the form it computes in
        form = exported.manifest["exported_form"]
        stepped = eqx_lru.to_real(model) if form == "real" else model
        _, carry = _stream(stepped, state, inputs["x_b"][1:])  # all 26 valid
        for i, c in enumerate(carry):
            np.testing.assert_allclose(got[f"carry_b{i}"][1:], c, rtol=1e-5, atol=1e-5)


def test_manifest_describes_the_program(tagger, tmp_path):
    model, state = tagger
    exported = eqx_lru.export.export(
        model, state, program="step", reads=Tokens(VOCAB), metadata={"trained_on": "toy"}
    )
    artifact = eqx_lru.export.write(exported, tmp_path / "step.stablehlo")
    manifest = json.loads((tmp_path / "step.stablehlo.json").read_text())
    assert manifest["artifact"] == "step.stablehlo" and manifest["program"] == "step"
    assert manifest["bytes"] == artifact.stat().st_size == len(exported.data)
    assert manifest["inputs"][0] == {"name": "x_t", "shape": ["batch"], "dtype": "int32"}
    # The complex block keeps a complex (N,) state, the real one (N, 2) real.
    assert [(c["name"], c["shape"], c["dtype"]) for c in manifest["carry"]] == [
        ("carry.0", ["batch", D_STATE], "complex64"),
        ("carry.1", ["batch", D_STATE, 2], "float32"),
    ]
    assert manifest["outputs"][0] == {"name": "y_t", "shape": ["batch", OUT], "dtype": "float32"}
    assert manifest["outputs"][1]["name"] == "next_carry.0"
    assert manifest["vocab_size"] == VOCAB and manifest["in_features"] is None
    assert manifest["exported_form"] == "complex" and manifest["trained_on"] == "toy"
    assert manifest["eqx_lru"] == eqx_lru.__version__ and manifest["jax"] == jax.__version__


def test_manifest_of_a_model_names_classes_and_the_checks():
    """The library's checks of `length` and token ids are skipped in an exported program
    (they raise), and the program checks them itself (NaN rows, tests/lib/
    test_export_invalid_rows.py): `checked`, not `unchecked` (which listed them before)."""
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, 3, D_MODEL, D_STATE, 1, encoder="embedding", key=jax.random.PRNGKey(0)
    )
    manifest = eqx_lru.export.export(model, state).manifest
    assert manifest["vocab_size"] == VOCAB and manifest["classes"] == 3
    assert manifest["inputs"][0]["shape"] == ["batch", "length"]
    assert [c["check"] for c in manifest["checked"]] == ["length", "token_ids"]
    assert manifest["checked"][1]["rule"] == f"0 <= x < {VOCAB} at every position before length"
    assert manifest["unchecked"] == []
    assert "gets NaN in every floating-point output" in manifest["notes"]


def _stablehlo_text(program, description):
    """A format of one's own: `jax.export`'s StableHLO as MLIR text."""
    del description
    specs = eqx_lru.export.symbolic_specs(program)
    return jax.export.export(jax.jit(program.fn))(*specs).mlir_module().encode()


MLIR = Format(
    name="mlir-text",
    suffix=".mlir",
    real=True,
    programs={"step": eqx_lru.export.step_program},
    serialise=_stablehlo_text,
)


def test_a_new_format_is_one_record(tagger, tmp_path):
    model, state = tagger
    exported = eqx_lru.export.export(model, state, format=MLIR, program="step", reads=Tokens(VOCAB))
    artifact = eqx_lru.export.write(exported, tmp_path / ("step" + MLIR.suffix))
    text = artifact.read_text()
    # `real=True`: the complex block was converted, no complex number is left.
    assert "stablehlo" in text and "complex" not in text
    manifest = json.loads((tmp_path / "step.mlir.json").read_text())
    assert manifest["format"] == "mlir-text" and manifest["exported_form"] == "real"
    assert manifest["carry"][0]["shape"] == ["batch", D_STATE, 2]
    with pytest.raises(ExportError, match="`program` must be one of step for format 'mlir-text'"):
        eqx_lru.export.export(model, state, format=MLIR)


def test_refusals_say_what_to_do(tagger):
    model, state = tagger
    with pytest.raises(ExportError, match="`format` must be one of stablehlo, onnx"):
        eqx_lru.export.export(model, state, format="tflite", reads=Tokens(VOCAB))
    with pytest.raises(ExportError, match=r"cannot tell what Tagger reads: pass `reads="):
        eqx_lru.export.export(model, state)
    bidirectional = eqx_lru.LRUBlock(D_MODEL, D_STATE, bidirectional=True, key=jax.random.key(0))
    with pytest.raises(ExportError, match="needs a causal model"):
        eqx_lru.export.export(bidirectional, eqx.nn.State(bidirectional), program="step")
    with pytest.raises(ExportError, match="program='pair' exports a two-tower"):
        eqx_lru.export.export(model, state, program="pair", reads=Tokens(VOCAB))


def test_a_core_without_real_form_is_refused_for_onnx():
    """`DiagonalRNN` (the ablation's complex diagonal RNN) has no real form: ONNX refuses
    it with the reason; StableHLO keeps complex numbers and exports it."""
    make_core = functools.partial(eqx_lru.ablation.DiagonalRNN, method="sequential")
    block = eqx_lru.LRUBlock(D_MODEL, D_STATE, core=make_core, norm="layer", key=jax.random.key(1))
    with pytest.raises(ExportError, match="DiagonalRNN keeps a complex state with no real form"):
        eqx_lru.export.export(block, format="onnx", program="step")
    exported = eqx_lru.export.export(block, program="step")
    assert exported.manifest["exported_form"] == "complex"
    assert exported.manifest["in_features"] == D_MODEL


@pytest.mark.slow
def test_any_scan_method_exports_with_a_symbolic_length():
    """`lax.associative_scan` (and the Pallas kernel) cannot take a symbolic length: the
    export scans sequentially, the same function; the model itself is left as it was."""
    make_core = functools.partial(eqx_lru.RealLRU, method="associative")
    block = functools.partial(eqx_lru.LRUBlock, core=make_core)
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        D_MODEL, 3, D_MODEL, D_STATE, 1, block=block, key=jax.random.key(2)
    )
    exported = eqx_lru.export.export(model, state)
    assert isinstance(
        cast(eqx_lru.RealLRU, cast(eqx_lru.LRUBlock, model.blocks[0]).core).method,
        eqx_lru.Associative,
    )
    assert exported.manifest["in_features"] == D_MODEL and exported.manifest["classes"] == 3
    x = np.random.default_rng(0).normal(size=(2, 9, D_MODEL)).astype(np.float32)
    length = np.array([9, 4], np.int32)
    got = jax.export.deserialize(bytearray(exported.data)).call(x, length)[0]
    np.testing.assert_allclose(got, _sequence(model, state, x, length), rtol=1e-5, atol=1e-6)

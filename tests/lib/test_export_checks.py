"""Plain `jax.export` of functions that call `LRUModel`/`LRUBlock` with `length=` and
`segment_ids=`, with symbolic or concrete shapes, and no environment variable.

The run-time checks (valid lengths, token ids, the number of packed sequences) used
`eqx.error_if`, whose host callback `jax.export` cannot lower with symbolic shapes
(`RuntimeError: std::bad_cast`) nor serialise with concrete ones (`NotImplementedError:
serialization of host_callbacks is not yet implemented`). They are `runtime_check`s now:
skipped in an exported program (which computes as if the input were valid), performed
everywhere else — including under `jax.jit` after an export in the same process.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru
from eqx_lru._runtime_check import skipped_checks

VOCAB, D_MODEL, D_STATE, CLASSES, SEGMENTS = 13, 6, 5, 3, 2


@pytest.fixture(scope="module")
def model():
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, CLASSES, D_MODEL, D_STATE, 2, encoder="embedding", key=jax.random.PRNGKey(0)
    )


@pytest.fixture(scope="module")
def block():
    return eqx.nn.make_with_state(eqx_lru.LRUBlock)(D_MODEL, D_STATE, key=jax.random.PRNGKey(1))


def _model_fn(model, state):
    def one(x, length, segment_ids):
        packed = dict(segment_ids=segment_ids, num_segments=SEGMENTS)
        return model(x, state, length=length, inference=True, **packed)[0]

    return jax.vmap(one)


def _block_fn(block, state):
    def one(x, length, segment_ids):
        return block(x, state, length=length, segment_ids=segment_ids, inference=True)[0]

    return jax.vmap(one)


def _inputs(kind, batch, size, seed):
    rng = np.random.default_rng(seed)
    if kind == "model":
        x = rng.integers(0, VOCAB, (batch, size)).astype(np.int32)
    else:
        x = rng.normal(size=(batch, size, D_MODEL)).astype(np.float32)
    length = rng.integers(1, size + 1, batch).astype(np.int32)
    length[0] = size
    segment_ids = (np.arange(size) >= size // 2).astype(np.int32)[None].repeat(batch, 0)
    return x, length, segment_ids


def _specs(kind, shape):
    batch, size = shape
    x = (batch, size) if kind == "model" else (batch, size, D_MODEL)
    dtype = jnp.int32 if kind == "model" else jnp.float32
    return (
        jax.ShapeDtypeStruct(x, dtype),
        jax.ShapeDtypeStruct((batch,), jnp.int32),
        jax.ShapeDtypeStruct((batch, size), jnp.int32),
    )


@pytest.mark.parametrize(
    "kind, symbolic",
    [
        pytest.param("model", True, id="model-symbolic", marks=pytest.mark.slow),
        pytest.param("model", False, id="model-concrete"),
        pytest.param("block", True, id="block-symbolic"),
        pytest.param("block", False, id="block-concrete"),
    ],
)
def test_plain_jax_export_with_length_and_segment_ids(kind, symbolic, model, block):
    """Exported, serialised, read back and called: equal to the JAX call (the symbolic
    program at two other batch sizes and lengths)."""
    module, state = model if kind == "model" else block
    fn = (_model_fn if kind == "model" else _block_fn)(module, state)
    shape = jax.export.symbolic_shape("batch, length") if symbolic else (3, 11)
    exported = jax.export.export(jax.jit(fn))(*_specs(kind, shape))
    restored = jax.export.deserialize(exported.serialize())
    for batch, size in [(2, 7), (3, 12)] if symbolic else [(3, 11)]:
        args = _inputs(kind, batch, size, seed=size)
        with jax.default_matmul_precision("highest"):
            expected = np.asarray(jax.jit(fn)(*args))
            got = np.asarray(restored.call(*args))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_checks_are_skipped_in_the_export_and_kept_elsewhere(model):
    """The exported program names the checks it does not perform and runs an invalid
    length without an error; `jax.jit` of the same function still raises afterwards."""
    module, state = model
    fn = _model_fn(module, state)
    specs = _specs("model", jax.export.symbolic_shape("batch, length"))
    exported = jax.export.export(jax.jit(fn))(*specs)
    checks = skipped_checks(jax.make_jaxpr(fn)(*_specs("model", (2, 9))))
    assert {c["check"] for c in checks} == {"token_ids", "length", "num_segments"}, checks
    x, length, segment_ids = _inputs("model", 2, 9, seed=0)
    bad = np.array([9, 10], np.int32)  # 10 > 9 positions
    assert np.all(np.isfinite(np.asarray(exported.call(x, bad, segment_ids))))
    with pytest.raises(Exception, match="`length` must be between 1 and the padded length 9"):
        jax.block_until_ready(jax.jit(fn)(x, bad, segment_ids))
    with pytest.raises(Exception, match="`length` must be between 1 and the padded length 9"):
        eqx.filter_jit(fn)(x, bad, segment_ids)
    with pytest.raises(Exception, match=r"Token ids must be in \[0, 13\)"):
        jax.block_until_ready(jax.jit(fn)(jnp.asarray(x).at[0, 0].set(VOCAB), length, segment_ids))


def test_symbolic_export_with_the_gpu_default_method(monkeypatch, block):
    """On GPUs `"auto"` resolves to `Associative()`, whose `lax.associative_scan` cannot
    take a symbolic length ("associative scan over axis of non-constant size"): with a
    symbolic length it scans sequentially, the same function. (Resolved as on a GPU here.)"""
    monkeypatch.setattr(eqx_lru.Auto, "resolve", lambda self: eqx_lru.Associative())
    module, state = block
    assert isinstance(module.core.method, eqx_lru.Auto)
    fn = _block_fn(module, state)
    exported = jax.export.export(jax.jit(fn))(
        *_specs("block", jax.export.symbolic_shape("batch, length"))
    )
    args = _inputs("block", 2, 7, seed=3)
    with jax.default_matmul_precision("highest"):
        expected = np.asarray(jax.jit(fn)(*args))  # concrete: the associative scan
    np.testing.assert_allclose(exported.call(*args), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("symbolic", [True, False], ids=["symbolic", "concrete"])
def test_plain_jax_export_of_a_core_with_dt(symbolic):
    """The check of `dt=` (positive, finite) is a `runtime_check` too: it used an
    `eqx.error_if`, which `jax.export` cannot serialise."""
    layer = eqx_lru.ComplexLRU(D_MODEL, D_STATE, key=jax.random.key(5))
    fn = jax.vmap(lambda u, dt: layer(u, dt=dt))
    batch, size = jax.export.symbolic_shape("batch, length") if symbolic else (2, 8)
    specs = (
        jax.ShapeDtypeStruct((batch, size, D_MODEL), jnp.float32),
        jax.ShapeDtypeStruct((batch, size), jnp.float32),
    )
    restored = jax.export.deserialize(jax.export.export(jax.jit(fn))(*specs).serialize())
    rng = np.random.default_rng(0)
    u = rng.normal(size=(2, 8, D_MODEL)).astype(np.float32)
    dt = rng.uniform(0.5, 2.0, (2, 8)).astype(np.float32)
    with jax.default_matmul_precision("highest"):
        np.testing.assert_allclose(restored.call(u, dt), jax.jit(fn)(u, dt), rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match="`dt` must be positive and finite"):
        jax.block_until_ready(jax.jit(fn)(u, -dt))

"""The jaxpr -> ONNX translator of `eqx_lru.export` (`_onnx.py`), primitive by primitive,
against onnxruntime: small functions with a symbolic batch, their ONNX graphs run on two
batch sizes equal JAX's outputs. Skipped where the `export` extra (onnx, onnxruntime) is
not installed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from eqx_lru._runtime_check import runtime_check  # noqa: E402
from eqx_lru.export import _onnx  # noqa: E402

TABLE = np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32)
W = np.random.default_rng(1).normal(size=(3, 5)).astype(np.float32)


def _lookup(ids):  # gather: an embedding lookup, out-of-range ids clamped as JAX does
    return (jnp.asarray(TABLE)[ids],)


def _dense(x):  # dot_general, broadcasting, integer_pow, rsqrt, tanh, reductions
    h = jnp.tanh(x @ jnp.asarray(W)) ** 2
    return (h * jax.lax.rsqrt(1.0 + jnp.sum(h, axis=-1, keepdims=True)), jnp.max(h, axis=-1))


def _recurrence(x):  # scan -> Loop: h_t = 0.9 h_{t-1} + x_t over the positions (axis 1)
    def body(h, x_t):
        h = 0.9 * h + x_t
        return h, 2.0 * h

    h, ys = jax.lax.scan(body, jnp.zeros_like(x[:, 0]), jnp.swapaxes(x, 0, 1))
    return h, jnp.swapaxes(ys, 0, 1)


def _checked(x):  # a run-time check: the value passes through, the predicate is dropped
    return (runtime_check(x, x > 1e9, "too large", check="demo") + 1.0,)


def _select(x):  # select_n with a boolean predicate, concatenate, split
    y = jnp.where(x > 0, x, -2.0 * x)
    a, b = jnp.split(jnp.concatenate([y, x], axis=-1), 2, axis=-1)
    return (a - b,)


def _accurate(x):  # expm1, log1p: no cancellation near 0 (ONNX has neither)
    return (jnp.expm1(x), jnp.log1p(x))


def _finite(x):  # is_finite: neither NaN nor ±inf (ONNX has no IsFinite)
    return (jnp.isfinite(x),)


W3 = np.random.default_rng(2).normal(size=(3, 2, 4)).astype(np.float32)


def _layouts(x):  # x (batch, 5, 3): products with constants as MatMul, layout changes
    rows = jax.vmap(lambda v: jnp.asarray(W).T @ v.T)(x)  # constant lhs: (batch, 5, 5) via .T
    cube = jnp.einsum("bij,jkl->bikl", x, jnp.asarray(W3))  # constant with 2 free axes
    left = jnp.einsum("jkl,bij->klbi", jnp.asarray(W3), x)  # constant lhs, transposed back
    t = jnp.swapaxes(x, 1, 2)  # (batch, 3, 5): moved past tanh, slice, concat, squeeze
    u = jnp.tanh(t) * jnp.arange(5.0, dtype=jnp.float32) + t
    both = jnp.concatenate([t, jax.lax.slice_in_dim(u, 1, 3, axis=1)], axis=1)
    first = jnp.squeeze(jax.lax.slice_in_dim(u, 0, 1, axis=1), 1)
    corner = jax.lax.slice_in_dim(jax.lax.slice_in_dim(x, 0, 1, axis=1), 0, 1, axis=2)
    nan = jnp.where(corner > 0, jnp.nan, x)  # a broadcast predicate, not expanded
    return rows, cube, left, both, first, nan, jnp.swapaxes(u, 1, 2)


CASES = {
    "lookup": (_lookup, lambda b: np.array([[0, 6, 9, -2]] * b, np.int32), (4,)),
    "dense": (_dense, lambda b: np.linspace(-1, 1, b * 3, dtype=np.float32).reshape(b, 3), (3,)),
    "recurrence": (
        _recurrence,
        lambda b: np.arange(b * 12, dtype=np.float32).reshape(b, 6, 2),
        (6, 2),
    ),
    "checked": (_checked, lambda b: np.arange(b * 2, dtype=np.float32).reshape(b, 2), (2,)),
    "select": (_select, lambda b: np.linspace(-2, 2, b * 4, dtype=np.float32).reshape(b, 4), (4,)),
    "accurate": (
        _accurate,
        lambda b: np.array([[1e-7, -3e-6, 2e-4, 0.5, -0.9, 3.0]] * b, np.float32),
        (6,),
    ),
    "layouts": (
        _layouts,
        lambda b: np.linspace(-2, 2, b * 15, dtype=np.float32).reshape(b, 5, 3),
        (5, 3),
    ),
    "finite": (
        _finite,
        lambda b: np.array([[np.nan, np.inf, -np.inf, 0.0, -2.5, 3e38]] * b, np.float32),
        (6,),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_translation_matches_jax(name):
    fn, make, tail = CASES[name]
    (batch,) = jax.export.symbolic_shape("batch")
    example = make(1)
    closed = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct((batch, *tail), example.dtype))
    outputs = [f"out{i}" for i in range(len(closed.out_avals))]
    model = _onnx.to_onnx(closed, ["x"], outputs, batch=batch)
    ops = [n.op_type for n in model.graph.node]
    if name == "checked":
        assert not {"Greater", "ReduceMax"} & set(ops)
    if name == "layouts":  # no Einsum, no Expand; transposes only where an output needs one
        assert not {"Einsum", "Expand"} & set(ops), ops
        assert ops.count("Transpose") <= 4, ops
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for b in (1, 3):
        x = make(b)
        got = session.run(None, {"x": x})
        for g, want in zip(got, fn(x), strict=True):
            np.testing.assert_allclose(g, np.asarray(want), rtol=1e-6, atol=1e-6)


def test_complex_values_and_unknown_primitives_are_refused():
    closed = jax.make_jaxpr(lambda x: (x.astype(jnp.complex64) * 2,))(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="real arithmetic only"):
        _onnx.to_onnx(closed, ["x"], ["y"])
    closed = jax.make_jaxpr(lambda x: (jnp.sort(x),))(np.ones(3, np.float32))
    with pytest.raises(NotImplementedError, match="no translation for the JAX primitive 'sort'"):
        _onnx.to_onnx(closed, ["x"], ["y"])


def test_symbolic_length_shapes_and_values():
    """Dimensions other than the batch (the length of a whole-sequence program) are read
    from the input's shape: an iota and a broadcast of that size, the size as a value, and
    `reduce_or` (what the exported programs' input checks use)."""

    def fn(x):
        size = x.shape[1]
        position = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
        bad = jnp.any(x > position, axis=1)
        return (jnp.where(bad[:, None], jnp.nan, (x + size).astype(jnp.float32)),)

    batch, length = jax.export.symbolic_shape("batch, length")
    closed = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct((batch, length), np.int32))
    model = _onnx.to_onnx(closed, ["x"], ["y"], batch=batch)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for b, n in ((1, 4), (3, 7)):
        x = np.random.default_rng(n).integers(0, n + 1, (b, n)).astype(np.int32)
        x[0] = np.arange(n)  # a row with no position above its index: finite
        (got,) = session.run(None, {"x": x})
        np.testing.assert_array_equal(got, np.asarray(fn(x)[0]))

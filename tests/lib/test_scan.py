"""`linear_recurrence`: every method × algebra × shared/per-step × reverse × initial state
against a plain NumPy loop, the method objects, and input validation. (Gradients of every
method against autodiff of a loop: tests/lib/test_scan_methods.py.)"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import recurrence_loop

import eqx_lru

LENGTH, STATE = 9, (3, 4)  # distinct sizes: a swapped axis cannot hide
METHODS = ("sequential", "associative")


def _problem(algebra_name, shared, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if algebra_name == "block":
        # Random general (non-commuting, non-rotation) 2x2 blocks, scaled to be stable.
        state = STATE + (2,)
        a_shape = state + (2,)
        a = rng.normal(size=a_shape if shared else (LENGTH,) + a_shape) * 0.5
        b = rng.normal(size=(LENGTH,) + state)
        h0 = rng.normal(size=state)
    else:
        shape = STATE if shared else (LENGTH,) + STATE
        if np.issubdtype(dtype, np.complexfloating):
            a = (rng.normal(size=shape) + 1j * rng.normal(size=shape)) * 0.5
            b = rng.normal(size=(LENGTH,) + STATE) + 1j * rng.normal(size=(LENGTH,) + STATE)
            h0 = rng.normal(size=STATE) + 1j * rng.normal(size=STATE)
        else:
            a = rng.normal(size=shape) * 0.7
            b = rng.normal(size=(LENGTH,) + STATE)
            h0 = rng.normal(size=STATE)
    return a.astype(dtype), b.astype(dtype), h0.astype(dtype)


ALGEBRAS = {"diag": eqx_lru.Diagonal(), "block": eqx_lru.Block2x2()}
CASES = [
    (alg, dtype)
    for alg, dtype in [("diag", np.float64), ("diag", np.complex128), ("block", np.float64)]
]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("alg,dtype", CASES)
@pytest.mark.parametrize("shared,reverse,with_h0", list(itertools.product([True, False], repeat=3)))
def test_matches_loop(method, alg, dtype, shared, reverse, with_h0):
    with jax.enable_x64(True):
        a, b, h0 = _problem(alg, shared, dtype)
        h = eqx_lru.linear_recurrence(
            jnp.asarray(a),
            jnp.asarray(b),
            algebra=ALGEBRAS[alg],
            initial_state=jnp.asarray(h0) if with_h0 else None,
            reverse=reverse,
            method=method,
        )
        expected = recurrence_loop(
            a, b, block=alg == "block", shared=shared, reverse=reverse, h0=h0 if with_h0 else None
        )
        assert h.shape == b.shape and h.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(h), expected, rtol=1e-12, atol=1e-12)


def test_block_order_matters():
    """Block2x2 composition is `later @ earlier`: the transposed order gives a different
    answer on non-commuting blocks, so this test would catch a swapped operator."""
    with jax.enable_x64(True):
        a, b, _ = _problem("block", False, np.float64, seed=3)
        expected = recurrence_loop(a, b, block=True, shared=False)
        wrong = recurrence_loop(np.swapaxes(a, -1, -2), b, block=True, shared=False)
        assert np.abs(expected - wrong).max() > 1e-2
        for method in METHODS:
            h = eqx_lru.linear_recurrence(
                jnp.asarray(a), jnp.asarray(b), algebra=eqx_lru.Block2x2(), method=method
            )
            np.testing.assert_allclose(np.asarray(h), expected, rtol=1e-12, atol=1e-12)


# What `"auto"` resolves to per backend, as measured (see `eqx_lru.Auto`).
AUTO_CHOICE = {
    "cpu": eqx_lru.Sequential(),
    "gpu": eqx_lru.Associative(),
    "tpu": eqx_lru.Associative(),
}


def test_auto_method_and_vmap(monkeypatch):
    a, b = (jnp.asarray(x) for x in _problem("diag", True, np.float32)[:2])
    batched = jax.vmap(lambda b: eqx_lru.linear_recurrence(a, b, algebra=eqx_lru.Diagonal()))
    out = batched(jnp.stack([b, 2 * b]))
    np.testing.assert_allclose(out[1], 2 * out[0], rtol=1e-5)
    assert eqx_lru.default_method() == AUTO_CHOICE[jax.default_backend()]
    for backend, choice in AUTO_CHOICE.items():
        monkeypatch.setattr(jax, "default_backend", lambda backend=backend: backend)
        assert eqx_lru.Auto().resolve() == choice, backend


def test_scan_method_shortcuts_and_errors():
    assert eqx_lru.scan_method("sequential") == eqx_lru.Sequential(unroll=1)
    assert eqx_lru.scan_method("associative") == eqx_lru.Associative()
    assert eqx_lru.scan_method("auto") == eqx_lru.Auto()
    method = eqx_lru.Sequential(unroll=4)
    assert eqx_lru.scan_method(method) is method
    assert hash(method) == hash(eqx_lru.Sequential(unroll=4))  # a static argument of jit
    with pytest.raises(ValueError, match="`method` must be one of"):
        eqx_lru.scan_method("fast")
    # A TypeError naming `method` (under the test suite's beartype hook: its own error).
    with pytest.raises(Exception, match="method"):
        eqx_lru.scan_method(4)
    with pytest.raises(ValueError, match="`unroll`"):
        eqx_lru.Sequential(unroll=0)


@pytest.mark.parametrize(
    "a_shape,b_shape,algebra,match",
    [
        ((4,), (9, 3, 4), "diag", "`a` must have shape"),  # would broadcast silently
        ((1, 3, 4), (9, 3, 4), "diag", "`a` must have shape"),
        ((9, 3, 2, 2), (9, 3, 2), "diag", "`a` must have shape"),
        ((3, 2), (9, 3, 2), "block", "`a` must have shape"),
        ((3, 3, 3), (9, 3, 3), "block", "end in an axis of size 2"),
    ],
)
def test_bad_shapes_raise(a_shape, b_shape, algebra, match):
    with pytest.raises(ValueError, match=match):
        eqx_lru.linear_recurrence(jnp.ones(a_shape), jnp.ones(b_shape), algebra=ALGEBRAS[algebra])


def test_bad_arguments_raise():
    a, b = jnp.ones((3,)), jnp.ones((5, 3))
    with pytest.raises(ValueError, match="same dtype"):
        eqx_lru.linear_recurrence(a.astype(jnp.complex64), b, algebra=eqx_lru.Diagonal())
    with pytest.raises(ValueError, match="`initial_state` must have the state shape"):
        eqx_lru.linear_recurrence(a, b, algebra=eqx_lru.Diagonal(), initial_state=jnp.ones(4))
    with pytest.raises(ValueError, match="non-empty leading length axis"):
        eqx_lru.linear_recurrence(a, jnp.ones((0, 3)), algebra=eqx_lru.Diagonal())
    with pytest.raises(Exception, match="method"):
        eqx_lru.linear_recurrence(a, b, algebra=eqx_lru.Diagonal(), method="fast")

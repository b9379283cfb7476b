"""`linear_recurrence`: every grid method × algebra (`conformance.METHODS`, `.ALGEBRAS`) ×
shared/per-step × reverse × initial state against a plain NumPy loop, the method objects,
and input validation. (Gradients of every method against autodiff of a loop:
tests/lib/test_scan_methods.py.)"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import ALGEBRAS, grid_methods, recurrence_oracle, recurrence_problem
from reference import recurrence_loop

import eqx_lru
from eqx_lru._scan._methods import scan_method
from eqx_lru._scan._recurrence import default_method

LENGTH = 9  # the state is conformance's (3, 4): distinct sizes, a swapped axis cannot hide
VARIANTS = list(itertools.product([True, False], repeat=3))  # (shared, reverse, with_h0)


@pytest.mark.parametrize("algebra", list(ALGEBRAS))
@pytest.mark.parametrize("method", grid_methods())
def test_matches_loop(method, algebra):
    """Every (shared, reverse, initial state) variant, in one compiled program."""
    with jax.enable_x64(True):
        problems = {
            shared: recurrence_problem(algebra, shared=shared, length=LENGTH)
            for shared in (True, False)
        }

        @jax.jit
        def run(problems):
            return [
                eqx_lru.linear_recurrence(
                    problems[shared][0],
                    problems[shared][1],
                    algebra=ALGEBRAS[algebra].algebra,
                    initial_state=problems[shared][2] if with_h0 else None,
                    reverse=reverse,
                    method=method,
                )
                for shared, reverse, with_h0 in VARIANTS
            ]

        for (shared, reverse, with_h0), h in zip(VARIANTS, run(problems), strict=True):
            a, b, h0 = problems[shared]
            expected = recurrence_oracle(
                algebra, a, b, shared=shared, reverse=reverse, h0=h0 if with_h0 else None
            )
            assert h.shape == b.shape and h.dtype == b.dtype
            msg = f"shared={shared}, reverse={reverse}, initial_state={with_h0}"
            np.testing.assert_allclose(np.asarray(h), expected, rtol=1e-12, atol=1e-12, err_msg=msg)


def test_block_order_matters():
    """Block2x2 composition is `later @ earlier`: the transposed order gives a different
    answer on non-commuting blocks, so this test would catch a swapped operator."""
    with jax.enable_x64(True):
        a, b, _ = recurrence_problem("block", shared=False, length=LENGTH, seed=3)
        expected = recurrence_loop(a, b, block=True, shared=False)
        wrong = recurrence_loop(np.swapaxes(a, -1, -2), b, block=True, shared=False)
        assert np.abs(expected - wrong).max() > 1e-2
        for method in grid_methods():
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
    problem = recurrence_problem("diag-real", shared=True, length=LENGTH)
    a, b = (jnp.asarray(x, jnp.float32) for x in problem[:2])
    batched = jax.vmap(lambda b: eqx_lru.linear_recurrence(a, b, algebra=eqx_lru.Diagonal()))
    out = batched(jnp.stack([b, 2 * b]))
    np.testing.assert_allclose(out[1], 2 * out[0], rtol=1e-5)
    assert default_method() == AUTO_CHOICE[jax.default_backend()]
    for backend, choice in AUTO_CHOICE.items():
        monkeypatch.setattr(jax, "default_backend", lambda backend=backend: backend)
        assert eqx_lru.Auto().resolve() == choice, backend


def test_scan_method_shortcuts_and_errors():
    assert scan_method("sequential") == eqx_lru.Sequential(unroll=1)
    assert scan_method("associative") == eqx_lru.Associative()
    assert scan_method("auto") == eqx_lru.Auto()
    method = eqx_lru.Sequential(unroll=4)
    assert scan_method(method) is method
    assert hash(method) == hash(eqx_lru.Sequential(unroll=4))  # a static argument of jit
    with pytest.raises(ValueError, match="`method` must be one of"):
        scan_method("fast")
    # A TypeError naming `method` (under the test suite's beartype hook: its own error).
    with pytest.raises(Exception, match="method"):
        scan_method(4)  # pyright: ignore[reportArgumentType]
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
    algebra = {"diag": eqx_lru.Diagonal(), "block": eqx_lru.Block2x2()}[algebra]
    with pytest.raises(ValueError, match=match):
        eqx_lru.linear_recurrence(jnp.ones(a_shape), jnp.ones(b_shape), algebra=algebra)


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

"""The ablation ladder (`eqx_lru._ablation`): every rung against a float64 NumPy loop of its
defining equation, the exact dense → diagonal conversion (§3.2.1), reverse, vmap/jit/grad,
the registry contract and its errors."""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import lru_loop, lru_params_np

import eqx_lru
from eqx_lru import ABLATION_CORES

H, N, L = 3, 5, 7  # d_model != d_state != length: a swapped axis cannot hide
NAMES = tuple(ABLATION_CORES)


def _np(x):
    return np.asarray(x, np.float64)


def _dense_loop(core, u, *, sigma, reverse):
    A, B, C, D = _np(core.A), _np(core.B), _np(core.C), _np(core.D)
    x = np.zeros(A.shape[0])
    y = np.zeros_like(u)
    for k in range(len(u) - 1, -1, -1) if reverse else range(len(u)):
        x = sigma(A @ x + B @ u[k])
        y[k] = C @ x + D * u[k]
    return y


def _diagonal_loop(lam, core, u, *, reverse):
    B = _np(core.B_re) + 1j * _np(core.B_im)
    C = _np(core.C_re) + 1j * _np(core.C_im)
    x = np.zeros(lam.shape, np.complex128)
    y = np.zeros_like(u)
    for k in range(len(u) - 1, -1, -1) if reverse else range(len(u)):
        x = lam * x + B @ u[k]
        y[k] = (C @ x).real + _np(core.D) * u[k]
    return y


def _oracle(name, core, u, reverse):
    """y from the rung's definition in the paper, written out independently of the core."""
    if name == "rnn_tanh":
        return _dense_loop(core, u, sigma=np.tanh, reverse=reverse)
    if name == "rnn_relu":
        return _dense_loop(core, u, sigma=lambda z: np.maximum(z, 0), reverse=reverse)
    if name == "linear_dense":
        return _dense_loop(core, u, sigma=lambda z: z, reverse=reverse)
    if name == "diag_realimag":
        lam = _np(core.lambda_re) + 1j * _np(core.lambda_im)
    elif name == "diag_exp":
        lam = np.exp(-_np(core.nu) + 1j * _np(core.theta))
    elif name in ("diag_stable_exp", "diag_stable_exp_ring"):
        lam = np.exp(-np.exp(_np(core.nu_log)) + 1j * np.exp(_np(core.theta_log)))
    else:
        return lru_loop(lru_params_np(core), u, reverse=reverse)[0]
    return _diagonal_loop(lam, core, u, reverse=reverse)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_forward_matches_definition(name, reverse, getkey):
    with jax.enable_x64(True):
        core = ABLATION_CORES[name](H, N, key=getkey(), dtype=jnp.float64)
        u = np.random.default_rng(0).normal(size=(L, H))
        y = core(jnp.asarray(u), reverse=reverse)
        assert y.shape == (L, H) and y.dtype == jnp.float64
        np.testing.assert_allclose(
            np.asarray(y), _oracle(name, core, u, reverse), rtol=1e-10, atol=1e-12
        )


def test_to_diagonal_is_exact(getkey):
    """§3.2.1: A = P Λ P⁻¹, B̄ = P⁻¹ B, C̄ = C P give the same outputs."""
    with jax.enable_x64(True):
        dense = eqx_lru.LinearDenseRNN(H, N, dtype=jnp.float64, key=getkey())
        diagonal = eqx_lru.to_diagonal(dense)
        assert isinstance(diagonal, eqx_lru.DiagonalRealImag)
        assert diagonal.d_model == H and diagonal.d_state == N
        np.testing.assert_allclose(
            np.sort_complex(np.asarray(diagonal.eigenvalues())),
            np.sort_complex(np.linalg.eigvals(np.asarray(dense.A))),
            rtol=1e-12,
        )
        u = jnp.asarray(np.random.default_rng(1).normal(size=(L, H)))
        for reverse in (False, True):
            np.testing.assert_allclose(
                np.asarray(diagonal(u, reverse=reverse)),
                np.asarray(dense(u, reverse=reverse)),
                rtol=1e-10,
                atol=1e-12,
            )


def test_to_diagonal_rejects_nonlinear(getkey):
    with pytest.raises(TypeError, match="nonlinear RNN has no diagonal"):
        eqx_lru.to_diagonal(eqx_lru.DenseRNN(H, N, key=getkey()))


def test_stable_exp_plus_gamma_is_the_lru(getkey):
    """The last step of the ladder adds γ alone: same parameters, γ = 1 ⇒ same function."""
    key = getkey()
    ring = ABLATION_CORES["diag_stable_exp_ring"](H, N, key=key)
    lru = ABLATION_CORES["lru"](H, N, key=key)
    lru = eqx.tree_at(lambda m: m.gamma_log, lru, jnp.zeros(N))
    for name in ("nu_log", "theta_log", "B_re", "B_im", "C_re", "C_im", "D"):
        assert jnp.array_equal(getattr(ring, name), getattr(lru, name))
    u = jax.random.normal(getkey(), (L, H))
    assert jnp.allclose(ring(u), lru(u), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_reverse_is_flip(name, getkey):
    core = ABLATION_CORES[name](H, N, key=getkey())
    u = jax.random.normal(getkey(), (L, H))
    flipped = jnp.flip(core(jnp.flip(u, axis=0)), axis=0)
    assert jnp.allclose(core(u, reverse=True), flipped, rtol=1e-5, atol=1e-5)


# One rung per core class ("rnn_relu" and "diag_stable_exp_ring" share theirs; the LRU's own
# tests cover "lru"), to keep compilation time down.
@pytest.mark.parametrize(
    "name", ["rnn_tanh", "linear_dense", "diag_realimag", "diag_exp", "diag_stable_exp"]
)
def test_vmap_jit_grad(name, getkey):
    core = ABLATION_CORES[name](H, N, key=getkey())
    u = jax.random.normal(getkey(), (2, L, H))

    @eqx.filter_jit
    @eqx.filter_value_and_grad
    def loss(core, u):
        return jnp.mean(jax.vmap(functools.partial(core, reverse=True))(u) ** 2)

    value, grads = loss(core, u)
    expected = (
        jnp.mean(core(u[0], reverse=True) ** 2) + jnp.mean(core(u[1], reverse=True) ** 2)
    ) / 2
    assert jnp.allclose(value, expected, rtol=1e-5)
    leaves = jax.tree_util.tree_leaves(eqx.filter(grads, eqx.is_array))
    assert leaves and all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
    assert any(bool(jnp.any(g != 0)) for g in leaves)
    # Every stored parameter is a real array (complex leaves break optax updates).
    for leaf in jax.tree_util.tree_leaves(eqx.filter(core, eqx.is_array)):
        assert jnp.issubdtype(leaf.dtype, jnp.floating)


@pytest.mark.parametrize(
    "name", ["diag_realimag", "diag_exp", "diag_stable_exp", "diag_stable_exp_ring", "lru"]
)
def test_ring_options_are_used(name, getkey):
    make = functools.partial(ABLATION_CORES[name], r_min=0.5, r_max=0.7, max_phase=0.3)
    core = make(H, 64, key=getkey())
    lam = core.eigenvalues()
    assert jnp.all((jnp.abs(lam) >= 0.5 - 1e-6) & (jnp.abs(lam) <= 0.7 + 1e-6))
    assert jnp.all((jnp.angle(lam) >= 0) & (jnp.angle(lam) <= 0.3 + 1e-6))


def test_ring_rungs_default_to_a_ring(getkey):
    for name in ("diag_stable_exp_ring", "lru"):
        modulus = jnp.abs(ABLATION_CORES[name](H, 64, key=getkey()).eigenvalues())
        assert jnp.all(modulus >= 0.9 - 1e-6)
    modulus = jnp.abs(ABLATION_CORES["diag_stable_exp"](H, 64, key=getkey()).eigenvalues())
    assert jnp.min(modulus) < 0.5  # the unit disk


@pytest.mark.parametrize("name", ["rnn_tanh", "rnn_relu", "linear_dense"])
def test_dense_rungs_refuse_ring_options(name, getkey):
    with pytest.raises(ValueError, match="takes no ring options"):
        ABLATION_CORES[name](H, N, key=getkey(), r_min=0.9)


def test_errors(getkey):
    core = eqx_lru.DiagonalExp(H, N, key=getkey())
    with pytest.raises(ValueError, match="shape \\(length, d_model\\)"):
        core(jnp.zeros((L, H + 1)))
    with pytest.raises(ValueError, match="d_state"):
        eqx_lru.DiagonalRealImag(H, 0, key=getkey())
    with pytest.raises(ValueError, match="r_min"):
        eqx_lru.DiagonalStableExp(H, N, r_min=0.9, r_max=0.5, key=getkey())
    # Under the test suite's jaxtyping hook a Literal mismatch is caught first (TypeError).
    with pytest.raises((ValueError, TypeError), match="nonlinearity"):
        eqx_lru.DenseRNN(H, N, nonlinearity="sigmoid", key=getkey())
    with pytest.raises((ValueError, TypeError), match="method"):
        eqx_lru.LinearDenseRNN(H, N, method="fast", key=getkey())


def test_dense_algebra_parallel_scan_matches_sequential(getkey):
    core = eqx_lru.LinearDenseRNN(H, N, key=getkey())
    parallel = eqx_lru.LinearDenseRNN(H, N, method="associative", key=getkey())
    parallel = eqx.tree_at(
        lambda c: (c.A, c.B, c.C, c.D), parallel, (core.A, core.B, core.C, core.D)
    )
    u = jax.random.normal(getkey(), (L, H))
    assert jnp.allclose(core(u), parallel(u), rtol=1e-4, atol=1e-5)


def test_registry_order_and_signature():
    assert NAMES == (
        "rnn_tanh",
        "rnn_relu",
        "linear_dense",
        "diag_realimag",
        "diag_exp",
        "diag_stable_exp",
        "diag_stable_exp_ring",
        "lru",
    )
    import inspect

    for make in ABLATION_CORES.values():
        params = inspect.signature(make).parameters
        assert list(params)[:2] == ["d_model", "d_state"]
        for option in ("key", "r_min", "r_max", "max_phase"):
            assert params[option].kind is inspect.Parameter.KEYWORD_ONLY
    assert math.isclose(eqx_lru._ablation.DEFAULT_RING["r_max"], 0.999)

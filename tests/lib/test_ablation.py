"""The ablation ladder (`eqx_lru.ablation`): every rung against a float64 NumPy loop of its
defining equation, the exact dense → diagonal conversion (§3.2.1), the parameterisations of
`DiagonalRNN`, reverse, vmap/jit/grad, the registry contract and its errors, a rung inside
an `LRUBlock`, and the names kept at `eqx_lru.*` for one version."""

import functools
import inspect
import math
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import lru_loop, lru_params_np

import eqx_lru
from eqx_lru import ablation
from eqx_lru.ablation import (
    ABLATION_CORES,
    DEFAULT_RING,
    DenseRNN,
    DiagonalRNN,
    Exp,
    LinearDenseRNN,
    RealImag,
    StableExp,
    to_diagonal,
)
from eqx_lru.ablation._parameterisation import ParameterisationName

H, N, L = 3, 5, 7  # d_model != d_state != length: a swapped axis cannot hide
NAMES = tuple(ABLATION_CORES)
PARAMETERISATIONS: dict[ParameterisationName, type[ablation.AbstractParameterisation]] = {
    "real_imag": RealImag,
    "exp": Exp,
    "stable_exp": StableExp,
}


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


def _lambda(p) -> np.ndarray:
    """λ from a parameterisation's fields, by the paper's formulas (§3.2-§3.3)."""
    if isinstance(p, RealImag):
        return _np(p.re) + 1j * _np(p.im)
    if isinstance(p, Exp):
        return np.exp(-_np(p.nu) + 1j * _np(p.theta))
    assert isinstance(p, StableExp)
    return np.exp(-np.exp(_np(p.nu_log)) + 1j * np.exp(_np(p.theta_log)))


def _oracle(name, core, u, reverse):
    """y from the rung's definition in the paper, written out independently of the core."""
    if name == "rnn_tanh":
        return _dense_loop(core, u, sigma=np.tanh, reverse=reverse)
    if name == "rnn_relu":
        return _dense_loop(core, u, sigma=lambda z: np.maximum(z, 0), reverse=reverse)
    if name == "linear_dense":
        return _dense_loop(core, u, sigma=lambda z: z, reverse=reverse)
    if name == "lru":
        return lru_loop(lru_params_np(core), u, reverse=reverse)[0]
    return _diagonal_loop(_lambda(core.lambda_), core, u, reverse=reverse)


RUNG_TYPES = {
    "rnn_tanh": (DenseRNN, "tanh"),
    "rnn_relu": (DenseRNN, "relu"),
    "linear_dense": (LinearDenseRNN, None),
    "diag_realimag": (DiagonalRNN, "real_imag"),
    "diag_exp": (DiagonalRNN, "exp"),
    "diag_stable_exp": (DiagonalRNN, "stable_exp"),
    "diag_stable_exp_ring": (DiagonalRNN, "stable_exp"),
    "lru": (eqx_lru.ComplexLRU, None),
}


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_forward_matches_definition(name, reverse, getkey):
    with jax.enable_x64(True):
        core = ABLATION_CORES[name](H, N, key=getkey(), dtype=jnp.float64)
        cls, variant = RUNG_TYPES[name]
        assert type(core) is cls
        if cls is DenseRNN:
            assert cast(DenseRNN, core).nonlinearity == variant
        if cls is DiagonalRNN:
            assert cast(DiagonalRNN, core).parameterisation == variant
            assert type(cast(DiagonalRNN, core).lambda_) is PARAMETERISATIONS[variant]
        u = np.random.default_rng(0).normal(size=(L, H))
        y = core(jnp.asarray(u), reverse=reverse)
        assert y.shape == (L, H) and y.dtype == jnp.float64
        np.testing.assert_allclose(
            np.asarray(y), _oracle(name, core, u, reverse), rtol=1e-10, atol=1e-12
        )


@pytest.mark.parametrize("cls", [RealImag, Exp, StableExp])
def test_parameterisation_from_ring(cls, getkey):
    """Every parameterisation starts from the ring sample's λ = exp(-e^ν_log + i e^θ_log),
    and `eigenvalues()` is the paper's formula for its fields."""
    with jax.enable_x64(True):
        nu_log, theta_log = eqx_lru.ring_init(N, dtype=jnp.float64, key=getkey())
        p = cls.from_ring(nu_log, theta_log)
        expected = np.exp(-np.exp(_np(nu_log)) + 1j * np.exp(_np(theta_log)))
        np.testing.assert_allclose(np.asarray(p.eigenvalues()), expected, rtol=1e-13)
        np.testing.assert_allclose(_lambda(p), expected, rtol=1e-13)
        leaves = jax.tree_util.tree_leaves(p)
        assert len(leaves) == 2 and all(leaf.dtype == jnp.float64 for leaf in leaves)


def test_rungs_differ_only_in_the_parameterisation(getkey):
    """The same key gives the same λ, B, C, D under every parameterisation (and the LRU's
    parameters): each step of the ladder changes one thing."""
    key = getkey()
    cores = [DiagonalRNN(H, N, parameterisation=p, key=key) for p in PARAMETERISATIONS]
    lru = eqx_lru.ComplexLRU(H, N, key=key)
    for core in cores:
        assert jnp.allclose(core.eigenvalues(), lru.eigenvalues(), rtol=1e-6, atol=1e-7)
        for name in ("B_re", "B_im", "C_re", "C_im", "D"):
            assert jnp.array_equal(getattr(core, name), getattr(lru, name))


def test_hidden_states(getkey):
    with jax.enable_x64(True):
        core = DiagonalRNN(H, N, parameterisation="exp", dtype=jnp.float64, key=getkey())
        u = np.random.default_rng(2).normal(size=(L, H))
        states = core.hidden_states(jnp.asarray(u), reverse=True)
        assert states.shape == (L, N) and states.dtype == jnp.complex128
        lam, B = _lambda(core.lambda_), _np(core.B_re) + 1j * _np(core.B_im)
        x, expected = np.zeros(N, np.complex128), np.zeros((L, N), np.complex128)
        for k in range(L - 1, -1, -1):
            x = expected[k] = lam * x + B @ u[k]
        np.testing.assert_allclose(np.asarray(states), expected, rtol=1e-12, atol=1e-13)


def test_to_diagonal_is_exact(getkey):
    """§3.2.1: A = P Λ P⁻¹, B̄ = P⁻¹ B, C̄ = C P give the same outputs."""
    with jax.enable_x64(True):
        dense = LinearDenseRNN(H, N, dtype=jnp.float64, key=getkey())
        diagonal = to_diagonal(dense)
        assert isinstance(diagonal, DiagonalRNN) and diagonal.parameterisation == "real_imag"
        assert diagonal.d_model == H and diagonal.d_state == N
        assert diagonal.method == dense.method
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
        to_diagonal(DenseRNN(H, N, key=getkey()))


def test_stable_exp_plus_gamma_is_the_lru(getkey):
    """The last step of the ladder adds γ alone: same parameters, γ = 1 ⇒ same function."""
    key = getkey()
    ring = ABLATION_CORES["diag_stable_exp_ring"](H, N, key=key)
    assert isinstance(ring, DiagonalRNN) and isinstance(ring.lambda_, StableExp)
    lru = ABLATION_CORES["lru"](H, N, key=key)
    lru = eqx.tree_at(lambda m: m.gamma_log, lru, jnp.zeros(N))
    assert jnp.array_equal(ring.lambda_.nu_log, lru.nu_log)
    assert jnp.array_equal(ring.lambda_.theta_log, lru.theta_log)
    for name in ("B_re", "B_im", "C_re", "C_im", "D"):
        assert jnp.array_equal(getattr(ring, name), getattr(lru, name))
    u = jax.random.normal(getkey(), (L, H))
    assert jnp.allclose(ring(u), lru(u), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_reverse_is_flip(name, getkey):
    core = ABLATION_CORES[name](H, N, key=getkey())
    u = jax.random.normal(getkey(), (L, H))
    flipped = jnp.flip(core(jnp.flip(u, axis=0)), axis=0)
    assert jnp.allclose(core(u, reverse=True), flipped, rtol=1e-5, atol=1e-5)


# One rung per core class, to keep compilation time down: the diagonal rungs share
# `DiagonalRNN` (the parameterisations differ only in `eigenvalues()`, checked above), the
# dense ones `DenseRNN`; the LRU's own tests cover "lru".
@pytest.mark.parametrize("name", ["rnn_tanh", "linear_dense", "diag_realimag"])
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
        assert jnp.all(modulus >= DEFAULT_RING["r_min"] - 1e-6)
    modulus = jnp.abs(ABLATION_CORES["diag_stable_exp"](H, 64, key=getkey()).eigenvalues())
    assert jnp.min(modulus) < 0.5  # the unit disk


@pytest.mark.parametrize("name", ["rnn_tanh", "rnn_relu", "linear_dense"])
def test_dense_rungs_refuse_ring_options(name, getkey):
    with pytest.raises(ValueError, match="takes no ring options"):
        ABLATION_CORES[name](H, N, key=getkey(), r_min=0.9)


def test_errors(getkey):
    core = DiagonalRNN(H, N, parameterisation="exp", key=getkey())
    with pytest.raises(ValueError, match="shape \\(length, d_model\\)"):
        core(jnp.zeros((L, H + 1)))
    with pytest.raises(ValueError, match="d_state"):
        DiagonalRNN(H, 0, key=getkey())
    with pytest.raises(ValueError, match="r_min"):
        DiagonalRNN(H, N, r_min=0.9, r_max=0.5, key=getkey())
    with pytest.raises(ValueError, match="precision"):
        DiagonalRNN(H, N, precision="ultra", key=getkey())
    # Under the test suite's jaxtyping hook a Literal mismatch is caught first (TypeError).
    with pytest.raises((ValueError, TypeError), match="parameterisation"):
        DiagonalRNN(H, N, parameterisation="polar", key=getkey())  # pyright: ignore[reportArgumentType]
    with pytest.raises((ValueError, TypeError), match="nonlinearity"):
        DenseRNN(H, N, nonlinearity="sigmoid", key=getkey())  # pyright: ignore[reportArgumentType]
    with pytest.raises((ValueError, TypeError), match="method"):
        LinearDenseRNN(H, N, method="fast", key=getkey())
    with pytest.raises((ValueError, TypeError), match="key"):
        DenseRNN(H, N, key=0)  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match="d_model"):
        ABLATION_CORES["rnn_relu"](True, N, key=getkey())


def test_dense_algebra_parallel_scan_matches_sequential(getkey):
    core = LinearDenseRNN(H, N, key=getkey())
    parallel = LinearDenseRNN(H, N, method="associative", key=getkey())
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
    for make in ABLATION_CORES.values():
        params = inspect.signature(make).parameters
        assert list(params)[:2] == ["d_model", "d_state"]
        for option in ("key", "r_min", "r_max", "max_phase"):
            assert params[option].kind is inspect.Parameter.KEYWORD_ONLY
        assert make.__doc__
    assert math.isclose(DEFAULT_RING["r_max"], 0.999)
    assert inspect.signature(ABLATION_CORES["lru"]).parameters["r_min"].default == 0.9


def test_recurrent_fields_label_lambda_and_B(getkey):
    """§D.2: λ's parameters (whichever parameterisation) and B get the recurrent group."""
    for parameterisation in PARAMETERISATIONS:
        core = DiagonalRNN(H, N, parameterisation=parameterisation, key=getkey())
        labels = eqx_lru.lru_param_labels(core)
        assert set(jax.tree_util.tree_leaves(labels.lambda_)) == {"recurrent"}
        assert labels.B_re == labels.B_im == "recurrent"
        assert labels.C_re == labels.C_im == labels.D == "decay"
    labels = eqx_lru.lru_param_labels(LinearDenseRNN(H, N, key=getkey()))
    assert (labels.A, labels.B, labels.C, labels.D) == ("recurrent",) * 2 + ("decay",) * 2


def test_rung_plugs_into_a_block(getkey):
    """A registry factory is a `core=` of `LRUBlock`, both directions; the block runs it."""
    make = functools.partial(ABLATION_CORES["diag_exp"], r_min=0.5, r_max=0.6)
    block, state = eqx.nn.make_with_state(eqx_lru.LRUBlock)(
        H, N, core=make, norm="layer", bidirectional=True, key=getkey()
    )
    for core in (block.core, block.reverse_core):
        assert isinstance(core, DiagonalRNN) and core.parameterisation == "exp"
        assert jnp.all(jnp.abs(core.eigenvalues()) <= 0.6 + 1e-6)
    x = jax.random.normal(getkey(), (L, H))
    run = eqx.filter_jit(lambda block, x: block(x, state)[0])  # one compilation for both
    y = run(block, x)
    # The core is what the block runs: a different λ gives a different output.
    assert isinstance(block.core, DiagonalRNN) and isinstance(block.core.lambda_, Exp)
    other = eqx.tree_at(lambda b: b.core.lambda_.nu, block, block.core.lambda_.nu + 1)
    y_other = run(other, x)
    assert y.shape == (L, H) and jnp.all(jnp.isfinite(y))
    assert not jnp.allclose(y, y_other)


def test_namespace():
    """The ladder's names live behind `eqx_lru.ablation` only (no top-level aliases)."""
    assert all(hasattr(ablation, name) for name in ablation.__all__)
    assert eqx_lru.ablation is ablation and "ablation" in eqx_lru.__all__
    for name in ablation.__all__:
        assert not hasattr(eqx_lru, name), name
    for old in ("AbstractDiagonalRNN", "DiagonalRealImag", "DiagonalExp", "DiagonalStableExp"):
        assert not hasattr(eqx_lru, old) and not hasattr(ablation, old)
    assert isinstance(eqx_lru.DenseAlgebra(), eqx_lru.AbstractAlgebra)

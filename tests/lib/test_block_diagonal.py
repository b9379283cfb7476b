"""`BlockDiagonalLRU`: its scan against the dense algebra on the whole block-diagonal
matrix, its gradients against autodiff of a plain float64 loop, its stability for any
input (both parameterisations), and its refusals. The contract (`run`, `step`, chunks,
segments) and the float64 NumPy loop are `conformance.CORES["block_diagonal"]` and
`["block_diagonal_2"]` (tests/lib/test_core.py)."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import _block_diagonal_reference

import eqx_lru

H, N, L = 3, 6, 7
#: `Block2x2` (b = 2) and `DenseAlgebra` (b = 3) scans, one per parameterisation (the
#: contract test runs the other two combinations' float64 loop).
CASES = [(3, "normalised"), (2, "householder")]


def _core(block_size, parameterisation, seed=0):
    return eqx_lru.BlockDiagonalLRU(
        H, N, block_size=block_size, parameterisation=parameterisation, dtype=jnp.float64,
        key=jax.random.PRNGKey(seed),
    )  # fmt: skip


def _input(seed=1, scale=1.0):
    return scale * np.random.default_rng(seed).normal(size=(L, H))


def _dense_states(core, u):
    """All states by `linear_recurrence` with `DenseAlgebra` on the flat state and the
    whole N×N block-diagonal transition of each position."""
    a = core.transitions(u)
    full = jax.vmap(lambda blocks: jax.scipy.linalg.block_diag(*blocks))(a)
    drive = (core.gamma().reshape(-1) * (u @ core.B.T)).astype(a.dtype)
    return eqx_lru.linear_recurrence(full, drive, algebra=eqx_lru.DenseAlgebra())


def _loop_outputs(core, u):
    """y by a plain loop over positions (`lax.scan` of the whole N×N matrix, autodiff'd
    by JAX, not the library's custom VJP)."""
    gamma = core.gamma().reshape(-1)

    def step(x, u_t):
        x = jax.scipy.linalg.block_diag(*core.transitions(u_t)) @ x + gamma * (core.B @ u_t)
        return x, core.C @ x + core.D * u_t

    return jax.lax.scan(step, jnp.zeros(N, u.dtype), u)[1]


@eqx.filter_jit
def _compare(core, u):
    states = core.run(u)[0], _dense_states(core, u)
    hidden = jax.vmap(lambda x: x.reshape(-1))(
        eqx_lru.linear_recurrence(
            core.transitions(u), core.gamma() * (u @ core.B.T).reshape(L, -1, core.block_size),
            algebra=core.algebra,
        )
    )  # fmt: skip

    def loss(core, u, run):
        return jnp.sum(jnp.sin(run(core, u)))

    scan = lambda c, u: c(u)  # noqa: E731
    grads = (
        jax.grad(loss, argnums=(0, 1))(core, u, scan),
        jax.grad(loss, argnums=(0, 1))(core, u, _loop_outputs),
    )
    return states, hidden, grads


@pytest.mark.parametrize("block_size, parameterisation", CASES)
def test_matches_the_dense_algebra_and_a_plain_loop_with_gradients(block_size, parameterisation):
    with jax.enable_x64(True):
        core, u = _core(block_size, parameterisation), _input()
        (y, _), hidden, (g_scan, g_loop) = _compare(core, u)
        dense = _dense_states(core, u)
        np.testing.assert_allclose(hidden, dense, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(y, _block_diagonal_reference(core, u), rtol=1e-11, atol=1e-11)
        expected = dense @ np.asarray(core.C).T + np.asarray(core.D) * u
        np.testing.assert_allclose(y, expected, rtol=1e-11, atol=1e-11)
        leaves = zip(*map(jax.tree_util.tree_leaves, (g_scan, g_loop)), strict=True)
        for a, b in leaves:
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
        assert core.algebra == (eqx_lru.Block2x2() if block_size == 2 else eqx_lru.DenseAlgebra())


@pytest.mark.parametrize("parameterisation", ["normalised", "householder"])
def test_stable_for_any_input(parameterisation):
    """Huge inputs: with contractions pushed to 1 - 1e-9 the transitions' norm stays below
    1 (∞-norm for `"normalised"`, spectral for `"householder"`); with ρ = 1/2 over 200
    positions the state stays within the bound of the module docstring,
    sqrt((1 + ρ)/(1 - ρ)) max|B u| (times sqrt(block_size) for the 2-norm's bound)."""
    with jax.enable_x64(True):
        core = _core(3, parameterisation)
        u = 100 * np.random.default_rng(2).normal(size=(200, H))
        near_one = eqx.tree_at(lambda c: c.rho_logit, core, jnp.full_like(core.rho_logit, 21.0))
        a = np.asarray(near_one.transitions(u))
        if parameterisation == "normalised":
            norm = np.abs(a).sum(-1)
        else:
            norm = np.linalg.norm(a, 2, (-2, -1))
        assert 0.99 < norm.max() < 1, norm.max()
        half = eqx.tree_at(lambda c: c.rho_logit, core, jnp.zeros_like(core.rho_logit))
        h = np.asarray(half.hidden_states(u)).reshape(len(u), -1)
        bu = np.abs(u @ np.asarray(half.B).T).max()
        spread = 1.0 if parameterisation == "normalised" else np.sqrt(core.block_size)
        assert np.abs(h).max() <= np.sqrt(3) * bu * spread
        assert np.abs(h).max() > 0.1 * bu  # the states are not vanishing either


def test_refuses_bad_arguments_by_name():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="`d_state`=7 must be a multiple of `block_size`=2"):
        eqx_lru.BlockDiagonalLRU(H, 7, block_size=2, key=key)
    with pytest.raises(ValueError, match="`parameterisation` must be"):
        eqx_lru.BlockDiagonalLRU(H, N, block_size=2, parameterisation="dense", key=key)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`r_min`, `r_max`"):
        eqx_lru.BlockDiagonalLRU(H, N, block_size=2, r_max=1.0, key=key)
    core = eqx_lru.BlockDiagonalLRU(H, N, block_size=3, key=key)
    u = jnp.zeros((L, H))
    for call in (
        functools.partial(core, u, dt=1.0),
        functools.partial(core.run, u, dt=1.0),
        functools.partial(core.step, core.init_state(), u[0], dt=1.0),
    ):
        with pytest.raises(TypeError, match="takes no `dt`"):
            call()
    with pytest.raises(ValueError, match=r"one row per block"):
        core.run(u, initial_state=jnp.zeros(N))

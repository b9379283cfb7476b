"""Initialisation: Lemma 3.2 ring sampling, γ normalisation (eq. 7), Prop. 3.3's gain,
and the projection variances of App. A."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import eqx_lru
from eqx_lru._cores._init import gamma_log_init, projection_init

RINGS = [(0.0, 1.0, 2 * math.pi), (0.5, 0.9, math.pi), (0.999, 0.9999, math.pi / 10)]


@pytest.mark.parametrize("r_min,r_max,max_phase", RINGS)
def test_ring_is_uniform(r_min, r_max, max_phase):
    with jax.enable_x64(True):
        nu_log, theta_log = eqx_lru.ring_init(
            4000,
            r_min=r_min,
            r_max=r_max,
            max_phase=max_phase,
            dtype=jnp.float64,
            key=jax.random.PRNGKey(0),
        )
    modulus_sq = np.exp(-2 * np.exp(np.asarray(nu_log)))
    phase = np.exp(np.asarray(theta_log))
    uniform_sq = stats.uniform(loc=r_min**2, scale=r_max**2 - r_min**2).cdf
    assert stats.kstest(modulus_sq, uniform_sq).pvalue > 0.01
    assert stats.kstest(phase, stats.uniform(loc=0, scale=max_phase).cdf).pvalue > 0.01
    assert modulus_sq.min() >= r_min**2 - 1e-12 and modulus_sq.max() <= r_max**2 + 1e-12
    if r_max - r_min > 0.3:
        # The test has power: on a wide ring the modulus itself (not its square) is
        # visibly not uniform. (On the thin PathX ring the two are indistinguishable.)
        wrong = stats.uniform(loc=r_min, scale=r_max - r_min).cdf
        assert stats.kstest(np.sqrt(modulus_sq), wrong).pvalue < 1e-6


def test_gamma_is_sqrt_one_minus_modulus_squared():
    with jax.enable_x64(True):
        layer = eqx_lru.ComplexLRU(
            3, 50, r_min=0.2, r_max=0.99999, dtype=jnp.float64, key=jax.random.PRNGKey(1)
        )
        modulus = np.abs(np.asarray(layer.eigenvalues()))
        np.testing.assert_allclose(
            np.exp(np.asarray(layer.gamma_log)), np.sqrt(1 - modulus**2), rtol=1e-9
        )


def test_projection_variances():
    params = projection_init(64, 96, key=jax.random.PRNGKey(2))
    assert params["B_re"].shape == (96, 64) and params["C_re"].shape == (64, 96)
    assert params["D"].shape == (64,)
    np.testing.assert_allclose(np.var(params["B_re"]), 1 / (2 * 64), rtol=0.05)
    np.testing.assert_allclose(np.var(params["B_im"]), 1 / (2 * 64), rtol=0.05)
    np.testing.assert_allclose(np.var(params["C_re"]), 1 / 96, rtol=0.05)
    np.testing.assert_allclose(np.var(params["C_im"]), 1 / 96, rtol=0.05)


def _stationary_energy(layer, key, *, length=1500, burn_in=500, batch=8):
    """Time- and batch-averaged ‖x_k‖² under white-noise input after the transient."""
    u = jax.random.normal(key, (batch, length, layer.d_model))
    states = jax.vmap(layer.hidden_states)(u)
    return float(jnp.mean(jnp.sum(jnp.abs(states[:, burn_in:]) ** 2, axis=-1)))


def _input_energy(layer, *, use_gamma):
    """E‖(γ)Bu‖² for u ~ N(0, I): the squared Frobenius norm of (γ)B."""
    gamma = jnp.exp(layer.gamma_log)[:, None] if use_gamma else 1.0
    return float(jnp.sum((gamma * layer.B_re) ** 2 + (gamma * layer.B_im) ** 2))


R_MIN, R_MAX = 0.6, 0.97


def test_gamma_normalises_the_forward_pass():
    """With γ, E‖x_∞‖² = E‖Bu‖² (each mode's gain 1/(1-|λ|²) is cancelled by γ²)."""
    layer = eqx_lru.ComplexLRU(16, 512, r_min=R_MIN, r_max=R_MAX, key=jax.random.PRNGKey(3))
    energy = _stationary_energy(layer, jax.random.PRNGKey(4))
    without_gamma_b = _input_energy(layer, use_gamma=False)
    np.testing.assert_allclose(energy, without_gamma_b, rtol=0.08)


def test_gain_without_gamma_matches_proposition_3_3():
    r"""E‖x_∞‖² = log((1-r_min²)/(1-r_max²)) / (r_max²-r_min²) · E‖Bu‖² (Prop. 3.3)."""
    layer = eqx_lru.ComplexLRU(16, 512, r_min=R_MIN, r_max=R_MAX, key=jax.random.PRNGKey(5))
    layer = eqx.tree_at(lambda m: m.gamma_log, layer, jnp.zeros_like(layer.gamma_log))
    energy = _stationary_energy(layer, jax.random.PRNGKey(6))
    gain = math.log((1 - R_MIN**2) / (1 - R_MAX**2)) / (R_MAX**2 - R_MIN**2)
    np.testing.assert_allclose(energy / _input_energy(layer, use_gamma=False), gain, rtol=0.1)
    # A gain of one (no blow-up) or the naive 1/(1-r_max²) would both fail this tolerance.
    assert abs(gain - 1) / gain > 0.5 and abs(1 / (1 - R_MAX**2) - gain) / gain > 0.5


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(r_min=0.5, r_max=0.4), "r_min"),
        (dict(r_max=1.01), "r_max"),
        (dict(r_min=-1.0), "r_min"),
        (dict(max_phase=0.0), "max_phase"),
        (dict(r_max=float("nan")), "r_max"),
    ],
)
def test_ring_init_rejects_bad_hyperparameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        eqx_lru.ring_init(4, key=jax.random.PRNGKey(0), **kwargs)


def test_init_has_no_infinities_at_the_ring_edges():
    nu_log, theta_log = eqx_lru.ring_init(100_000, key=jax.random.PRNGKey(7))
    assert bool(jnp.all(jnp.isfinite(nu_log))) and bool(jnp.all(jnp.isfinite(theta_log)))
    assert bool(jnp.all(jnp.isfinite(gamma_log_init(nu_log))))

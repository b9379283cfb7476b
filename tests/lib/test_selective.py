"""`ComplexSelectiveLRU` and `RealSelectiveLRU` (issue 40 item 1): both forms against the
float64 NumPy loop of the maths (`conformance.selective_reference`), forward, reverse and
with time steps, in float64 and float32, under both normalisations; gradients
(parameters, inputs and `dt`) against autodiff of a plain JAX loop of the same maths in
float64; `from_complex`/`from_real` exact; the initialisation at zero input on the LRU's
ring, whatever the phase gate's scale; the bounds of $|\\lambda_t|$ and $\\theta_t$; bad
arguments. The contract (step, chunks, segments, `length`) is `test_core.py`'s, through
the `CORES` entries. Sizes: d_model=3, d_state=4, length=7."""

import functools
import inspect
import math
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from builders import D_MODEL as H
from builders import D_STATE as N
from builders import LENGTH as L
from builders import RING, normal, uniform
from conformance import selective_reference

import eqx_lru

FORMS = (eqx_lru.ComplexSelectiveLRU, eqx_lru.RealSelectiveLRU)
KEY = jax.random.PRNGKey(0)
PARAMS = ("nu_log", "W_r", "b_r", "W_theta", "b_theta", "B_re", "B_im", "C_re", "C_im", "D")


def _core(form, dtype, normalisation="selective"):
    return form(H, N, **RING, normalisation=normalisation, method="sequential", dtype=dtype,
                key=jax.random.PRNGKey(3))  # fmt: skip


def _data(dtype, seed=0):
    # Scaled: the gates well away from their zero-input values.
    u = normal(L, H, seed=seed, dtype=dtype, scale=1.5)
    return u, uniform(L, low=0.2, high=2.5, seed=seed + 100, dtype=dtype)


@eqx.filter_jit
def _outputs(core, u, dt):
    return dict(
        plain=core(u), reverse=core(u, reverse=True), dt=core(u, dt=dt),
        dt_reverse=core(u, dt=dt, reverse=True), scalar_dt=core(u, dt=dt[0]),
    )  # fmt: skip


def _expected(core, u, dt):
    ref = functools.partial(selective_reference, core, u)
    scalar = np.full(L, dt[0])
    return dict(
        plain=ref(), reverse=ref(reverse=True), dt=ref(dt=dt),
        dt_reverse=ref(dt=dt, reverse=True), scalar_dt=ref(dt=scalar),
    )  # fmt: skip


@pytest.mark.parametrize(
    "dtype, tol, normalisation",
    [(np.float64, 1e-12, "selective"), (np.float32, 1e-5, "selective"),
     (np.float64, 1e-12, "fixed")],
)  # fmt: skip
def test_both_forms_match_the_float64_loop(dtype, tol, normalisation):
    with jax.enable_x64(dtype == np.float64):
        u, dt = _data(dtype)
        for form in FORMS:
            core = _core(form, dtype, normalisation)
            got, want = _outputs(core, u, dt), _expected(core, u, dt)
            for name in want:
                err = np.max(np.abs(np.asarray(got[name], np.float64) - want[name]))
                assert err <= tol * np.max(np.abs(want[name])), (form.__name__, name, err)


def _plain_loop(p, u, dt, max_phase, scale):
    """The maths as a plain JAX loop over complex numbers (no library code): autodiff of
    it is the oracle of the gradients (`scale`: the phase gate's)."""
    B, C = jax.lax.complex(p["B_re"], p["B_im"]), jax.lax.complex(p["C_re"], p["C_im"])
    x, ys = jnp.zeros(N, jnp.complex128), []
    for t in range(L):
        log_r = -jnp.exp(p["nu_log"]) * jnp.logaddexp(0.0, p["W_r"] @ u[t] + p["b_r"])
        theta = max_phase / (1 + jnp.exp(-scale * (p["W_theta"] @ u[t] + p["b_theta"])))
        lam = jnp.exp(jax.lax.complex(dt[t] * log_r, dt[t] * theta))
        gain = jnp.sqrt(1 - jnp.exp(2 * log_r)).astype(jnp.complex128)
        x = lam * x + gain * (B @ u[t].astype(jnp.complex128))
        ys.append(jnp.real(C @ x) + p["D"] * u[t])
    return jnp.stack(ys)


def test_gradients_match_autodiff_of_a_plain_loop_float64():
    with jax.enable_x64(True):
        u, dt = _data(np.float64, seed=1)
        weight = normal(L, H, seed=2, dtype=np.float64)

        def loss(core, u, dt):
            return jnp.sum(core(u, dt=dt) * weight)

        grad = eqx.filter_jit(jax.grad(loss, argnums=(0, 1, 2)))
        complex_core = _core(eqx_lru.ComplexSelectiveLRU, np.float64)
        params = {n: getattr(complex_core, n) for n in PARAMS}
        oracle = jax.grad(
            lambda p, u, dt: jnp.sum(
                _plain_loop(p, u, dt, complex_core.max_phase, complex_core.phase_gate_scale)
                * weight
            ),
            argnums=(0, 1, 2),
        )(params, jnp.asarray(u), jnp.asarray(dt))
        for core in (complex_core, eqx_lru.RealSelectiveLRU.from_complex(complex_core)):
            g_core, g_u, g_dt = grad(core, u, dt)
            for n in PARAMS:
                np.testing.assert_allclose(getattr(g_core, n), oracle[0][n], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(g_u, oracle[1], rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(g_dt, oracle[2], rtol=1e-9, atol=1e-12)


def test_conversions_are_exact_and_share_the_parameters():
    u, _ = _data(np.float32)
    complex_core = _core(eqx_lru.ComplexSelectiveLRU, np.float32)
    real = eqx_lru.RealSelectiveLRU.from_complex(complex_core)
    back = eqx_lru.ComplexSelectiveLRU.from_real(real)
    assert type(real) is eqx_lru.RealSelectiveLRU and type(back) is eqx_lru.ComplexSelectiveLRU
    for n in PARAMS:
        assert getattr(real, n) is getattr(complex_core, n) is getattr(back, n)
    assert (real.max_phase, real.method) == (complex_core.max_phase, complex_core.method)
    assert eqx.tree_equal(back, complex_core)
    # The same key gives the same parameters in both forms.
    built = _core(eqx_lru.RealSelectiveLRU, np.float32)
    for n in PARAMS:
        np.testing.assert_array_equal(getattr(built, n), getattr(complex_core, n))
    np.testing.assert_allclose(real(u), complex_core(u), rtol=1e-5, atol=1e-6)
    # In a block, through `to_real`/`to_complex`.
    block = eqx_lru.LRUBlock(
        H, N, core=eqx_lru.ComplexSelectiveLRU, norm=None, key=jax.random.PRNGKey(0)
    )
    assert type(eqx_lru.to_real(block).core) is eqx_lru.RealSelectiveLRU
    back = cast(eqx_lru.ComplexSelectiveLRU, eqx_lru.to_complex(eqx_lru.to_real(block)).core)
    assert back.nu_log is cast(eqx_lru.ComplexSelectiveLRU, block.core).nu_log
    with pytest.raises(TypeError, match="ComplexSelectiveLRU"):
        eqx_lru.RealSelectiveLRU.from_complex(eqx_lru.ComplexLRU(H, N, key=jax.random.PRNGKey(0)))  # pyright: ignore[reportArgumentType]


def test_zero_input_is_the_lru_ring_and_every_input_keeps_the_bounds():
    """At zero input $|\\lambda|$ and the phases are the ring's (`ring_init` with the same
    ring, the LRU's Lemma 3.2): $|\\lambda|^2$ in $[r_\\min^2, r_\\max^2]$, phases in
    $[0, \\phi_\\max]$; for any input $0 < |\\lambda_t| < 1$ and $0 < \\theta_t < \\phi_\\max$."""
    core = eqx_lru.RealSelectiveLRU(3, 64, r_min=0.8, r_max=0.9, max_phase=2.0, key=KEY)
    log_r, theta = core.selection(jnp.zeros((1, 3)))
    modulus, theta = np.exp(np.asarray(log_r[0], np.float64)), np.asarray(theta[0])
    assert np.all((modulus >= 0.8 - 1e-6) & (modulus <= 0.9 + 1e-6))
    assert np.all((theta >= 0) & (theta <= 2.0))
    # Uniform in area and in phase: not all at one end.
    assert np.ptp(modulus) > 0.05 and np.ptp(theta) > 1.0
    np.testing.assert_allclose(modulus, np.exp(-np.exp(np.asarray(core.nu_log))), rtol=1e-6)
    u = np.random.default_rng(0).normal(size=(50, 3)) * 3
    log_r, theta = (np.asarray(x) for x in core.selection(jnp.asarray(u, jnp.float32)))
    assert np.all(log_r < 0) and np.all((theta > 0) & (theta < 2.0))
    # The phase gate's scale changes how fast training moves the logit, not the layer
    # built from a key: 8 (the default) and 1 give the same phases, bit for bit.
    unscaled = eqx_lru.RealSelectiveLRU(
        3, 64, r_min=0.8, r_max=0.9, max_phase=2.0, phase_gate_scale=1.0, key=KEY
    )
    assert core.phase_gate_scale == 8.0
    np.testing.assert_array_equal(unscaled.selection(jnp.asarray(u, jnp.float32))[1], theta)


def test_signatures_spell_out_every_keyword_and_bad_arguments_are_named():
    for form in FORMS:
        for method in ("__call__", "run", "step"):
            kinds = {p.kind for p in inspect.signature(getattr(form, method)).parameters.values()}
            assert inspect.Parameter.VAR_KEYWORD not in kinds, (form.__name__, method)
        assert "dt" in inspect.signature(form.step).parameters and form.takes_dt
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="`max_phase` must be a positive finite"):
            eqx_lru.RealSelectiveLRU(H, N, max_phase=bad, key=jax.random.PRNGKey(0))
        with pytest.raises(ValueError, match="`phase_gate_scale` must be a positive finite"):
            eqx_lru.RealSelectiveLRU(H, N, phase_gate_scale=bad, key=jax.random.PRNGKey(0))
    # The import hook's type check answers first under pytest; our ValueError otherwise.
    with pytest.raises((ValueError, TypeError), match="normalisation"):
        eqx_lru.RealSelectiveLRU(H, N, normalisation=cast(Any, "input"), key=KEY)
    core = _core(eqx_lru.RealSelectiveLRU, np.float32)
    u, _ = _data(np.float32)
    with pytest.raises(ValueError, match="It looks transposed"):
        core(u, initial_state=jnp.zeros((2, N)))
    with pytest.raises(ValueError, match="`dt` must be positive"):
        core(u, dt=-np.ones(L, np.float32))
    with pytest.raises(ValueError, match="ComplexSelectiveLRU"):
        eqx_lru.ComplexSelectiveLRU(H, N, dtype=jnp.float16, key=jax.random.PRNGKey(0))

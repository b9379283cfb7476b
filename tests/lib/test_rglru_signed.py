"""`RGLRU(eigenvalues="signed")`: a_t = 2σ(Λ)^{c r_t} − 1 in (−1, 1]. The float64 NumPy
loop (`reference.rglru_loop(signed=True)`) in values (the three variants, with `dt`) and
gradients (central differences), transitions below zero and bounded at extreme inputs, the
stable normalisation where a_t rounds to −1, and the refused `zoh`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import rglru_loop

import eqx_lru

H, L, HEADS = 8, 7, 2  # d_model ≠ length; 8 modes, or 4 with phase
VARIANTS = {
    "real": dict(phase=False),
    "complex": dict(phase=True, form="complex"),
    "real2x2": dict(phase=True, form="real"),
}
FIELDS = ("Lambda", "theta", "W_a", "b_a", "W_x", "b_x")


def _core(variant, dtype=jnp.float64, **options):
    core = eqx_lru.RGLRU(
        H, heads=HEADS, method="sequential", eigenvalues="signed", r_min=0.5, dtype=dtype,
        key=jax.random.PRNGKey(0), **VARIANTS[variant], **options,
    )  # fmt: skip
    rng = np.random.default_rng(7)  # non-zero biases: every parameter matters
    biases = [jnp.asarray(rng.normal(size=core.b_a.shape), dtype) for _ in range(2)]
    return eqx.tree_at(lambda m: (m.b_a, m.b_x), core, tuple(biases))


def _params(core) -> dict:
    return {
        n: None if getattr(core, n) is None else np.asarray(getattr(core, n), np.float64)
        for n in FIELDS
    }


def _complex(core, h):
    h = np.asarray(h)
    return h[0] + 1j * h[1] if core.phase and core.form == "real" else h


def test_matches_float64_loop_values_and_gradients():
    """Outputs, final states (from a given state, with `dt`, reverse for one variant) of
    the three variants, and gradients of every parameter, the input, `dt` and the state
    (real and real 2×2 forms) against central differences of the NumPy loop."""
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        cores = {v: _core(v) for v in VARIANTS}
        x = jnp.asarray(2 * rng.normal(size=(L, H)))  # large enough for negative a_t
        dt = jnp.asarray(rng.uniform(0.3, 2.0, size=L))
        h0 = {}
        for v, c in cores.items():
            shape, dtype = c.init_state().shape, c.init_state().dtype
            h = rng.normal(size=shape) + (1j * rng.normal(size=shape) if v == "complex" else 0)
            h0[v] = jnp.asarray(h, dtype)
        weights = rng.normal(size=(L, H))

        def loss(args):
            core, x, dt, h0 = args
            return jnp.sum(weights * jnp.tanh(core(x, dt=dt, initial_state=h0)))

        @eqx.filter_jit
        def runs(cores, x, dt, h0):
            values = {v: c.run(x, dt=dt, initial_state=h0[v], reverse=v == "complex")
                      for v, c in cores.items()}  # fmt: skip
            grads = {v: eqx.filter_grad(loss)((cores[v], x, dt, h0[v]))
                     for v in ("real", "real2x2")}  # fmt: skip
            return values, grads

        values, grads = runs(cores, x, dt, h0)
        for variant, (y, final) in values.items():
            core = cores[variant]
            reverse = variant == "complex"
            y_ref, states = rglru_loop(
                _params(core), x, dt=dt, h0=_complex(core, h0[variant]), reverse=reverse,
                signed=True,
            )  # fmt: skip
            np.testing.assert_allclose(y, y_ref, rtol=0, atol=1e-12, err_msg=variant)
            last = states[0 if reverse else -1]
            np.testing.assert_allclose(_complex(core, final), last, atol=1e-12)
        for variant, (g_core, g_x, g_dt, g_h0) in grads.items():
            core = cores[variant]
            args = {**_params(core), "x": np.asarray(x), "dt": np.asarray(dt)}
            args["h0"] = np.asarray(h0[variant])
            analytic = {**{n: getattr(g_core, n) for n in FIELDS}, "x": g_x, "dt": g_dt}
            analytic["h0"] = g_h0
            for name, value in args.items():
                if value is None:
                    continue
                direction = rng.normal(size=value.shape)

                def oracle(t, name=name, value=value, direction=direction, core=core, args=args):
                    moved = {**args, name: value + t * direction}
                    p = {n: moved[n] for n in FIELDS}
                    y, _ = rglru_loop(
                        p, moved["x"], dt=moved["dt"], h0=_complex(core, moved["h0"]),
                        signed=True,
                    )  # fmt: skip
                    return np.sum(weights * np.tanh(y))

                numeric = (oracle(1e-6) - oracle(-1e-6)) / 2e-6
                got = float(jnp.sum(analytic[name] * direction))
                np.testing.assert_allclose(
                    got, numeric, rtol=1e-6, atol=1e-9, err_msg=f"{variant} {name}"
                )


@eqx.filter_jit
def _transitions(core, x):
    """(a_t as the signed modulus, the normalisation, r_t, outputs, gradient of Λ)."""
    r, _ = core.gates(x)
    ones = jnp.ones_like(x)
    a, gain = core._terms(x, None)[0], core._terms(ones, None)[1] / core.gates(ones)[1]
    gain = jnp.broadcast_to(gain, x.shape)
    grad = eqx.filter_grad(lambda m: jnp.sum(m(x)))(core).Lambda
    return a, gain, r, core(x), grad


def test_transitions_negative_and_bounded_at_extreme_inputs():
    """Below zero for moderate inputs; at ±1e4 (float32, gates saturated) every a_t in
    [−1, 1], strictly inside where r_t > 0, a_t² + gain² = 1, outputs and gradients
    finite. Where 2σ(Λ)^c rounds a_t to −1 in float32, the normalisation 2e^{ℓ/2}
    √(−expm1 ℓ) keeps its float64 value (√(1 − a²) would be 0)."""
    core = _core("real", jnp.float32)
    rng = np.random.default_rng(2)
    moderate = jnp.asarray(3 * rng.normal(size=(L, H)), jnp.float32)
    extreme = jnp.asarray(1e4 * np.sign(rng.normal(size=(L, H))), jnp.float32)
    a, *_ = _transitions(core, moderate)
    assert float(a.min()) < -0.1
    a, _, r, y, grad = _transitions(core, extreme)
    a, r = np.asarray(a), np.asarray(r)
    assert np.all(a > -1) and np.all(a <= 1) and np.all(a[r > 0] < 1)
    assert np.isfinite(np.asarray(y)).all() and np.isfinite(np.asarray(grad)).all()
    # Every a_t rounds to −1: r_t = σ(30) = 1, σ(Λ) = σ(−3), ℓ = 8 log σ(−3) ≈ −24.4.
    steep = eqx.tree_at(
        lambda m: (m.Lambda, m.W_a, m.b_a), core,
        (jnp.full(H, -3.0), jnp.zeros_like(core.W_a), jnp.full_like(core.b_a, 30.0)),
    )  # fmt: skip
    a, gain, *_ = _transitions(steep, moderate)
    assert np.all(np.asarray(a) == -1)
    ell = 8.0 * -np.log1p(np.exp(3.0))
    np.testing.assert_allclose(gain, 2 * np.exp(ell / 2) * np.sqrt(-np.expm1(ell)), rtol=1e-5)


def test_default_is_positive_and_zoh_refused():
    """The default is `"positive"` (a_t = σ(Λ)^{c r_t} > 0, outputs as `"positive"`
    spelled out); `"signed"` with the zero-order hold, and an unknown value, are refused."""
    key = jax.random.PRNGKey(0)
    plain = eqx_lru.RGLRU(H, heads=HEADS, key=key)
    spelled = eqx_lru.RGLRU(H, heads=HEADS, eigenvalues="positive", key=key)
    x = jnp.asarray(3 * np.random.default_rng(3).normal(size=(L, H)), jnp.float32)
    assert plain.eigenvalues == "positive"
    a = plain._terms(x, None)[0]
    r, _ = plain.gates(x)
    assert np.array_equal(a, jnp.exp(plain.c * r * jax.nn.log_sigmoid(plain.Lambda)))
    assert np.array_equal(plain(x), spelled(x))
    with pytest.raises(ValueError, match="zoh.*eigenvalues='signed'"):
        eqx_lru.RGLRU(H, eigenvalues="signed", discretization="zoh", key=key)
    with pytest.raises((ValueError, TypeError), match="eigenvalues"):
        eqx_lru.RGLRU(H, eigenvalues="negative", key=key)  # pyright: ignore[reportArgumentType]

"""`dt=` (irregular time steps) on ComplexLRU and RealLRU: the float64 NumPy oracle (the
recurrence and the kernel at the true time lags), gradients (Δt included) against central
differences of the oracle, Δt ≡ 1 against the plain call, splitting a step, packing, chunks,
`step`, and bad `dt`."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import grid_methods
from core_runs import packed_chunked_streamed
from reference import lru_dt_loop, lru_kernel_sum, lru_params_np, s5_dt_loop

import eqx_lru
from eqx_lru._cores._dt import reverse_steps

H, N, L = 3, 5, 9  # d_model ≠ d_state ≠ length
FORMS = (eqx_lru.ComplexLRU, eqx_lru.RealLRU)
PARAMS = ("nu_log", "theta_log", "gamma_log", "B_re", "B_im", "C_re", "C_im", "D")


def _layer(form, dtype=jnp.float64, method="sequential"):
    key = jax.random.PRNGKey(2)
    return form(H, N, r_min=0.5, r_max=0.95, max_phase=2.0, method=method, dtype=dtype, key=key)


def _data(dtype=jnp.float64, length=L, seed=0):
    rng = np.random.default_rng(seed)
    u = jnp.asarray(rng.normal(size=(length, H)), dtype)
    dt = jnp.asarray(rng.uniform(0.1, 3.0, size=length), dtype)
    return u, dt


def _complex_states(states):
    states = np.asarray(states)
    return states if np.iscomplexobj(states) else states[..., 0] + 1j * states[..., 1]


def _state(form, x):
    x = jnp.asarray(x)
    return x if form is eqx_lru.ComplexLRU else jnp.stack([x.real, x.imag], axis=-1)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("method", grid_methods())
@pytest.mark.parametrize("reverse", [False, True])
def test_dt_matches_oracle_float64(form, method, reverse):
    with jax.enable_x64(True):
        layer = _layer(form, method=method)
        u, dt = _data()
        x0 = np.random.default_rng(1).normal(size=(N, 2)) @ np.array([1, 1j])
        y, final = layer.run(u, dt=dt, reverse=reverse, initial_state=_state(form, x0))
        states = layer.hidden_states(u, dt=dt, reverse=reverse, initial_state=_state(form, x0))
        y_ref, states_ref = lru_dt_loop(lru_params_np(layer), u, dt, reverse=reverse, x0=x0)
        np.testing.assert_allclose(np.asarray(y), y_ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(_complex_states(states), states_ref, rtol=0, atol=1e-12)
        first = 0 if reverse else -1
        np.testing.assert_allclose(_complex_states(final), states_ref[first], atol=1e-12)
        # The same function as a sum over the inputs at their true time lags (from zero);
        # a reverse run reads the forward gaps through `reverse_steps`.
        times = np.cumsum(np.asarray(dt))
        steps = reverse_steps(dt) if reverse else dt
        kernel = lru_kernel_sum(lru_params_np(layer), u, times, reverse=reverse)
        np.testing.assert_allclose(layer(u, dt=steps, reverse=reverse), kernel, atol=1e-12)


def _oracle_loss(params, u, dt, weights):
    y, _ = lru_dt_loop(params, u, dt)
    return float(np.sum(weights * np.tanh(y)))


@pytest.mark.parametrize("form", FORMS)
def test_dt_gradients_match_oracle_finite_differences(form):
    """JAX's gradients (parameters, input, Δt) against central differences of the NumPy
    oracle along a random direction per argument; both forms give the same gradients."""
    with jax.enable_x64(True):
        layer = _layer(form)
        u, dt = _data()
        rng = np.random.default_rng(3)
        weights = rng.normal(size=(L, H))

        def loss(layer, u, dt):
            return jnp.sum(weights * jnp.tanh(layer(u, dt=dt)))

        grads = eqx.filter_jit(eqx.filter_grad(loss))(layer, u, dt)
        grad_u, grad_dt = eqx.filter_jit(jax.grad(loss, argnums=(1, 2)))(layer, u, dt)
        params = lru_params_np(layer)
        arguments = {**params, "u": np.asarray(u), "dt": np.asarray(dt)}
        analytic = {**{n: getattr(grads, n) for n in PARAMS}, "u": grad_u, "dt": grad_dt}
        eps = 1e-6
        for name, value in arguments.items():
            direction = rng.normal(size=value.shape)

            def shifted(t, name=name, value=value, direction=direction):
                moved = {**arguments, name: value + t * direction}
                p = {n: moved[n] for n in PARAMS}
                return _oracle_loss(p, moved["u"], moved["dt"], weights)

            numeric = (shifted(eps) - shifted(-eps)) / (2 * eps)
            got = float(jnp.sum(analytic[name] * direction))
            np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-8, err_msg=name)
        assert abs(float(jnp.sum(grad_dt))) > 0


def test_dt_gradients_equal_across_forms():
    with jax.enable_x64(True):
        u, dt = _data()

        def grads(form):
            def loss(layer, dt):
                return jnp.sum(jnp.tanh(layer(u, dt=dt)) ** 2)

            @eqx.filter_jit  # one program per form, not one per operation
            def both(layer, dt):
                return eqx.filter_grad(loss)(layer, dt), jax.grad(loss, 1)(layer, dt)

            return both(_layer(form), dt)

        (gc, gdc), (gr, gdr) = grads(eqx_lru.ComplexLRU), grads(eqx_lru.RealLRU)
        for name in PARAMS:
            np.testing.assert_allclose(getattr(gc, name), getattr(gr, name), rtol=1e-10)
        np.testing.assert_allclose(gdc, gdr, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("form", FORMS)
def test_dt_one_is_the_plain_lru(form):
    """Δt ≡ 1 (per position or one scalar) is today's LRU: the same outputs bit for bit
    (sequential scan), gradients to float32 rounding (per-step transitions sum their
    cotangents in another order than one shared transition)."""
    layer = _layer(form, jnp.float32)
    u, _ = _data(jnp.float32)
    ones = jnp.ones(L, jnp.float32)
    plain = layer(u)
    np.testing.assert_array_equal(layer(u, dt=ones), plain)
    np.testing.assert_array_equal(layer(u, dt=1.0), plain)
    state, y = layer.step(layer.init_state(), u[0], dt=1.0)
    state_ref, y_ref = layer.step(layer.init_state(), u[0])
    np.testing.assert_array_equal(state, state_ref)
    np.testing.assert_array_equal(y, y_ref)

    def loss(layer, dt):
        return jnp.sum(jnp.sin(layer(u, dt=dt)))

    g_dt = eqx.filter_jit(eqx.filter_grad(loss))(layer, ones)
    g = eqx.filter_jit(eqx.filter_grad(lambda layer: jnp.sum(jnp.sin(layer(u)))))(layer)
    for name in PARAMS:
        np.testing.assert_allclose(getattr(g_dt, name), getattr(g, name), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("form", FORMS)
def test_one_step_equals_two_half_steps(form):
    """A step of Δt with input u equals a step of Δt/2 with zero input, then one of Δt/2
    with u (the input enters at its own time); and in a run, inserting such an empty
    position leaves every output at the original positions unchanged."""
    with jax.enable_x64(True):
        layer = _layer(form)
        u, dt = _data()
        x0 = layer.step(layer.init_state(), u[1])[0]
        one, _ = layer.step(x0, u[0], dt=dt[0])
        half, _ = layer.step(x0, jnp.zeros(H), dt=dt[0] / 2)
        two, _ = layer.step(half, u[0], dt=dt[0] / 2)
        np.testing.assert_allclose(two, one, rtol=0, atol=1e-14)
        k = 4
        u_ins = jnp.concatenate([u[:k], jnp.zeros((1, H)), u[k:]])
        dt_ins = jnp.concatenate([dt[:k], dt[k : k + 1] / 3, 2 * dt[k : k + 1] / 3, dt[k + 1 :]])
        y_ins = layer(u_ins, dt=dt_ins)
        np.testing.assert_allclose(jnp.delete(y_ins, k, axis=0), layer(u, dt=dt), atol=1e-13)


@pytest.mark.parametrize("form", FORMS)
def test_dt_with_packing_chunks_and_step(form):
    """Packed sequences equal separate calls, chunks (`length`, `initial_state`) and `step`
    with each position's Δt equal one run."""
    layer = _layer(form, jnp.float32)
    u, dt = _data(jnp.float32, length=12)
    (y, final), *pairs = packed_chunked_streamed(layer, u, dt)
    packed, separate = pairs[0]
    np.testing.assert_allclose(packed, separate, atol=1e-6)
    for ys, last in pairs[1:]:
        np.testing.assert_allclose(ys, y, atol=1e-6)
        np.testing.assert_allclose(last, final, atol=1e-6)


@pytest.mark.parametrize(
    "dt, error, match",
    [
        (np.full(L, -0.5), ValueError, "positive and finite.*-0.5"),
        (np.r_[np.ones(L - 1), np.nan], ValueError, "positive and finite"),
        (np.zeros(L), ValueError, "positive and finite.*0.0"),
        (np.ones(L + 1), ValueError, rf"shape \({L},\).*got shape \({L + 1},\)"),
        (np.ones((L, 1)), ValueError, rf"shape \({L},\)"),
        (np.ones(L, np.int32), ValueError, "real floating.*int32"),
        (jnp.ones(L, jnp.complex64), ValueError, "real floating.*complex64"),
    ],
)
def test_bad_dt_one_clear_error(dt, error, match):
    layer = _layer(eqx_lru.RealLRU, jnp.float32)
    u, _ = _data(jnp.float32)
    with pytest.raises(error, match=match):
        layer(u, dt=dt)


def test_bad_dt_step_jit_and_cores_without_dt():
    layer = _layer(eqx_lru.ComplexLRU, jnp.float32)
    u, _ = _data(jnp.float32)
    with pytest.raises(ValueError, match=r"`dt` must have shape \(\).*one position"):
        layer.step(layer.init_state(), u[0], dt=jnp.ones(L))
    with pytest.raises(Exception, match="positive and finite"):
        jax.jit(lambda dt: layer(u, dt=dt))(-jnp.ones(L)).block_until_ready()
    key = jax.random.PRNGKey(0)
    for core in (eqx_lru.ablation.DiagonalRNN(H, N, key=key), eqx_lru.baselines.S4D(H, 4, key=key)):
        with pytest.raises(TypeError, match=f"{type(core).__name__} takes no `dt`"):
            core(u, dt=jnp.ones(L))
    s4d = eqx_lru.baselines.S4D(H, 4, mode="convolution", key=key)
    with pytest.raises(TypeError, match="S4D takes no `dt`"):
        s4d(u, dt=jnp.ones(L))  # the convolution path would otherwise drop it


S5_PARAMS = ("Lambda_re", "Lambda_im", "log_step", "B_re", "B_im", "C_re", "C_im", "D")


@pytest.mark.parametrize("form", ["complex", "real"])
def test_s5_dt_zero_order_hold(form):
    """S5 with `dt`: the float64 oracle of the per-step zero-order hold (both forms, reverse
    too), gradients with respect to Δt and Δ against central differences of it, Δt ≡ 1 equal
    to the plain call, and a step of Δt equal to two of Δt/2 with the input held."""
    with jax.enable_x64(True):
        core = eqx_lru.baselines.S5(H, 8, form=form, dtype=jnp.float64, key=jax.random.PRNGKey(3))
        core = eqx.tree_at(lambda m: m.log_step, core, core.log_step + 2.0)  # steps ~ 0.1..1
        u, dt = _data()
        p = {n: np.asarray(getattr(core, n)) for n in S5_PARAMS}
        for reverse in (False, True):
            y = core(u, dt=dt, reverse=reverse)
            np.testing.assert_allclose(y, s5_dt_loop(p, u, dt, reverse=reverse), atol=1e-12)
        np.testing.assert_allclose(core(u, dt=jnp.ones(L)), core(u), rtol=0, atol=1e-13)
        weights = np.random.default_rng(5).normal(size=(L, H))

        def loss(core, dt):
            return jnp.sum(weights * jnp.tanh(core(u, dt=dt)))

        grad_dt = eqx.filter_jit(jax.grad(loss, 1))(core, dt)
        grads = eqx.filter_jit(eqx.filter_grad(loss))(core, dt)
        rng, eps = np.random.default_rng(6), 1e-6
        for name, value, analytic in (("dt", dt, grad_dt), ("log_step", p["log_step"], None)):
            analytic = grads.log_step if analytic is None else analytic
            direction = rng.normal(size=np.shape(value))

            def oracle(t, name=name, value=value, direction=direction):
                q = {**p, name: np.asarray(value) + t * direction} if name != "dt" else p
                steps = np.asarray(dt) + t * direction if name == "dt" else dt
                return np.sum(weights * np.tanh(s5_dt_loop(q, u, steps)))

            numeric = (oracle(eps) - oracle(-eps)) / (2 * eps)
            got = float(jnp.sum(analytic * direction))
            np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-9, err_msg=name)
        x0 = core.step(core.init_state(), u[1])[0]
        one, _ = core.step(x0, u[0], dt=dt[0])
        half, _ = core.step(core.step(x0, u[0], dt=dt[0] / 2)[0], u[0], dt=dt[0] / 2)
        np.testing.assert_allclose(half, one, rtol=0, atol=1e-14)


def test_dt_with_bfloat16_storage():
    """`RealLRU(compute_dtype=bfloat16)` with `dt`: the transitions stay in float32 (only
    the stored states and projection operands are rounded), `step` matches the parallel
    call, and the output is within bfloat16 rounding of the float32 layer's."""
    kwargs: dict[str, Any] = dict(r_min=0.5, r_max=0.95, key=jax.random.PRNGKey(0))
    low = eqx_lru.RealLRU(H, N, compute_dtype=jnp.bfloat16, **kwargs)
    full = eqx_lru.RealLRU(H, N, **kwargs)
    u, dt = _data(jnp.float32)
    y = low(u, dt=dt)
    _, ys = jax.lax.scan(lambda c, x: low.step(c, x[0], dt=x[1]), low.init_state(), (u, dt))
    np.testing.assert_allclose(ys, y, rtol=0, atol=1e-6)
    reference = full(u, dt=dt)
    assert float(jnp.max(jnp.abs(y - reference)) / jnp.max(jnp.abs(reference))) < 1e-2

"""`discretization=`: what an input means when `dt` is not 1 (issue 33 item 2).

`ComplexLRU`/`RealLRU` take `"impulse"` (default) and `"zoh"`; `RGLRU` takes
`"variance_preserving"` (default), `"impulse"` and `"zoh"`. Checked against float64 NumPy
loops written here for every choice, in both forms and the RG-LRU with and without its
phase; the zero-order hold's resampling property (a piecewise-constant input sampled at
Δ = 1 and at Δ = 0.5 gives the same states at the shared times) in the cores, through
`LRUModel`, `StreamPool` and both export formats; Δt ≡ 1 against the plain call; the
forms' agreement in values and gradients; bad names.

Sizes are distinct: the LRU's d_model H = 3, d_state N = 5, length L = 7; the RG-LRU's
d_model 4 (2 complex modes with its phase); the model's input 3, output 2, width 4,
state 5."""

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import export_formats, export_session, zero_carry
from reference import lru_dt_loop, lru_params_np, rglru_loop

import eqx_lru
import eqx_lru.export as ex

H, N, L, HR = 3, 5, 7, 4
FORMS = (eqx_lru.ComplexLRU, eqx_lru.RealLRU)
LRU_CHOICES = ("impulse", "zoh")
RGLRU_CHOICES = ("variance_preserving", "impulse", "zoh")


# --- float64 oracles: plain loops ------------------------------------------------------------


def lru_oracle(p, u, dt, discretization, *, reverse=False, x0=None):
    """x_k = λ^Δ x + w γ B u_k, w = 1 (impulse) or (λ^Δ − 1)/(λ − 1) (zoh); y = Re(C x) + D u.
    Returns (y, complex states)."""
    log_lam = -np.exp(p["nu_log"]) + 1j * np.exp(p["theta_log"])
    B = (p["B_re"] + 1j * p["B_im"]) * np.exp(p["gamma_log"])[:, None]
    C = p["C_re"] + 1j * p["C_im"]
    x = np.zeros(N, complex) if x0 is None else np.asarray(x0, complex)
    states, y = np.zeros((len(u), N), complex), np.zeros((len(u), H))
    for k in range(len(u) - 1, -1, -1) if reverse else range(len(u)):
        lam_dt = np.exp(log_lam * dt[k])
        w = 1.0 if discretization == "impulse" else (lam_dt - 1) / (np.exp(log_lam) - 1)
        x = lam_dt * x + w * (B @ u[k])
        states[k], y[k] = x, (C @ x).real + p["D"] * u[k]
    return y, states


def rglru_params_np(core):
    names = ("Lambda", "theta", "W_a", "b_a", "W_x", "b_x")
    return {n: None if getattr(core, n) is None else np.asarray(getattr(core, n)) for n in names}


def rglru_oracle(p, x, dt, discretization, *, c=8.0):
    """a = σ(Λ)^{c r Δ} (e^{iθ r Δ}); h = a h + g i x̃ with g = √(1 − |a|²) at the step
    (variance-preserving) or at Δ = 1 (impulse), times (a^Δ − 1)/(a − 1) at Δ = 1's a
    (zoh). Returns the outputs ([Re h, Im h] with the phase)."""
    phase, modes = p["theta"] is not None, p["Lambda"].shape[0]

    def gate(w, b, xt):
        z = np.einsum("hi,hio->ho", xt.reshape(w.shape[0], -1), w) + b
        return 1 / (1 + np.exp(-z.reshape(-1)))

    h, y = np.zeros(modes, complex), np.zeros_like(x)
    for k in range(len(x)):
        r, i = gate(p["W_a"], p["b_a"], x[k]), gate(p["W_x"], p["b_x"], x[k])
        mu = c * r * np.log(1 / (1 + np.exp(-p["Lambda"]))) + (1j * p["theta"] * r if phase else 0)
        a_dt, a_one = np.exp(mu * dt[k]), np.exp(mu)
        if discretization == "variance_preserving":
            g = np.sqrt(1 - np.abs(a_dt) ** 2)
        else:
            g = np.sqrt(1 - np.abs(a_one) ** 2)
            g = g if discretization == "impulse" else g * (a_dt - 1) / (a_one - 1)
        xk = x[k, :modes] + 1j * x[k, modes:] if phase else x[k]
        h = a_dt * h + g * i * xk
        y[k] = np.concatenate([h.real, h.imag]) if phase else h.real
    return y


# --- the cores ---------------------------------------------------------------------------------


def _lrus(dtype=jnp.float64):
    key = jax.random.PRNGKey(2)
    ring: dict[str, Any] = dict(
        r_min=0.5, r_max=0.97, max_phase=2.0, method="sequential", dtype=dtype
    )
    return {
        f"{form.__name__}/{d}": form(H, N, discretization=d, key=key, **ring)
        for form in FORMS
        for d in LRU_CHOICES
    }


def _rglrus(dtype=jnp.float64):
    return {
        f"RGLRU{'+phase' * phase}/{d}": _rglru(phase, d, dtype)
        for phase in (False, True)
        for d in RGLRU_CHOICES
    }


def _rglru(phase, discretization, dtype):
    """An RG-LRU with nonzero gate biases (zeros at initialisation would hide a swapped
    gate)."""
    core = eqx_lru.RGLRU(
        HR, phase=phase, r_min=0.6, r_max=0.95, discretization=discretization,
        method="sequential", dtype=dtype, key=jax.random.PRNGKey(3),
    )  # fmt: skip
    rng = np.random.default_rng(int(phase))
    biases = [jnp.asarray(rng.normal(size=b.shape), dtype) for b in (core.b_a, core.b_x)]
    return eqx.tree_at(lambda m: (m.b_a, m.b_x), core, biases)


def _complex(states):
    states = np.asarray(states)
    return states if np.iscomplexobj(states) else states[..., 0] + 1j * states[..., 1]


def _data(length=L, width=H, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(length, width)), rng.uniform(0.05, 2.5, size=length)


@eqx.filter_jit
def _runs(lrus, rglrus, u, ur, dt, x0):
    """Every core with `dt`: the LRUs forward from `x0` (outputs, states, `step` over the
    sequence) and reverse from zero; the RG-LRUs forward (outputs, `step`)."""

    def streamed(core, x, state):
        step = lambda s, xs: core.step(s, xs[0], dt=xs[1])  # noqa: E731
        return jax.lax.scan(step, state, (x, dt))[1]

    out = {}
    for name, core in lrus.items():
        start = x0 if name.startswith("Complex") else jnp.stack([x0.real, x0.imag], axis=-1)
        out[name] = (
            core(u, dt=dt, initial_state=start),
            core.hidden_states(u, dt=dt, initial_state=start),
            streamed(core, u, start),
            core(u, dt=dt, reverse=True),
        )
    for name, core in rglrus.items():
        out[name] = (core(ur, dt=dt), streamed(core, ur, core.init_state()))
    return out


@pytest.mark.slow
def test_every_choice_matches_its_float64_oracle():
    """Both LRU forms under each choice (forward from a nonzero state, `step`, reverse)
    and the RG-LRU with and without its phase under each: the NumPy loops above. `impulse`
    is today's LRU (`reference.lru_dt_loop`), `variance_preserving` today's RG-LRU
    (`reference.rglru_loop`), and they are the defaults. The step of the first position
    processed from the zero state (the LRU's reverse run: `dt[-1]`; the RG-LRU's forward
    run: `dt[0]`): tripling it moves the first output under every choice but `impulse`."""
    with jax.enable_x64(True):
        lrus, rglrus = _lrus(), _rglrus()
        u, dt = _data()
        ur, _ = _data(width=HR, seed=1)
        rng = np.random.default_rng(4)
        x0 = rng.normal(size=N) + 1j * rng.normal(size=N)
        got = _runs(lrus, rglrus, u, ur, dt, jnp.asarray(x0))
        tripled = dt.copy()
        tripled[[0, -1]] *= 3
        moved = _runs(lrus, rglrus, u, ur, tripled, jnp.asarray(x0))
        for tag, layer in lrus.items():
            p, choice = lru_params_np(layer), tag.split("/")[1]
            y, states = lru_oracle(p, u, dt, choice, x0=x0)
            call, hidden, stream, reverse = got[tag]
            np.testing.assert_allclose(call, y, atol=1e-12, err_msg=tag)
            np.testing.assert_allclose(_complex(hidden), states, atol=1e-12, err_msg=tag)
            np.testing.assert_allclose(stream, y, atol=1e-12, err_msg=tag)
            y_rev, _ = lru_oracle(p, u, dt, choice, reverse=True)
            np.testing.assert_allclose(reverse, y_rev, atol=1e-12, err_msg=tag)
            if choice == "impulse":
                np.testing.assert_allclose(call, lru_dt_loop(p, u, dt, x0=x0)[0], atol=1e-12)
            first_moved = not np.allclose(moved[tag][3][-1], reverse[-1], atol=1e-9)
            assert first_moved == (choice == "zoh"), tag
        for tag, core in rglrus.items():
            choice = tag.split("/")[1]
            y = rglru_oracle(rglru_params_np(core), ur, dt, choice)
            call, stream = got[tag]
            np.testing.assert_allclose(call, y, atol=1e-12, err_msg=tag)
            np.testing.assert_allclose(stream, y, atol=1e-12, err_msg=tag)
            if choice == "variance_preserving":
                today = rglru_loop(rglru_params_np(core), ur, dt=dt)[0]
                np.testing.assert_allclose(call, today, atol=1e-12)
            first_moved = not np.allclose(moved[tag][0][0], call[0], atol=1e-9)
            assert first_moved == (choice != "impulse"), tag
        key = jax.random.PRNGKey(0)
        assert eqx_lru.ComplexLRU(H, N, key=key).discretization == "impulse"
        assert eqx_lru.RealLRU(H, N, key=key).discretization == "impulse"
        assert eqx_lru.RGLRU(HR, key=key).discretization == "variance_preserving"


@eqx.filter_jit
def _resampled(cores, u, u_half):
    """Each core's states on the unit grid (no `dt`) and on the half grid (`dt=0.5`)."""

    def states(core, x, dt):
        options = {} if dt is None else {"dt": dt}
        if isinstance(core, eqx_lru.RGLRU):
            return core(x, **options)  # its outputs are its states
        return core.hidden_states(x, **options)

    return [(states(c, u, None), states(c, u_half, jnp.asarray(0.5, u.dtype))) for c in cores]


def test_zoh_keeps_a_held_input_under_resampling():
    """A piecewise-constant input sampled at Δ = 1 and at Δ = 0.5 (each value repeated,
    `dt=0.5`): under `"zoh"` the states at the shared times are equal, in both LRU forms
    and the RG-LRU with and without its phase (its gates read the same value twice).
    `"impulse"` and the RG-LRU's `"variance_preserving"` count each sample as an
    observation and do not."""
    with jax.enable_x64(True):
        lrus, rglrus = _lrus(), _rglrus()
        held = [lrus["ComplexLRU/zoh"], lrus["RealLRU/zoh"], rglrus["RGLRU/zoh"]]
        held.append(rglrus["RGLRU+phase/zoh"])
        others = [lrus["ComplexLRU/impulse"], rglrus["RGLRU+phase/variance_preserving"]]
        others.append(rglrus["RGLRU+phase/impulse"])
        u, _ = _data()
        ur, _ = _data(width=HR, seed=1)
        lru_runs = _resampled(held[:2] + others[:1], jnp.asarray(u), jnp.repeat(u, 2, axis=0))
        rg_runs = _resampled(held[2:] + others[1:], jnp.asarray(ur), jnp.repeat(ur, 2, axis=0))
        runs = lru_runs[:2] + rg_runs[:2] + lru_runs[2:] + rg_runs[2:]
        for k, (unit, half) in enumerate(runs):
            same = np.allclose(np.asarray(half)[1::2], unit, rtol=1e-10, atol=1e-12)
            assert same == (k < len(held)), k


@eqx.filter_jit
def _unit_steps(cores, u, ur):
    def both(core, x):
        return core(x, dt=jnp.ones(x.shape[0], x.dtype)), core(x)

    return {n: both(c, ur if isinstance(c, eqx_lru.RGLRU) else u) for n, c in cores.items()}


def test_unit_steps_are_the_plain_call():
    """`dt ≡ 1` is the core without `dt` under every choice (float32, the sequential
    scan; the RG-LRU with its phase, and without it under `zoh`): bit for bit for
    `impulse` and `variance_preserving`, to rounding for `zoh` (whose weight
    (λ − 1)/(λ − 1) is 1 up to how XLA fuses its two halves)."""
    rglrus = {k: v for k, v in _rglrus(jnp.float32).items() if "phase" in k or "zoh" in k}
    cores = {**_lrus(jnp.float32), **rglrus}
    u, _ = _data()
    ur, _ = _data(width=HR, seed=1)
    got = _unit_steps(cores, jnp.asarray(u, jnp.float32), jnp.asarray(ur, jnp.float32))
    for name, (with_dt, plain) in got.items():
        if name.endswith("zoh"):
            np.testing.assert_allclose(with_dt, plain, rtol=1e-6, atol=1e-7, err_msg=name)
        else:
            np.testing.assert_array_equal(with_dt, plain, err_msg=name)


@pytest.mark.slow
def test_forms_agree_under_zoh_values_and_gradients():
    """`ComplexLRU` and `RealLRU` under `"zoh"`, and the RG-LRU's complex and real forms:
    the same outputs and gradients (every parameter, the input and the steps), and the
    LRU's gradient with respect to the steps agrees with central differences of the
    oracle."""
    with jax.enable_x64(True):
        lrus, rglrus = _lrus(), _rglrus()
        pairs = [(lrus["ComplexLRU/zoh"], lrus["RealLRU/zoh"])]
        pairs.append((rglrus["RGLRU+phase/zoh"], rglrus["RGLRU+phase/zoh"].to_form("real")))
        u, dt = _data()
        ur, _ = _data(width=HR, seed=1)
        weights = np.random.default_rng(5).normal(size=(L, H))

        def loss(core, x, dt):
            y = core(x, dt=dt)
            return jnp.sum(jnp.tanh(y) * (weights if y.shape[-1] == H else 1.0))

        grads = eqx.filter_jit(
            lambda pairs, u, ur, dt: [
                [eqx.filter_grad(loss)(c, x, dt) for c in pair]
                + [jax.grad(loss, (1, 2))(c, x, dt) for c in pair]
                + [loss(c, x, dt) for c in pair]
                for pair, x in zip(pairs, (u, ur), strict=True)
            ]
        )(pairs, jnp.asarray(u), jnp.asarray(ur), jnp.asarray(dt))
        for g_c, g_r, inputs_c, inputs_r, loss_c, loss_r in grads:
            np.testing.assert_allclose(loss_c, loss_r, rtol=1e-12)
            for a, b in zip(jax.tree_util.tree_leaves(g_c), jax.tree_util.tree_leaves(g_r),
                            strict=True):  # fmt: skip
                np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
            for a, b in zip(inputs_c, inputs_r, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        p = lru_params_np(pairs[0][0])
        direction = np.random.default_rng(6).normal(size=L)

        def oracle_loss(t):
            return np.sum(np.tanh(lru_oracle(p, u, dt + t * direction, "zoh")[0]) * weights)

        numeric = (oracle_loss(1e-6) - oracle_loss(-1e-6)) / 2e-6
        analytic = float(np.sum(np.asarray(grads[0][2][1]) * direction))
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6)


def test_weight_is_stable_near_one_and_for_tiny_steps():
    """`hold_weight` against float64 (mpmath-free: the series (e^{μΔ} − 1)/(e^μ − 1) in
    float64 from float32 inputs) for λ → 1 and tiny steps, in float32: relative error
    below 1e-5 where the plain formula loses every digit; the limit Δt where μ = 0, with
    finite gradients."""
    from eqx_lru._cores._discretization import hold_weight, hold_weight_real

    mu_re = np.array([-1e-7, -1e-5, -1e-3, -0.5, -2e-6, 0.0], np.float32)
    mu_im = np.array([1e-7, 0.0, 3e-3, 2.0, 1e-6, 0.0], np.float32)
    dt = np.array([1e-6, 0.5, 1e-4, 3.0, 1.0, 0.25], np.float32)
    w_re, w_im = jax.jit(hold_weight)(mu_re, mu_im, dt)
    mu = mu_re.astype(np.float64) + 1j * mu_im.astype(np.float64)
    exact = np.where(mu == 0, dt, np.expm1(mu * dt) / np.where(mu == 0, 1, np.expm1(mu)))
    np.testing.assert_allclose(np.asarray(w_re) + 1j * np.asarray(w_im), exact, rtol=1e-5)
    real = jax.jit(hold_weight_real)(mu_re, dt)
    exact = np.where(
        mu_re == 0,
        dt,
        np.expm1(mu_re * dt.astype(float))
        / np.expm1(np.where(mu_re == 0, 1.0, mu_re.astype(float))),
    )
    np.testing.assert_allclose(real, exact, rtol=1e-5)
    grads = jax.grad(lambda m: jnp.sum(jnp.stack(hold_weight(m, m, jnp.asarray(dt)))))(mu_re)
    assert np.isfinite(grads).all()


@pytest.mark.parametrize("core", [eqx_lru.ComplexLRU, eqx_lru.RealLRU, eqx_lru.RGLRU])
def test_bad_name_is_one_clear_error(core):
    key = jax.random.PRNGKey(0)
    for bad in ("ZOH", "exact", "variance_preserving" if core is not eqx_lru.RGLRU else ""):
        with pytest.raises(ValueError, match=r"`discretization` must be one of.*'zoh'"):
            core(4, 4, discretization=bad, key=key)


# --- through a model, a pool of streams and export ----------------------------------------------

IN, OUT, W, S = 3, 2, 4, 5


def _model(core, discretization):
    block = functools.partial(
        eqx_lru.LRUBlock, core=functools.partial(core, discretization=discretization),
        norm="layer",
    )  # fmt: skip
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        IN, OUT, W, S, 1, pooling=None, block=block, key=jax.random.PRNGKey(7)
    )


@eqx.filter_jit
def _model_runs(model, state, x, x_half):
    call = lambda x, dt: model(x, state, dt=dt, inference=True)[0]  # noqa: E731
    half = jnp.full(x_half.shape[0], 0.5, x.dtype)
    pool = eqx_lru.StreamPool(model, 2).admit(0).admit(1)
    padded = jnp.stack([jnp.pad(x, ((0, x.shape[0]), (0, 0))), x_half])
    steps = jnp.stack([jnp.ones_like(half), half])
    lengths = jnp.asarray([x.shape[0], x_half.shape[0]], jnp.int32)
    _, pooled = pool.chunk(model, padded, state, length=lengths, dt=steps)
    step = lambda c, xs: model.step(c, xs[0], state, dt=xs[1])  # noqa: E731
    streamed = jax.lax.scan(step, model.init_carry(), (x_half, half))[1]
    return call(x, None), call(x_half, half), pooled, streamed


def test_model_and_pool_carry_the_choice():
    """`LRUModel` (blocks are position-wise around the core) of `"zoh"` cores: the
    resampled input's outputs at the shared times equal the unit grid's, in the call, in
    `step` and in a `StreamPool`'s `chunk` (a unit-grid slot and a half-grid slot); the
    same model with `"impulse"` cores does not keep them. (`ComplexLRU`; `RealLRU` is the
    same function, `test_forms_agree_under_zoh_values_and_gradients`.)"""
    x = np.random.default_rng(8).normal(size=(6, IN)).astype(np.float32)
    x_half = np.repeat(x, 2, axis=0)
    for choice in LRU_CHOICES:
        model, state = _model(eqx_lru.ComplexLRU, choice)
        unit, half, pooled, streamed = _model_runs(model, state, x, x_half)
        kept = np.allclose(np.asarray(half)[1::2], unit, rtol=1e-4, atol=1e-5)
        assert kept == (choice == "zoh"), choice
        np.testing.assert_allclose(streamed, half, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(pooled[1], half, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(pooled[0][: len(x)], unit, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", export_formats())
def test_export_keeps_the_choice(fmt):
    """Both exported programs (`dt=True`) of a `"zoh"` model equal its call and `step`
    with `dt`, and keep the resampling property."""
    model, state = _model(eqx_lru.ComplexLRU, "zoh")
    sequence = ex.export(model, state, format=fmt, program="sequence", dt=True)
    step = ex.export(model, state, format=fmt, program="step", dt=True)
    program, stepper = export_session(fmt, sequence.data), export_session(fmt, step.data)
    x = np.random.default_rng(9).normal(size=(1, 6, IN)).astype(np.float32)
    x_half = np.repeat(x, 2, axis=1)  # the model test's shapes: its compiled runs
    half = np.full((1, 12), 0.5, np.float32)
    unit, _, pooled, streamed = _model_runs(model, state, x[0], x_half[0])
    tolerance: dict[str, Any] = dict(rtol=1e-5, atol=1e-5)
    got = program(x_half, np.array([12], np.int32), half, *zero_carry(sequence.manifest, 1))[0]
    np.testing.assert_allclose(got[0], pooled[1], **tolerance)
    np.testing.assert_allclose(got[0, 1::2], unit, rtol=1e-4, atol=1e-5)
    carry = zero_carry(step.manifest, 1)
    for t in range(12):
        y, *carry = stepper(x_half[:, t], half[:, t], *carry)
        np.testing.assert_allclose(y[0], streamed[t], **tolerance)

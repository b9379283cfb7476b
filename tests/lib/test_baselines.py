"""The baseline cores S4D and S5 (`eqx_lru.baselines`) against float64 NumPy loops of their
continuous -> discrete formulas (zero-order hold computed independently with
`scipy.linalg.expm`), RNN mode, reverse, gradients, optimiser labels, errors, and a short
training run of each core inside `LRUModel`."""

import functools
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg

import eqx_lru
from eqx_lru.baselines import S4D, S5, hippo_n, hippo_n_modes, s4d_eigenvalues, s5_eigenbasis

H, N, L = 3, 10, 13  # d_model, d_state (N/2 = 5 complex modes), length: all distinct
CORES = {
    "s4d_lin": functools.partial(S4D, init="lin"),
    "s4d_inv": functools.partial(S4D, init="inv"),
    "s5": functools.partial(S5, blocks=1),
}


def _perturbed(core, key):
    """Move every parameter off its structured init, so no formula is tested at a special
    point (B = 1, Re A = -1/2, ...)."""
    leaves, tree = jax.tree_util.tree_flatten(core)
    keys = jax.random.split(key, len(leaves))
    leaves = [
        x + 0.2 * jax.random.normal(k, x.shape, x.dtype) if eqx.is_inexact_array(x) else x
        for x, k in zip(leaves, keys, strict=True)
    ]
    return jax.tree_util.tree_unflatten(tree, leaves)


def _zoh_np(a: np.ndarray, b: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """ZOH of dx/dt = A x + B u (A diagonal, given as a vector; B a matrix) by the
    augmented matrix exponential expm([[A dt, B dt], [0, 0]]) = [[Abar, Bbar], [0, I]]."""
    m, k = b.shape
    aug = np.zeros((m + k, m + k), complex)
    aug[:m, :m] = np.diag(a) * dt
    aug[:m, m:] = b * dt
    e = scipy.linalg.expm(aug)
    return np.diag(e[:m, :m]), e[:m, m:]


def _oracle(core, u, reverse=False, x0=None):
    """Float64 NumPy loop of x_k = Abar x_{k-1} + Bbar u_k, y_k = 2 Re(C x_k) + D u_k."""
    p = {k: np.asarray(v, np.float64) for k, v in vars(core).items() if eqx.is_array(v)}
    u = np.asarray(u, np.float64)
    if isinstance(core, S4D):
        a = -np.exp(p["A_re_log"]) + 1j * p["A_im"]
        b, c = p["B_re"] + 1j * p["B_im"], p["C_re"] + 1j * p["C_im"]
        per_channel = [_zoh_np(a[h], b[h][:, None], np.exp(p["log_dt"][h])) for h in range(H)]
        abar = np.stack([z[0] for z in per_channel])  # (H, M)
        bbar = np.stack([z[1][:, 0] for z in per_channel])  # (H, M)
        drive, readout = lambda ut: bbar * ut[:, None], lambda x: 2 * np.sum(c * x, -1).real
    else:
        a = p["Lambda_re"] + 1j * p["Lambda_im"]
        b, c = p["B_re"] + 1j * p["B_im"], p["C_re"] + 1j * p["C_im"]
        per_mode = [
            _zoh_np(a[j : j + 1], np.ones((1, 1)), np.exp(p["log_step"][j]))
            for j in range(a.shape[0])
        ]
        abar = np.array([z[0][0] for z in per_mode])
        bbar = np.array([z[1][0, 0] for z in per_mode])[:, None] * b
        drive, readout = lambda ut: bbar @ ut, lambda x: 2 * (c @ x).real
    x = np.zeros(abar.shape, complex) if x0 is None else np.asarray(x0, np.complex128)
    y = np.zeros_like(u)
    for k in range(L - 1, -1, -1) if reverse else range(L):
        x = abar * x + drive(u[k])
        y[k] = readout(x) + p["D"] * u[k]
    return y


@pytest.mark.parametrize("name", list(CORES))
def test_matches_float64_oracle(name):
    with jax.enable_x64(True):
        make = functools.partial(CORES[name], H, N, dtype=jnp.float64, key=jax.random.PRNGKey(1))
        cores = [
            _perturbed(make(method=m), jax.random.PRNGKey(2)) for m in ("sequential", "associative")
        ]
        u = jax.random.normal(jax.random.PRNGKey(3), (L, H), jnp.float64)
        x0 = jax.random.normal(jax.random.PRNGKey(4), (2,) + cores[0].init_state().shape)
        x0 = jax.lax.complex(x0[0], x0[1])
        for core, reverse in ((cores[0], False), (cores[1], True), (cores[1], False)):
            y = core(u, reverse=reverse)
            assert y.shape == (L, H) and y.dtype == jnp.float64
            np.testing.assert_allclose(y, _oracle(core, u, reverse), rtol=1e-10, atol=1e-10)
        y = cores[0](u, initial_state=x0)
        np.testing.assert_allclose(y, _oracle(cores[0], u, x0=x0), rtol=1e-10, atol=1e-10)


def test_s4d_convolution_mode_matches_oracle():
    with jax.enable_x64(True):
        core = _perturbed(
            S4D(H, N, init="inv", mode="convolution", dtype=jnp.float64, key=jax.random.PRNGKey(1)),
            jax.random.PRNGKey(2),
        )
        u = jax.random.normal(jax.random.PRNGKey(3), (L, H), jnp.float64)
        for reverse in (False, True):
            np.testing.assert_allclose(
                core(u, reverse=reverse), _oracle(core, u, reverse), rtol=1e-10, atol=1e-10
            )
        # With an initial state (or segments) the call runs the recurrence: the same function.
        state = core.run(u[:4])[1]
        np.testing.assert_allclose(
            core(u[4:], initial_state=state), core(u)[4:], rtol=1e-10, atol=1e-10
        )


def test_s4d_init():
    for init in ("lin", "inv"):
        core = S4D(H, N, init=init, dt_min=0.01, dt_max=0.05, key=jax.random.PRNGKey(0))
        n = np.arange(N // 2)
        expected = np.pi * n if init == "lin" else N / np.pi * (N / (2 * n + 1) - 1)
        np.testing.assert_allclose(core.A_im, np.broadcast_to(expected, (H, N // 2)), rtol=1e-6)
        np.testing.assert_allclose(-np.exp(core.A_re_log), -0.5, rtol=1e-6)
        assert core.init_state().shape == (H, N // 2) and core.d_state == N
        assert np.all(core.log_dt >= np.log(0.01)) and np.all(core.log_dt <= np.log(0.05))
        np.testing.assert_array_equal(core.B_re, 1.0)
    assert s4d_eigenvalues(4, "lin")[1] == pytest.approx([0.0, np.pi])


def test_hippo_n_eigenbasis():
    size = 8
    s = hippo_n(size)
    np.testing.assert_allclose(np.diag(s), -0.5)
    np.testing.assert_allclose(s + 0.5 * np.eye(size), -(s + 0.5 * np.eye(size)).T, atol=1e-12)
    # S = -A_LegS + p p^T, entry by entry from the HiPPO-LegS definition.
    for n in range(size):
        for k in range(size):
            legs = np.sqrt((2 * n + 1) * (2 * k + 1)) if n > k else (n + 1 if n == k else 0)
            assert s[n, k] == pytest.approx(-legs + np.sqrt((n + 0.5) * (k + 0.5)))
    lam, v = hippo_n_modes(size)
    half = v @ np.diag(lam) @ v.conj().T
    np.testing.assert_allclose(half + half.conj(), s, atol=1e-10)
    assert np.all(np.imag(lam) > 0) and np.allclose(np.real(lam), -0.5)
    lam2, v2 = s5_eigenbasis(2 * size, 2)  # two blocks: block-diagonal, eigenvalues repeated
    np.testing.assert_allclose(lam2, np.tile(lam, 2))
    full = v2 @ np.diag(lam2) @ v2.conj().T
    np.testing.assert_allclose(
        np.real(full + full.conj()), np.asarray(scipy.linalg.block_diag(s, s)), atol=1e-10
    )
    core = S5(H, 2 * size, blocks=2, key=jax.random.PRNGKey(0))
    np.testing.assert_allclose(core.Lambda_im, np.imag(lam2), rtol=1e-6)


def test_init_under_vmap():
    """Both inits are traceable: `filter_vmap` over keys builds an ensemble."""
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    for make in (S4D, S5):
        ensemble = eqx.filter_jit(eqx.filter_vmap(lambda k, make=make: make(H, N, key=k)))(keys)
        assert ensemble.D.shape == (2, H) and ensemble.C_re.shape == (2, H, N // 2)
        assert not np.allclose(ensemble.C_re[0], ensemble.C_re[1])


@pytest.mark.parametrize("name", list(CORES))
def test_rnn_mode_equals_parallel(name):
    core = _perturbed(CORES[name](H, N, key=jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    u = jax.random.normal(jax.random.PRNGKey(2), (L, H))
    y = core(u)

    def body(state, u_t):
        return core.step(state, u_t)

    final, ys = jax.lax.scan(body, core.init_state(), u)
    np.testing.assert_allclose(ys, y, rtol=2e-5, atol=2e-5)
    # Continue from a state: the second half from the state after the first half.
    split = 5
    state, _ = jax.lax.scan(body, core.init_state(), u[:split])
    np.testing.assert_allclose(
        core(u[split:], initial_state=state), y[split:], rtol=2e-5, atol=2e-5
    )


@pytest.mark.parametrize("name", ["s4d_inv", "s5"])
def test_real_form_equals_complex_form(name):
    key = jax.random.PRNGKey(0)
    complex_core = _perturbed(CORES[name](H, N, key=key), jax.random.PRNGKey(1))
    real_core = _perturbed(CORES[name](H, N, form="real", key=key), jax.random.PRNGKey(1))
    assert real_core.init_state().dtype == jnp.float32
    u = jax.random.normal(jax.random.PRNGKey(2), (L, H))
    for reverse in (False, True):
        np.testing.assert_allclose(
            real_core(u, reverse=reverse), complex_core(u, reverse=reverse), rtol=1e-5, atol=1e-5
        )
    final, ys = jax.lax.scan(lambda s, u_t: real_core.step(s, u_t), real_core.init_state(), u)
    np.testing.assert_allclose(ys, complex_core(u), rtol=1e-5, atol=1e-5)
    x = complex_core.hidden_states(u)[-1]
    np.testing.assert_allclose(final, jnp.stack([x.real, x.imag], axis=-2), rtol=1e-5, atol=1e-5)
    # No complex number anywhere in the real form's computation, forward or backward.
    jaxpr = jax.make_jaxpr(jax.grad(lambda c: jnp.sum(c(u) ** 2)))(real_core)
    dtypes = {v.aval.dtype for eqn in jaxpr.jaxpr.eqns for v in eqn.outvars}
    assert not any(jnp.issubdtype(d, jnp.complexfloating) for d in dtypes), dtypes


@pytest.mark.parametrize("name", ["s4d_inv", "s5"])
def test_gradient_matches_finite_differences(name):
    with jax.enable_x64(True):
        core = _perturbed(
            CORES[name](H, N, dtype=jnp.float64, key=jax.random.PRNGKey(0)), jax.random.PRNGKey(1)
        )
        u = jax.random.normal(jax.random.PRNGKey(2), (L, H), jnp.float64)
        w = jax.random.normal(jax.random.PRNGKey(3), (L, H), jnp.float64)
        field = "log_dt" if name.startswith("s4d") else "log_step"

        @eqx.filter_jit
        def loss(core):
            return jnp.sum(w * core(u)) + jnp.sum(w * core(u, reverse=True))

        grads = eqx.filter_jit(eqx.filter_grad(loss))(core)
        assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grads))
        eps = 1e-6
        for field_name in (field, "B_im", "C_re"):
            value = getattr(core, field_name)
            index = (1,) + (0,) * (value.ndim - 1)

            def bump(d, field_name=field_name, value=value, index=index):
                return eqx.tree_at(lambda c: getattr(c, field_name), core, value.at[index].add(d))

            numeric = (loss(bump(eps)) - loss(bump(-eps))) / (2 * eps)
            assert float(getattr(grads, field_name)[index]) == pytest.approx(
                float(numeric), rel=1e-5, abs=1e-8
            )


def test_optimizer_labels():
    for make in CORES.values():
        core = make(H, N, key=jax.random.PRNGKey(0))
        labels = eqx_lru.lru_param_labels(core)
        for name in type(core).recurrent_fields:
            assert getattr(labels, name) == "recurrent", name
        for name in ("C_re", "C_im", "D"):
            assert getattr(labels, name) == "decay", name
    assert set(S4D.recurrent_fields) == {"log_dt", "A_re_log", "A_im", "B_re", "B_im"}
    assert set(S5.recurrent_fields) == {"Lambda_re", "Lambda_im", "log_step", "B_re", "B_im"}


def test_bad_hyperparameters():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="d_state"):
        S4D(H, 7, key=key)
    with pytest.raises(ValueError, match="init"):
        S4D(H, N, init="fourier", key=key)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dt_min"):
        S4D(H, N, dt_min=0.1, dt_max=0.01, key=key)
    with pytest.raises(ValueError, match="dt_max"):
        S5(H, N, dt_max=float("inf"), key=key)
    with pytest.raises(ValueError, match="blocks"):
        S5(H, N, blocks=2, key=key)  # 10 is not a multiple of 2 * 2
    with pytest.raises(ValueError, match="d_model"):
        S5(0, N, key=key)
    with pytest.raises(ValueError, match="method"):
        S4D(H, N, method="parallel", key=key)
    with pytest.raises(ValueError, match="form"):
        S5(H, N, form="planar", key=key)
    with pytest.raises(ValueError, match="mode"):
        S4D(H, N, mode="fft", key=key)
    if hasattr(eqx_lru, "Sequential"):  # method objects (`eqx_lru.scan_method`) pass through
        method = eqx_lru.Sequential()
        assert S4D(H, N, method=method, key=key).method == method
        with pytest.raises(TypeError, match="method"):
            S5(H, N, method=3, key=key)
    core = S5(H, N, key=key)
    with pytest.raises(ValueError, match="d_model"):
        core(jnp.zeros((L, H + 1)))
    with pytest.raises(ValueError, match="dtype"):
        core(jnp.zeros((L, H), jnp.float16))
    with pytest.raises(ValueError, match="state"):
        core.step(jnp.zeros(N, jnp.complex64), jnp.zeros(H))


# --- in the library's model and training loop --------------------------------------------

SEQ, CLASSES, NOISE, STEPS, BATCH = 16, 3, 3, 60, 16


def _recall_batch(rng, n):
    """The class of a cue in the last 4 positions, read at the last one (chance: ln 3)."""
    x = rng.integers(CLASSES, CLASSES + NOISE, (n, SEQ))
    y = rng.integers(0, CLASSES, n)
    x[np.arange(n), rng.integers(SEQ - 4, SEQ, n)] = y
    return jnp.asarray(x, jnp.int32), jnp.asarray(y, jnp.int32)


def _cross_entropy(logits, labels):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["s4d_lin", "s5"])
def test_trains_in_lru_model(name):
    make = functools.partial(CORES[name], dt_min=0.01, dt_max=0.1)
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        CLASSES + NOISE,
        CLASSES,
        12,
        8,
        1,
        encoder="embedding",
        pooling="last",
        key=jax.random.PRNGKey(0),
        block=functools.partial(eqx_lru.LRUBlock, core=make),
    )
    assert isinstance(
        cast(eqx_lru.LRUBlock, model.blocks[0]).core, type(make(2, 4, key=jax.random.PRNGKey(0)))
    )
    optim = eqx_lru.lru_optimizer(
        learning_rate=2e-2, total_steps=STEPS, lr_factor=0.5, warmup_fraction=0.0
    )
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))
    rng, key, losses = np.random.default_rng(0), jax.random.PRNGKey(1), []
    for _ in range(STEPS):
        x, y = _recall_batch(rng, BATCH)
        key, step_key = jax.random.split(key)
        model, state, opt_state, loss = eqx_lru.train_step(
            model,
            state,
            opt_state,
            x,
            y,
            key=step_key,
            optimizer=optim,
            loss_fn=_cross_entropy,
        )
        losses.append(float(loss))
    assert np.mean(losses[-8:]) < min(0.5, np.mean(losses[:8]) - 0.4), losses


@pytest.mark.parametrize(
    "C_init, mean_square",
    [
        ("trunc_standard_normal", lambda h, p: 2 / p),  # C's parts of variance 1/P, C V
        ("lecun_normal", lambda h, p: 2 / (h * p)),  # variance 1/(HP): fan-in H * P
        ("complex_normal", lambda h, p: 1.0),  # C~ itself, parts of variance 1/2
    ],
)
def test_s5_c_init_scales_as_the_official_code(C_init, mean_square):
    """E|C~_hj|^2 of each `C_init` of S5's code (V has orthonormal columns, so C V keeps
    the per-entry mean square of C), over 24 x 48 entries: within 12% (about 4 standard
    errors of the sample mean)."""
    h, p = 24, 96
    core = S5(h, p, blocks=2, C_init=C_init, key=jax.random.PRNGKey(5))
    got = float(np.mean(np.asarray(core.C_re) ** 2 + np.asarray(core.C_im) ** 2))
    assert got == pytest.approx(mean_square(h, p), rel=0.12)
    if C_init == "trunc_standard_normal":  # the default, as before the option existed
        default = S5(h, p, blocks=2, key=jax.random.PRNGKey(5))
        assert bool(eqx.tree_equal(default, core))
    with pytest.raises(ValueError, match="`C_init` must be one of"):
        S5(h, p, C_init="normal", key=jax.random.PRNGKey(5))


def test_s4d_legs_init_is_the_diagonal_of_hippo_legs():
    """S4D-LegS against the normal part of HiPPO-LegS built here from its definition: A's
    eigenvalues (-1/2 + i w, w > 0, by np.linalg.eigvals) and |B_n| = |<v_n, b>|, b_k =
    sqrt(2k + 1), v_n the unit eigenvector of w_n (by SVD; |.| is free of its phase), for
    the modes whose imaginary part the clip to [-2, 2] leaves alone."""
    n = 12
    k = np.arange(n)
    legs = -np.where(k[:, None] > k[None, :], np.sqrt(np.outer(2 * k + 1, 2 * k + 1)), 0.0)
    legs -= np.diag(k + 1.0)
    normal = legs + np.outer(np.sqrt(k + 0.5), np.sqrt(k + 0.5))
    eig = np.linalg.eigvals(normal)
    core = S4D(H, n, init="legs", key=jax.random.PRNGKey(0))
    omega = np.sort(eig.imag[eig.imag > 0])
    np.testing.assert_allclose(-np.exp(core.A_re_log), -0.5, rtol=1e-6)
    np.testing.assert_allclose(core.A_im, np.broadcast_to(omega, (H, n // 2)), rtol=1e-5)
    b = np.asarray(core.B_re[0], np.float64) + 1j * np.asarray(core.B_im[0], np.float64)
    # |<v_n, b>| for each unit eigenvector of the normal part with eigenvalue -1/2 + i w_n
    vectors = [np.linalg.svd(normal - (-0.5 + 1j * w) * np.eye(n))[2][-1].conj() for w in omega]
    expected = np.abs([v.conj() @ np.sqrt(2 * k + 1.0) for v in vectors])
    unclipped = np.abs(b.imag) < 2 - 1e-6
    assert unclipped.sum() >= 2
    np.testing.assert_allclose(np.abs(b)[unclipped], expected[unclipped], rtol=1e-4)
    assert np.all(np.abs(b.imag) <= 2 + 1e-6)
    np.testing.assert_array_equal(S4D(H, n, init="lin", key=jax.random.PRNGKey(0)).B_re, 1.0)

"""RGLRU (Griffin's RG-LRU and its complex counterpart in two forms): the float64 NumPy
oracle (outputs, states, gradients by central differences, with and without `dt`), the two
forms of the complex counterpart against each other, packing, chunks, `step`,
initialisation, bad arguments, and recurrentgemma's own layer (installed by ./dev.sh)."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from core_runs import packed_chunked_streamed
from recurrentgemma_layers import load
from reference import rglru_loop

import eqx_lru

H, L, HEADS = 8, 11, 2  # d_model ≠ length; modes = 8 or 4 (with phase), 2 blocks
VARIANTS = {
    "real": dict(phase=False),
    "complex": dict(phase=True, form="complex"),
    "real2x2": dict(phase=True, form="real"),
}
FIELDS = ("Lambda", "theta", "W_a", "b_a", "W_x", "b_x")


def _core(variant, dtype=jnp.float64, method="sequential", seed=0):
    core = eqx_lru.RGLRU(
        H,
        heads=HEADS,
        method=method,
        dtype=dtype,
        key=jax.random.PRNGKey(seed),
        **VARIANTS[variant],
    )
    # Non-zero biases and a wider spread of gates than the zero-bias init, so that every
    # parameter matters in the comparisons.
    rng = np.random.default_rng(seed + 7)
    biases = [jnp.asarray(rng.normal(size=core.b_a.shape), dtype) for _ in range(2)]
    return eqx.tree_at(lambda m: (m.b_a, m.b_x), core, tuple(biases))


def _params(core) -> dict:
    return {
        n: None if getattr(core, n) is None else np.asarray(getattr(core, n), np.float64)
        for n in FIELDS
    }


def _data(dtype=jnp.float64, length=L, seed=1):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(length, H)), dtype)
    return x, jnp.asarray(rng.uniform(0.2, 2.5, size=length), dtype)


def _to_public(core, h):
    """An oracle state (real, or complex) in the core's layout."""
    if not core.phase or core.form == "complex":
        return jnp.asarray(h)
    return jnp.stack([jnp.asarray(h.real), jnp.asarray(h.imag)])


def _as_oracle(core, states):
    states = np.asarray(states)
    if core.phase and core.form == "real":
        return states[..., 0, :] + 1j * states[..., 1, :]
    return states


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("method, reverse", [("sequential", False), ("associative", True)])
def test_matches_oracle_float64(variant, method, reverse):
    with jax.enable_x64(True):
        core = _core(variant, method=method)
        x, dt = _data()
        rng = np.random.default_rng(2)
        h0 = rng.normal(size=core.Lambda.shape)
        h0 = h0 + 1j * rng.normal(size=h0.shape) if core.phase else h0
        for steps in (None, dt):
            options = dict(initial_state=_to_public(core, h0), reverse=reverse, dt=steps)
            y, final = core.run(x, **options)
            y_ref, states = rglru_loop(_params(core), x, dt=steps, h0=h0, reverse=reverse)
            np.testing.assert_allclose(np.asarray(y), y_ref, rtol=0, atol=1e-12)
            first = 0 if reverse else -1
            np.testing.assert_allclose(_as_oracle(core, final), states[first], atol=1e-12)


@pytest.mark.parametrize("variant", ["real", "complex"])
def test_gradients_match_oracle_finite_differences(variant):
    """Parameters, input and Δt: JAX's gradients against central differences of the NumPy
    oracle along a random direction per argument."""
    with jax.enable_x64(True):
        core = _core(variant)
        x, dt = _data()
        weights = np.random.default_rng(3).normal(size=(L, H))

        def loss(core, x, dt):
            return jnp.sum(weights * jnp.tanh(core(x, dt=dt)))

        grads = eqx.filter_jit(eqx.filter_grad(loss))(core, x, dt)
        grad_x, grad_dt = eqx.filter_jit(jax.grad(loss, argnums=(1, 2)))(core, x, dt)
        args = {**_params(core), "x": np.asarray(x), "dt": np.asarray(dt)}
        analytic = {**{n: getattr(grads, n) for n in FIELDS}, "x": grad_x, "dt": grad_dt}
        rng, eps = np.random.default_rng(4), 1e-6
        for name, value in args.items():
            if value is None:
                continue
            direction = rng.normal(size=value.shape)

            def oracle(t, name=name, value=value, direction=direction):
                moved = {**args, name: value + t * direction}
                p = {n: moved[n] for n in FIELDS}
                return np.sum(weights * np.tanh(rglru_loop(p, moved["x"], dt=moved["dt"])[0]))

            numeric = (oracle(eps) - oracle(-eps)) / (2 * eps)
            got = float(jnp.sum(analytic[name] * direction))
            np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-9, err_msg=name)


def test_complex_and_real_forms_agree():
    """Same key → same parameters; same outputs, states and gradients (parameters, input,
    Δt) in float64; `to_form` converts both ways."""
    with jax.enable_x64(True):
        c, r = _core("complex"), _core("real2x2")
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(c, name), getattr(r, name))
        assert c.to_form("real").form == "real" and r.to_form("complex").form == "complex"
        x, dt = _data()

        def loss(core, x, dt):
            return jnp.sum(jnp.tanh(core(x, dt=dt, reverse=True)) ** 2)

        np.testing.assert_allclose(r(x, dt=dt), c(x, dt=dt), rtol=0, atol=1e-13)
        grad = eqx.filter_jit(eqx.filter_grad(loss))  # one program per form, not one per op
        gc, gr = grad(c, x, dt), grad(r, x, dt)
        for name in FIELDS:
            np.testing.assert_allclose(getattr(gc, name), getattr(gr, name), rtol=1e-10)
        for argnum in (1, 2):
            grad_arg = eqx.filter_jit(jax.grad(loss, argnum))
            np.testing.assert_allclose(grad_arg(c, x, dt), grad_arg(r, x, dt), rtol=1e-10)
        state = c.run(x)[1]
        np.testing.assert_allclose(r.run(x)[1], jnp.stack([state.real, state.imag]), atol=1e-14)


@pytest.mark.parametrize("variant", ["real", "real2x2"])
def test_packing_chunks_and_step(variant):
    """Packed sequences equal separate calls, chunks (`length`, `initial_state`) and `step`
    equal one run, all with `dt`; Δt ≡ 1 is the call without it, bit for bit."""
    core = _core(variant, jnp.float32)
    x, dt = _data(jnp.float32, length=12)
    (y, final), *pairs = packed_chunked_streamed(core, x, dt)
    packed, separate = pairs[0]
    np.testing.assert_allclose(packed, separate, atol=1e-6)
    for ys, last in pairs[1:]:
        np.testing.assert_allclose(ys, y, atol=1e-6)
        np.testing.assert_allclose(last, final, atol=1e-6)
    np.testing.assert_array_equal(core(x, dt=jnp.ones(12, jnp.float32)), core(x))


def test_initialisation():
    d = 1024
    core = eqx_lru.RGLRU(d, heads=4, key=jax.random.PRNGKey(0))
    a = jax.nn.sigmoid(core.Lambda)
    assert float(a.min()) >= 0.9 - 1e-6 and float(a.max()) <= 0.999 + 1e-6
    # a² uniform on [0.81, 0.998]: mean and variance of U[α, β] (about 4 standard errors).
    lo, hi = 0.9**2, 0.999**2
    np.testing.assert_allclose(jnp.mean(a**2), (lo + hi) / 2, rtol=8e-3)
    np.testing.assert_allclose(jnp.var(a**2), (hi - lo) ** 2 / 12, rtol=0.15)
    assert core.W_a.shape == (4, d // 4, d // 4) and core.b_x.shape == (4, d // 4)
    np.testing.assert_allclose(jnp.std(core.W_x), 1 / np.sqrt(d), rtol=0.01)
    assert not jnp.any(core.b_a) and not jnp.any(core.b_x) and core.theta is None
    assert core.d_state == d and core.c == 8.0
    assert not np.allclose(core.W_a, core.W_x)
    phased = eqx_lru.RGLRU(64, phase=True, max_phase=0.3, key=jax.random.PRNGKey(1))
    assert phased.Lambda.shape == (32,) and phased.W_a.shape == (1, 64, 32)
    assert phased.theta is not None
    assert 0 <= float(phased.theta.min()) and float(phased.theta.max()) <= 0.3
    assert phased.init_state().dtype == jnp.complex64
    assert phased.to_form("real").init_state().shape == (2, 32)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(d_state=5), "`d_state` must be None or d_model=8; got d_state=5"),
        (dict(form="complex"), "needs `phase=True`"),
        (dict(heads=3), "`heads`=3 must divide the number of modes, 8"),
        (dict(phase=True, heads=8), "`heads`=8 must divide the number of modes, 4"),
        (dict(r_max=1.0), "0 < r_min <= r_max < 1"),
        (dict(r_min=0.0), "0 < r_min <= r_max < 1"),
        (dict(c=0.0), "`c`"),
        (dict(phase=True, dtype=jnp.bfloat16), "has no complex type"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        eqx_lru.RGLRU(H, key=jax.random.PRNGKey(0), **kwargs)


def test_bad_inputs_and_forms():
    core = _core("real", jnp.float32)
    x, _ = _data(jnp.float32)
    with pytest.raises(ValueError, match="must have shape"):
        core(x[:, :5])
    with pytest.raises(ValueError, match="`initial_state`/`state` must have shape"):
        core(x, initial_state=jnp.zeros(4))
    with pytest.raises(ValueError, match="`dt` must be positive"):
        core(x, dt=jnp.zeros(L))
    assert core.to_form("real") is core
    with pytest.raises(TypeError, match="no 'complex' form"):
        core.to_form("complex")
    with pytest.raises(ValueError, match="`d_model` must be even; got 7"):
        eqx_lru.RGLRU(7, phase=True, key=jax.random.PRNGKey(0))
    assert "recurrent" in set(jax.tree.leaves(eqx_lru.lru_param_labels(core)))


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["real", "complex"])
def test_matches_recurrentgemma(variant):
    """recurrentgemma's own flax RG-LRU (its associative scan) on the same parameters (its
    `a_param` = -Λ, `a_imag_param` = θ). (1) On a sequence that starts no document
    (`segment_pos` ≥ 1), the default core: outputs and final state to 1e-6 of the largest
    value (float32; measured 2e-7), gradients to 1e-5 of the largest entry (measured 9e-7);
    the real variant from a given state, the complex one from zero, as recurrentgemma's
    complex variant drops the imaginary parts when given a state (its scan accumulates in
    float32 for a complex `h0`). (2) On packed documents (`segment_pos` 0 where
    `segment_ids` start one, a one-position document among them), the core that
    `rglru_from_recurrentgemma` builds (`document_start="unnormalised"`): outputs, and
    gradients in recurrentgemma's layout through the converter, to the same bounds."""
    rg = load()
    core = _core(variant, jnp.float32)
    theirs = rg.layers.RGLRU(
        width=H, num_heads=HEADS, only_real=variant == "real",
        scan_type=rg.common.ScanType.ASSOCIATIVE_NATIVE,
    )  # fmt: skip
    params = {
        "a_param": -core.Lambda,
        "input_gate": {"w": core.W_x, "b": core.b_x},
        "a_gate": {"w": core.W_a, "b": core.b_a},
    }
    x, _ = _data(jnp.float32)
    h0 = None
    if variant == "real":
        h0 = jnp.asarray(np.random.default_rng(2).normal(size=H), jnp.float32)
    else:
        params["a_imag_param"] = core.theta
    pos = jnp.arange(1, L + 1)
    ids = jnp.asarray([0] * 4 + [1] + [2] * (L - 5))
    doc_pos = jnp.asarray(list(range(4)) + [0] + list(range(L - 5)))

    def run_theirs(params, x, pos, h0):
        y, last = theirs.apply(
            {"params": params}, x[None], pos[None], None if h0 is None else h0[None]
        )
        return y[0], last[0]

    def loss(run):
        return lambda *args: jnp.sum(jnp.sin(run(*args)[0]))

    def run_converted(params, x):
        return eqx_lru.recurrentgemma.rglru_from_recurrentgemma(params)(x, segment_ids=ids), None

    @eqx.filter_jit  # one compilation: theirs (plain, documents), ours, and the gradients
    def all_runs(core, params, x):
        # Its complex variant writes `re + 1j * im`, which strict promotion refuses.
        with jax.numpy_dtype_promotion("standard"):
            plain = (
                run_theirs(params, x, pos, h0),
                jax.grad(loss(run_theirs))(params, x, pos, h0),
            )
            docs = run_theirs(params, x, doc_pos, None)[0]
            g_docs = jax.grad(loss(run_theirs))(params, x, doc_pos, None)
        ours = core.run(x, initial_state=h0)
        g_ours = eqx.filter_grad(lambda m: jnp.sum(jnp.sin(m(x, initial_state=h0))))(core)
        converted = (run_converted(params, x)[0], jax.grad(loss(run_converted))(params, x))
        return plain, (docs, g_docs), (ours, g_ours), converted

    runs = all_runs(core, params, x)
    ((y, last), g_theirs), (docs, g_docs), ((ours, final), g_ours), (converted, g_converted) = runs
    final = final if variant == "real" else jnp.concatenate([final.real, final.imag])
    scale = float(jnp.max(jnp.abs(y)))
    np.testing.assert_allclose(ours, y, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(final, last, rtol=0, atol=1e-6 * scale)
    pairs = [(g_theirs["a_param"], -g_ours.Lambda), (g_theirs["a_gate"]["w"], g_ours.W_a)]
    pairs += [(g_theirs["a_gate"]["b"], g_ours.b_a), (g_theirs["input_gate"]["w"], g_ours.W_x)]
    pairs += [(g_theirs["input_gate"]["b"], g_ours.b_x)]
    if variant == "complex":
        pairs += [(g_theirs["a_imag_param"], g_ours.theta)]
    for theirs_g, ours_g in pairs:
        scale = float(jnp.max(jnp.abs(theirs_g)))
        np.testing.assert_allclose(ours_g, theirs_g, rtol=0, atol=1e-5 * scale)
    # (2) Packed documents, recurrentgemma's document starts.
    np.testing.assert_allclose(converted, docs, rtol=0, atol=1e-6 * float(jnp.max(jnp.abs(docs))))
    flat, tree = jax.tree_util.tree_flatten(g_docs)
    assert jax.tree_util.tree_structure(g_converted) == tree
    for theirs_g, ours_g in zip(flat, jax.tree_util.tree_leaves(g_converted), strict=True):
        scale = float(jnp.max(jnp.abs(theirs_g)))
        np.testing.assert_allclose(ours_g, theirs_g, rtol=0, atol=1e-5 * scale)


@pytest.mark.slow
def test_pallas_method_with_per_step_transitions():
    """The Pallas kernel (interpret mode off the GPU) scans the per-step transitions of all
    three variants, with `dt`, as the sequential scan does."""
    x, dt = _data(jnp.float32)
    for variant in VARIANTS:
        ours, ref = (_core(variant, jnp.float32, method) for method in ("pallas", "sequential"))
        np.testing.assert_allclose(ours(x, dt=dt), ref(x, dt=dt), rtol=0, atol=1e-6)


def test_in_a_block_streams_like_the_parallel_call():
    """`LRUBlock(core=RGLRU)` (the complex counterpart in real form, `d_state = d_model`):
    `step` over a sequence equals the parallel call in inference mode, and the optimiser's
    labels put the whole core in the recurrent group."""
    core = functools.partial(eqx_lru.RGLRU, heads=HEADS, phase=True, form="real")
    block, state = eqx.nn.make_with_state(eqx_lru.LRUBlock)(
        H, H, core=core, norm="layer", key=jax.random.PRNGKey(0)
    )
    x, _ = _data(jnp.float32)

    @eqx.filter_jit
    def both(block, x):
        _, streamed = jax.lax.scan(lambda c, x_t: block.step(c, x_t, state), block.init_carry(), x)
        return streamed, block(x, state, inference=True)[0]

    streamed, parallel = both(block, x)
    np.testing.assert_allclose(streamed, parallel, rtol=0, atol=1e-5)
    labels = eqx_lru.lru_param_labels(block)
    assert set(jax.tree.leaves(labels.core)) == {"recurrent"}

"""ComplexLRU and RealLRU against the float64 NumPy oracle, against each other, and as
Equinox modules (vmap, filter_jit, filter_grad, float64, conversions, RNN mode)."""

import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import grid_methods
from conftest import max_rel_err
from reference import lru_loop, lru_params_np

import eqx_lru

H, N, L = 5, 7, 11  # d_model ≠ d_state ≠ length
FORMS = (eqx_lru.ComplexLRU, eqx_lru.RealLRU)
PARAMS = ("nu_log", "theta_log", "gamma_log", "B_re", "B_im", "C_re", "C_im", "D")


def _layer(form, dtype, method="auto", seed=0, **ring):
    ring = {"r_min": 0.4, "r_max": 0.95, **ring}
    return form(H, N, method=method, dtype=dtype, key=jax.random.PRNGKey(seed), **ring)


def _input(dtype, length=L, seed=1):
    return jnp.asarray(np.random.default_rng(seed).normal(size=(length, H)), dtype)


def _state_from_complex(form, x0):
    if form is eqx_lru.ComplexLRU:
        return jnp.asarray(x0)
    return jnp.stack([jnp.asarray(x0.real), jnp.asarray(x0.imag)], axis=-1)


def _states_to_complex(states):
    states = np.asarray(states)
    return states if np.iscomplexobj(states) else states[..., 0] + 1j * states[..., 1]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("method", grid_methods())
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("with_x0", [False, True])
def test_matches_oracle_float64(form, method, reverse, with_x0):
    with jax.enable_x64(True):
        layer = _layer(form, jnp.float64, method)
        u = _input(jnp.float64)
        x0 = None
        if with_x0:
            rng = np.random.default_rng(5)
            x0 = rng.normal(size=N) + 1j * rng.normal(size=N)
        init = None if x0 is None else _state_from_complex(form, x0)
        y = layer(u, initial_state=init, reverse=reverse)
        states = layer.hidden_states(u, initial_state=init, reverse=reverse)
        y_ref, states_ref = lru_loop(lru_params_np(layer), u, reverse=reverse, x0=x0)
        assert y.shape == (L, H) and y.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(y), y_ref, rtol=0, atol=1e-10)
        np.testing.assert_allclose(_states_to_complex(states), states_ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("reverse", [False, True])
def test_matches_oracle_float32(form, reverse):
    layer = _layer(form, jnp.float32, r_max=0.999)
    u = _input(jnp.float32, length=200)
    y = layer(u, reverse=reverse)
    y_ref, _ = lru_loop(lru_params_np(layer), np.asarray(u), reverse=reverse)
    assert y.dtype == jnp.float32
    assert max_rel_err(y, y_ref) <= 1e-5


def test_same_key_same_parameters_and_outputs():
    c, r = _layer(eqx_lru.ComplexLRU, jnp.float32), _layer(eqx_lru.RealLRU, jnp.float32)
    for name in PARAMS:
        np.testing.assert_array_equal(getattr(c, name), getattr(r, name))
    u = _input(jnp.float32)
    assert max_rel_err(r(u), c(u)) <= 1e-6
    other = _layer(eqx_lru.ComplexLRU, jnp.float32, seed=1)
    assert not np.allclose(other.B_re, c.B_re)


@eqx.filter_jit
def _all_grads(layer, u, weights):
    def loss(layer, u):
        return jnp.sum(weights * jnp.tanh(layer(u)))

    return eqx.filter_grad(loss, has_aux=False)(layer, u), jax.grad(loss, argnums=1)(layer, u)


@pytest.mark.parametrize("method", grid_methods())
def test_gradients_equal_across_forms(method):
    with jax.enable_x64(True):
        u = _input(jnp.float64)
        weights = jnp.asarray(np.random.default_rng(3).normal(size=(L, H)))
        (gc, guc), (gr, gur) = (
            _all_grads(_layer(form, jnp.float64, method), u, weights) for form in FORMS
        )
        for name in PARAMS:
            a, b = getattr(gc, name), getattr(gr, name)
            assert float(jnp.abs(a).max()) > 0, name
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(guc, gur, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("form", FORMS)
def test_gradients_match_finite_differences(form):
    """Central differences along a random direction, per parameter and for the input."""
    with jax.enable_x64(True):
        layer = _layer(form, jnp.float64)
        u = _input(jnp.float64)
        rng = np.random.default_rng(4)
        weights = jnp.asarray(rng.normal(size=(L, H)))

        def loss(layer, u):
            return jnp.sum(weights * jnp.tanh(layer(u)))

        grads, grad_u = _all_grads(layer, u, weights)
        eps = 1e-6
        for name in PARAMS + ("u",):
            value = u if name == "u" else getattr(layer, name)
            direction = jnp.asarray(rng.normal(size=value.shape))

            def shifted(t, name=name, direction=direction, value=value):
                if name == "u":
                    return loss(layer, u + t * direction)
                return loss(
                    eqx.tree_at(lambda m: getattr(m, name), layer, value + t * direction), u
                )

            numeric = (shifted(eps) - shifted(-eps)) / (2 * eps)
            analytic = jnp.sum((grad_u if name == "u" else getattr(grads, name)) * direction)
            np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8, err_msg=name)


def test_conversions_round_trip_exactly():
    c = _layer(eqx_lru.ComplexLRU, jnp.float32, method="associative")
    r = eqx_lru.RealLRU.from_complex(c)
    back = eqx_lru.ComplexLRU.from_real(r)
    assert type(r) is eqx_lru.RealLRU and type(back) is eqx_lru.ComplexLRU
    assert r.method == eqx_lru.Associative() and r.precision is None
    assert eqx.tree_equal(back, c)
    for name in PARAMS:
        np.testing.assert_array_equal(getattr(r, name), getattr(c, name))
    u = _input(jnp.float32)
    assert max_rel_err(r(u), c(u)) <= 1e-6
    with pytest.raises(TypeError):  # jaxtyping in tests, our own check for users
        eqx_lru.RealLRU.from_complex(eqx.nn.Linear(2, 2, key=jax.random.PRNGKey(0)))  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize("form", FORMS)
def test_step_equals_parallel_and_streaming(form):
    layer = _layer(form, jnp.float32)
    u = _input(jnp.float32)
    step = jax.jit(lambda s, x: layer.step(s, x))
    state, ys = layer.init_state(), []
    for t in range(L):
        state, y_t = step(state, u[t])
        ys.append(y_t)
    full = layer(u)
    assert max_rel_err(jnp.stack(ys), full) <= 1e-5
    # The final state of `step` is the last hidden state.
    assert max_rel_err(state, layer.hidden_states(u)[-1]) <= 1e-5
    # Streaming: run the first part, carry the state, run the rest.
    first, rest = u[:4], u[4:]
    carried = layer.hidden_states(first)[-1]
    assert (
        max_rel_err(jnp.concatenate([layer(first), layer(rest, initial_state=carried)]), full)
        <= 1e-5
    )
    # Reverse streaming: the state flows from the end.
    carried = layer.hidden_states(rest, reverse=True)[0]
    full_rev = layer(u, reverse=True)
    joined = jnp.concatenate(
        [layer(first, initial_state=carried, reverse=True), layer(rest, reverse=True)]
    )
    assert max_rel_err(joined, full_rev) <= 1e-5


def test_real_form_has_no_complex_dtype():
    layer = _layer(eqx_lru.RealLRU, jnp.float32)
    u = _input(jnp.float32)

    def fwd_and_grad(layer, u):
        return layer(u), eqx.filter_grad(lambda m, u: jnp.sum(m(u)))(layer, u)

    jaxpr = str(jax.make_jaxpr(fwd_and_grad)(layer, u))
    step_jaxpr = str(jax.make_jaxpr(layer.step)(layer.init_state(), u[0]))
    for text in (jaxpr, step_jaxpr):
        assert "complex" not in text and "c64" not in text and "c128" not in text
    # The check is meaningful: the complex form does show complex dtypes.
    complex_jaxpr = str(jax.make_jaxpr(_layer(eqx_lru.ComplexLRU, jnp.float32))(u))
    assert "c64" in complex_jaxpr or "complex" in complex_jaxpr


@pytest.mark.parametrize("form", FORMS)
def test_vmap_filter_jit_filter_grad(form):
    layer = _layer(form, jnp.float32)
    batch = jnp.stack([_input(jnp.float32, seed=s) for s in range(3)])

    @eqx.filter_jit
    def loss(layer, batch):
        return jnp.mean(jax.vmap(layer)(batch) ** 2)

    grads = eqx.filter_jit(eqx.filter_grad(loss))(layer, batch)
    assert type(grads) is form
    assert all(jnp.all(jnp.isfinite(getattr(grads, n))) for n in PARAMS)
    per_example = jnp.stack([layer(x) for x in batch])
    assert max_rel_err(jax.vmap(layer)(batch), per_example) <= 1e-6
    # vmap over layers too: an ensemble of layers from a batch of keys.
    keys = jax.random.split(jax.random.PRNGKey(9), 2)
    ensemble = eqx.filter_vmap(lambda k: form(H, N, key=k))(keys)
    out = eqx.filter_vmap(lambda m, x: m(x), in_axes=(eqx.if_array(0), None))(ensemble, batch[0])
    assert out.shape == (2, L, H)


def test_float64_parameters_and_state():
    with jax.enable_x64(True):
        c = _layer(eqx_lru.ComplexLRU, jnp.float64)
        r = _layer(eqx_lru.RealLRU, jnp.float64)
        assert c.init_state().dtype == jnp.complex128 and r.init_state().dtype == jnp.float64
        assert all(getattr(c, n).dtype == jnp.float64 for n in PARAMS)


@pytest.mark.parametrize("form", FORMS)
def test_bad_input_raises_clear_errors(form):
    layer = _layer(form, jnp.float32)
    with pytest.raises(ValueError, match=r"`u` must have shape \(length, d_model\) with d_model=5"):
        layer(jnp.ones((L, H + 1)))
    with pytest.raises(ValueError, match=r"shape \(length, d_model\).*Batch with `jax.vmap`"):
        layer(jnp.ones((2, L, H)))  # a batch given to a one-example call: our line first
    with pytest.raises(ValueError, match="initial_state"):
        layer(jnp.ones((L, H)), initial_state=jnp.zeros(N + 1, layer.init_state().dtype))
    with pytest.raises(ValueError, match="`u_t` must have shape"):
        layer.step(layer.init_state(), jnp.ones(H + 2))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(r_min=0.9, r_max=0.5), "`r_min` must be <= `r_max`"),
        (dict(r_max=1.5), "`r_max` must be <= 1"),
        (dict(r_min=-0.1), "`r_min` must be >= 0"),
        (dict(max_phase=0.0), "`max_phase` must be > 0"),
        (dict(max_phase=-1.0), "`max_phase` must be > 0"),
        (dict(d_state=0), "`d_state` must be a positive integer"),
        (dict(d_model=-3), "`d_model` must be a positive integer"),
        (dict(method="fast"), "method"),
        (dict(dtype=jnp.int32), "`dtype` must be a real floating dtype"),
    ],
)
def test_bad_hyperparameters_raise(kwargs, match):
    args = dict(d_model=H, d_state=N, key=jax.random.PRNGKey(0)) | kwargs
    with pytest.raises(Exception, match=match) as info:
        eqx_lru.ComplexLRU(**args)
    if "method" not in kwargs:
        assert info.type is ValueError


def test_internal_annotations_are_checked_in_tests():
    """The jaxtyping pytest hook instruments eqx_lru's internals (pyproject addopts), so a
    shape bug inside the package fails loudly here rather than broadcasting."""
    from eqx_lru._cores import _init

    with pytest.raises(TypeError, match="d_state"):
        _init.gamma_log_init(jnp.ones((N, 2)))  # annotated Float[Array, " d_state"]


# --- precision -----------------------------------------------------------------------------


def _dot_precisions(jaxpr) -> list:
    """The `precision` of every dot_general in `jaxpr` and its sub-jaxprs (scans, custom
    VJPs, pjit...)."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(eqn.params["precision"])
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += _dot_precisions(sub)
    return found


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    "precision,expected",
    [
        (None, None),
        ("highest", jax.lax.Precision.HIGHEST),
        (jax.lax.Precision.HIGH, jax.lax.Precision.HIGH),
    ],
)
def test_precision_reaches_every_matmul(form, precision, expected):
    layer = _layer(form, jnp.float32, precision=precision)
    assert layer.precision == expected
    u = _input(jnp.float32)

    def fwd_and_grad(layer, u):
        return layer(u), eqx.filter_grad(lambda m, u: jnp.sum(m(u) ** 2))(layer, u)

    for closed in (
        jax.make_jaxpr(fwd_and_grad)(layer, u),
        jax.make_jaxpr(layer.step)(layer.init_state(), u[0]),
    ):
        precisions = _dot_precisions(closed.jaxpr)
        assert len(precisions) >= 2  # the input and output projections at least
        if expected is None:  # JAX's default, whatever the configuration makes it
            x = jnp.ones((2, 2))
            want = _dot_precisions(jax.make_jaxpr(jnp.matmul)(x, x).jaxpr)[0]
        else:
            want = (expected, expected)
        assert all(p == want for p in precisions), precisions


@pytest.mark.parametrize("form", FORMS)
def test_highest_precision_matches_oracle(form):
    layer = _layer(form, jnp.float32, precision="highest", r_max=0.999)
    u = _input(jnp.float32, length=64)
    y_ref, _ = lru_loop(lru_params_np(layer), np.asarray(u))
    assert max_rel_err(layer(u), y_ref) <= 1e-5
    state, ys = layer.init_state(), []
    for t in range(4):
        state, y_t = layer.step(state, u[t])
        ys.append(y_t)
    assert max_rel_err(jnp.stack(ys), y_ref[:4]) <= 1e-5


def test_bad_precision_raises():
    with pytest.raises(ValueError, match="`precision`"):
        _layer(eqx_lru.ComplexLRU, jnp.float32, precision="ultra")


def test_all_lists_the_public_names():
    """`eqx_lru.__all__` is exactly the package's public re-exports (update it with them)."""
    public = {n for n in vars(eqx_lru) if not n.startswith("_")}
    subpackages = ("ablation", "baselines", "export", "recurrentgemma")
    public -= {n for n, v in vars(eqx_lru).items() if type(v) is type(eqx_lru)}
    public |= set(subpackages)
    assert sorted(eqx_lru.__all__) == sorted(public)
    assert all(hasattr(eqx_lru, n) for n in eqx_lru.__all__)

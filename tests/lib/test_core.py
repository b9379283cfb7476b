"""The recurrent-core contract (`eqx_lru.AbstractRecurrentCore`) on every core of the library.

For each core, in float64: `run` equals a NumPy float64 loop over its parameters and the
`step` loop; two chunks chained through `initial_state` (either direction) equal one run;
`segment_ids` equal separate runs per segment; `length` picks the final state. The cores,
their sizes and their float64 loops are `conformance.CORES`. Then a brand-new core, defined
here, plugs into `LRUBlock`, `LRUModel` and the optimiser with no other change (issue 16),
and `to_real`/`to_complex` convert every core with two forms and refuse the others. Sizes
are distinct: d_model=3, d_state=4 (S5: 8), length=7, LDS n=6, d_out=2, RGLRU 4.
"""

import functools
from typing import ClassVar, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import BOTH, CORES, build_core, select

import eqx_lru
from eqx_lru import ablation, baselines

H, N, L = 3, 4, 7
LDS_N, LDS_OUT = 6, 2


def _build(name: str):
    """The core `name` in float64 (at its `conformance.CORES` sizes), and an input for it."""
    return build_core(name, length=L)


def _close(a, b, tol=1e-10):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


_IDS = jnp.array([0, 0, 5, 5, 5, 2, 2])
_PIECES = [(0, 2), (2, 5), (5, 7)]
_K = 3  # where the sequence is cut in two chunks


@eqx.filter_jit
def _contract_outputs(core, u):
    """Everything the contract promises to be equal, computed in one compiled program."""
    out = {}
    out["y"], out["final"] = core.run(u)
    out["call"] = core(u)
    step = lambda state, u_t: core.step(state, u_t)  # noqa: E731
    out["step_final"], out["step_y"] = jax.lax.scan(step, core.init_state(), u)
    y1, s1 = core.run(u[:_K])
    y2, out["chunk_final"] = core.run(u[_K:], initial_state=s1)
    out["chunks"] = jnp.concatenate([y1, y2])
    out["y_rev"], out["first"] = core.run(u, reverse=True)
    y2, s2 = core.run(u[_K:], reverse=True)
    y1, out["chunk_first"] = core.run(u[:_K], initial_state=s2, reverse=True)
    out["chunks_rev"] = jnp.concatenate([y1, y2])
    out["call_rev_chunk"], out["y1_rev"] = core(u[:_K], initial_state=s2, reverse=True), y1
    out["length_final"], out["cut_final"] = core.run(u, length=jnp.int32(_K))[1], s1
    for reverse in (False, True):
        out[f"seg_{reverse}"] = core.run(u, segment_ids=_IDS, reverse=reverse)[0]
        out[f"seg_call_{reverse}"] = core(u, segment_ids=_IDS, reverse=reverse)
        separate = [core.run(u[a:b], reverse=reverse)[0] for a, b in _PIECES]
        out[f"separate_{reverse}"] = jnp.concatenate(separate)
    return out


@pytest.mark.slow  # one compile per core: ~3-40 s each on a loaded 2-core CPU
@pytest.mark.parametrize("name", list(CORES))
def test_every_core_follows_the_contract(name):
    with jax.enable_x64(True):
        core, u = _build(name)
        assert isinstance(core, eqx_lru.AbstractRecurrentCore)
        assert set(core.recurrent_fields) <= {f for f in core.__dataclass_fields__}
        out = _contract_outputs(core, u)
        _close(out["y"], CORES[name].reference(core, np.asarray(u, np.float64)))
        pairs = [
            ("call", "y"),  # the call is `run` without the state
            ("step_y", "y"),  # step by step from init_state()
            ("step_final", "final"),
            ("chunks", "y"),  # two chunks chained through the state
            ("chunk_final", "final"),
            ("chunks_rev", "y_rev"),  # the same in reverse
            ("chunk_first", "first"),
            ("call_rev_chunk", "y1_rev"),
            ("length_final", "cut_final"),  # `length`: the state after position length - 1
            ("seg_False", "separate_False"),  # segments never exchange state
            ("seg_True", "separate_True"),
            ("seg_call_False", "seg_False"),
            ("seg_call_True", "seg_True"),
        ]
        for a, b in pairs:
            _close(out[a], out[b])


def _shapes(module) -> list[tuple]:
    return [(x.shape, x.dtype) for x in jax.tree_util.tree_leaves(eqx.filter(module, eqx.is_array))]


@pytest.mark.parametrize("name", list(CORES))
def test_parameter_shapes_depend_on_the_arguments_not_the_key(name):
    """A checkpoint loads into a module built from any key (`eqx.tree_deserialise_leaves`
    needs a module of the same shapes): every core's shapes are fixed by its arguments.
    `StandardSIMOLDS` kept as many real eigenvalues as its random polynomial had roots, so
    its shapes changed with the key (6 states: 0, 2 or 4 real)."""
    case = CORES[name]
    first, *others = (case.make(*case.sizes, key=jax.random.PRNGKey(i)) for i in range(16))
    assert all(_shapes(m) == _shapes(first) for m in others)


def test_standard_lds_takes_its_number_of_real_eigenvalues():
    for n, reals in ((7, 1), (7, 3), (6, 0), (6, 6)):
        layer = baselines.StandardSIMOLDS(n, 2, reals=reals, key=jax.random.PRNGKey(3))
        lam = np.asarray(layer.eigenvalues())
        assert layer.alpha_real.shape == (reals,) and lam.shape == (n,)
        assert np.sum(np.imag(lam) == 0) >= reals  # merged pairs may have β = 0
        np.testing.assert_allclose(np.sort_complex(lam), np.sort_complex(lam.conj()))
    with pytest.raises(ValueError, match="reals=2, d_state=7"):
        baselines.StandardSIMOLDS(7, 2, reals=2, key=jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match="`reals` must be an integer"):
        baselines.StandardSIMOLDS(7, 2, reals=1.0, key=jax.random.PRNGKey(0))


@pytest.mark.parametrize("name", select(CORES, forms=BOTH))
def test_to_real_and_to_complex_convert_cores_with_two_forms(name):
    with jax.enable_x64(True):
        core, u = _build(name)
        real, complex_ = eqx_lru.to_real(core), eqx_lru.to_complex(core)
        assert real.to_form("real") is real and complex_.to_form("complex") is complex_
        assert eqx_lru.to_real(complex_).init_state().dtype == jnp.float64
        assert jnp.iscomplexobj(complex_.init_state())
        _close(real(u), core(u))
        _close(complex_(u), core(u))


@pytest.mark.parametrize("name", select(CORES, forms=()))
def test_conversion_refuses_cores_with_one_form(name):
    with jax.enable_x64(True):
        core, _ = _build(name)
    for convert in (eqx_lru.to_real, eqx_lru.to_complex):
        with pytest.raises(TypeError, match=f"{type(core).__name__} has no"):
            convert({"model": [core]})


def test_16_bit_complex_cores_fail_at_construction():
    key = jax.random.PRNGKey(0)
    for make, fix in [
        (eqx_lru.ComplexLRU, "RealLRU"),
        (ablation.DiagonalRNN, "RealLRU"),
        (baselines.S4D, "form='real'"),
        (functools.partial(baselines.S5, form="complex"), "form='real'"),
    ]:
        with pytest.raises(ValueError, match=f"`dtype=bfloat16` has no complex type.*{fix}"):
            make(H, N, dtype=jnp.bfloat16, key=key)
    with pytest.raises(ValueError, match="`dtype=float16`"):
        baselines.UnitSIMOLDS(LDS_N, LDS_OUT, dtype=jnp.float16, key=key)
    # The real forms take a 16-bit dtype, for their parameters and their whole computation.
    for make in (
        eqx_lru.RealLRU,
        functools.partial(baselines.S4D, form="real"),
        functools.partial(baselines.S5, form="real"),
    ):
        core = make(H, N, dtype=jnp.bfloat16, key=key)
        assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(core)} == {jnp.dtype("bfloat16")}
        assert eqx.filter_jit(core)(jnp.ones((L, H), jnp.bfloat16)).dtype == jnp.bfloat16
    with pytest.raises(ValueError, match="has no complex type"):
        eqx_lru.to_complex(baselines.S5(H, N, form="real", dtype=jnp.bfloat16, key=key))


def test_model_dtype_reaches_every_core():
    with jax.enable_x64(True):
        for core in ("real", baselines.S4D, functools.partial(baselines.S5, form="real")):
            block = functools.partial(eqx_lru.LRUBlock, core=core)
            model = eqx_lru.LRUModel(
                2, 3, H, N, 1, block=block, dtype=jnp.float64, key=jax.random.PRNGKey(0)
            )
            leaves = jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))
            assert {leaf.dtype for leaf in leaves} == {jnp.dtype("float64")}


# --- a brand-new core, plugged in with no other change (issue 16) ------------------------


class ScaledEMA(eqx_lru.AbstractRecurrentCore):
    r"""$x_k = \sigma(w) \odot x_{k-1} + u_k$, $y_k = s \odot x_k$: a core of this test only."""

    logit: jax.Array
    scale: jax.Array
    recurrent_fields: ClassVar[tuple[str, ...]] = ("logit",)

    def __init__(self, d_model, d_state, *, key):
        del d_state
        self.logit = jax.random.normal(key, (d_model,))
        self.scale = jnp.ones(d_model)

    def init_state(self):
        return jnp.zeros_like(self.logit)

    def step(self, state, u_t, *, dt=None):
        del dt  # no time steps (`takes_dt` is False: the contract refuses any)
        state = jax.nn.sigmoid(self.logit) * state + u_t
        return state, self.scale * state

    def run(self, u, *, initial_state=None, reverse=False, length=None, segment_ids=None, dt=None):
        del dt
        h = eqx_lru.linear_recurrence(
            jax.nn.sigmoid(self.logit), cast(jax.Array, u), algebra=eqx_lru.Diagonal(),
            initial_state=initial_state, reverse=reverse,
            segment_ids=cast("jax.Array | None", segment_ids),
        )  # fmt: skip
        last = h[0] if reverse else h[-1 if length is None else length - 1]
        return self.scale * h, last


def test_a_new_core_plugs_into_blocks_models_and_the_optimiser():
    pytest.importorskip("optax")
    key = jax.random.PRNGKey(0)
    block = functools.partial(eqx_lru.LRUBlock, core=ScaledEMA, bidirectional=True, norm="layer")
    build = eqx.nn.make_with_state(eqx_lru.LRUModel)
    model, state = build(2, 3, H, N, 2, block=block, key=key)
    assert isinstance(cast(eqx_lru.LRUBlock, model.blocks[0]).core, ScaledEMA)
    x = jnp.asarray(np.random.default_rng(1).normal(size=(L, 2)), jnp.float32)
    out, _ = eqx.filter_jit(model)(x, state)
    assert out.shape == (3,)
    # remat scans over the blocks (`LRUBlock.scan_body`): the same value and gradients
    remat, _ = build(2, 3, H, N, 2, block=block, remat=True, key=key)

    def loss(m):
        return jnp.sum(m(x, state)[0] ** 2)

    grad = eqx.filter_jit(eqx.filter_grad(loss))  # one program per model, not one per op
    g, g_remat = grad(model), grad(remat)
    leaves = jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(g_remat)
    for a, b in zip(*leaves, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)

    labels = eqx_lru.lru_param_labels(model)
    for b in labels.blocks:
        assert b.core.logit == b.reverse_core.logit == "recurrent"
        assert b.core.scale == b.reverse_core.scale == "decay"
    optim = eqx_lru.lru_optimizer(learning_rate=1e-2, total_steps=10)
    params = eqx.filter(model, eqx.is_inexact_array)

    @eqx.filter_jit
    def update(g, params):
        with jax.numpy_dtype_promotion("standard"):  # optax mixes floats and int32 counts
            updates, _ = optim.update(g, optim.init(params), params)
        return eqx.apply_updates(params, updates)

    new = eqx.combine(update(g, params), model)
    new_core, old_core = (
        cast(ScaledEMA, cast(eqx_lru.LRUBlock, m.blocks[0]).core) for m in (new, model)
    )
    assert not bool(eqx.tree_equal(new_core.logit, old_core.logit))

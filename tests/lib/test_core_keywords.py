"""Every core names its keywords (issue 38 item 2), and a slip in a public call names the
user's method and argument (issue 39 class 5).

- Every core of `conformance.CORES` is called with each keyword of the contract by name
  (`__call__`, `run`, `step`; one compiled function per core), refuses an unknown keyword
  and a keyword given by position by name, refuses `dt` by name when it takes no time
  steps, and spells its keywords out (`inspect.signature`: no `**kwargs`).
- Every public call of the cores, blocks, models and `StreamPool` given an argument by
  position that goes by name, or a PRNG key where an array goes, gets one line naming the
  method and the argument (raised before anything runs).

Sizes are distinct (d_model=3, d_state=4, length=7; the conformance sizes for the cores).
"""

import functools
import inspect
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import CORES

import eqx_lru

L = 7
CALL = ["initial_state", "reverse", "length", "segment_ids", "dt", "key"]
RUN = CALL[:-1]
#: The RG-LRU's keywords are another branch's (`_rglru.py`): its `__call__` still takes
#: `**options` and its `step` has no argument check there. Strict, so this mark goes when
#: they land.


def _core(name):
    case = CORES[name]
    core = case.make(*case.sizes, dtype=jnp.float32, key=jax.random.PRNGKey(0))
    rng = np.random.default_rng(1)
    shape = (L,) if case.scalar_input else (L, case.sizes[0])
    u = rng.normal(size=shape).astype(np.float32)
    state = jax.tree_util.tree_map(
        lambda z: (0.3 * rng.normal(size=z.shape)).astype(z.dtype), core.init_state()
    )
    dt = rng.uniform(0.5, 2.0, size=L).astype(np.float32) if core.takes_dt else None
    return core, u, state, dt


@eqx.filter_jit
def _every_keyword(core, u, state, dt):
    """`__call__`, `run` and `step` with each keyword by name (`dt=None` for a core
    without time steps)."""
    ids = jnp.asarray([0, 0, 0, 0, 1, 1, 1])
    options = dict(initial_state=state, reverse=False, segment_ids=ids, dt=dt)
    y = core(u, length=jnp.asarray(5), key=jax.random.PRNGKey(2), **options)
    y_run, final = core.run(u, length=jnp.asarray(5), **options)
    y_all, _ = core.run(u, initial_state=state, dt=dt)
    _, y_0 = core.step(state, u[0], dt=None if dt is None else dt[0])
    _, final_5 = core.run(u[4:5], dt=None if dt is None else dt[4:5])  # from zero at 4
    return y, y_run, final, y_all, y_0, final_5


@pytest.mark.parametrize("name", list(CORES))
def test_every_core_takes_each_keyword_by_name(name):
    core, u, state, dt = _core(name)
    y, y_run, final, y_all, y_0, final_5 = _every_keyword(core, u, state, dt)
    np.testing.assert_allclose(y, y_run, rtol=1e-6, atol=1e-6)  # the call is `run`'s outputs
    np.testing.assert_allclose(y_0, y_all[0], rtol=1e-5, atol=1e-5)  # `step` from `state`
    np.testing.assert_allclose(y[:4], y_all[:4], rtol=1e-5, atol=1e-5)  # first segment
    assert not np.allclose(y[4:], y_all[4:], rtol=1e-3, atol=1e-3)  # a new segment at 4
    # `length=5`: the final state after position 4 (its segment starts from zero there).
    for a, b in zip(
        jax.tree_util.tree_leaves(final), jax.tree_util.tree_leaves(final_5), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name",
    list(CORES),
)
def test_every_core_refuses_slips_by_name(name):
    core, u, state, dt = _core(name)
    cls = type(core).__name__
    with pytest.raises(TypeError, match=rf"`{cls}.__call__` has no argument `initial_stat`"):
        core(u, initial_stat=state)
    with pytest.raises(TypeError, match=rf"`{cls}.run` has no argument `revers`.*`reverse`"):
        core.run(u, revers=True)
    with pytest.raises(TypeError, match=rf"`{cls}.step` has no argument `t`"):
        core.step(state, u[0], t=1.0)
    with pytest.raises(TypeError, match=rf"`{cls}.run` takes 1 positional argument.*`dt=`"):
        core.run(u, state)
    with pytest.raises(TypeError, match=rf"`{cls}.step` takes 2 positional arguments.*`dt=`"):
        core.step(state, u[0], 1.0)
    if not core.takes_dt:
        steps = np.ones(L, np.float32)
        for call in (
            lambda: core(u, dt=steps),
            lambda: core.run(u, dt=steps),
            lambda: core.step(state, u[0], dt=steps[0]),
        ):
            with pytest.raises(TypeError, match=rf"^{cls} takes no `dt`.*Cores that take it"):
                call()


@pytest.mark.parametrize(
    "name",
    list(CORES),
)
def test_every_core_spells_out_its_keywords(name):
    core, u, _, _ = _core(name)
    expected = {"__call__": (["u"], CALL), "run": (["u"], RUN), "step": (["state", "u_t"], ["dt"])}
    for method, (positional, by_name) in expected.items():
        params = list(inspect.signature(getattr(type(core), method)).parameters.values())[1:]
        kinds = {p.kind for p in params}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, (method, params)
        assert inspect.Parameter.VAR_POSITIONAL not in kinds, (method, params)
        named = [p.name for p in params if p.kind == inspect.Parameter.KEYWORD_ONLY]
        assert [p.name for p in params if p.kind != p.KEYWORD_ONLY] == positional, method
        assert named == by_name, method
        assert all(p.default is None or p.name == "reverse" for p in params[len(positional) :])
    cls = type(core).__name__
    with pytest.raises(TypeError, match=rf"`{cls}.__call__` takes 1 positional argument.*`dt=`"):
        core(u, None)


def test_a_core_without_dt_in_its_run_is_refused_at_definition():
    with pytest.raises(TypeError, match=r"Old.run takes no `dt` keyword.*\*, dt=None"):

        class Old(eqx_lru.AbstractRecurrentCore):
            recurrent_fields = ()

            def init_state(self):
                return jnp.zeros(())

            def step(self, state, u_t, *, dt=None):
                return state, cast(jax.Array, u_t)

            def run(self, u, *, initial_state=None, reverse=False, length=None, segment_ids=None):  # pyright: ignore[reportIncompatibleMethodOverride]
                return u, jnp.zeros(())


# --- every public entry point: a positional slip, a key where an array goes ---------------

IN, H, N = 5, 3, 4
KEY = jax.random.PRNGKey(0)


@functools.cache
def _entries():
    """`(owner, method, positional, arguments)` for each public call: the arguments it
    takes by position, then the keywords."""
    x = np.zeros((L, IN), np.float32)
    z = np.zeros((L, H), np.float32)
    layer = eqx_lru.ComplexLRU(H, N, key=KEY)
    block, block_state = eqx.nn.make_with_state(eqx_lru.LRUBlock)(H, N, norm="layer", key=KEY)
    hawk, hawk_state = eqx.nn.make_with_state(eqx_lru.HawkBlock)(4, 4, key=KEY)
    z4 = np.zeros((L, 4), np.float32)
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        IN, 2, H, N, 1, block=functools.partial(eqx_lru.LRUBlock, norm="layer"), key=KEY
    )
    encoder, r_state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        IN, None, H, N, 1, block=functools.partial(eqx_lru.LRUBlock, norm="layer"), key=KEY
    )
    retrieval = eqx_lru.LRURetrievalModel(encoder, 2, key=KEY)
    pool = eqx_lru.StreamPool(model, slots=2)
    carry, carry_b, carry_h = model.init_carry(), block.init_carry(), hawk.init_carry()
    return {
        "ComplexLRU.__call__": (layer, "__call__", (z,)),
        "ComplexLRU.run": (layer, "run", (z,)),
        "ComplexLRU.step": (layer, "step", (layer.init_state(), z[0])),
        "ComplexLRU.hidden_states": (layer, "hidden_states", (z,)),
        "LRUBlock.__call__": (block, "__call__", (z, block_state)),
        "LRUBlock.scan_body": (block, "scan_body", (z, block_state)),
        "LRUBlock.step": (block, "step", (carry_b, z[0], block_state)),
        "LRUBlock.chunk": (block, "chunk", (carry_b, z, block_state)),
        "HawkBlock.__call__": (hawk, "__call__", (z4, hawk_state)),
        "HawkBlock.step": (hawk, "step", (carry_h, z4[0], hawk_state)),
        "HawkBlock.chunk": (hawk, "chunk", (carry_h, z4, hawk_state)),
        "LRUModel.__call__": (model, "__call__", (x, state)),
        "LRUModel.features": (model, "features", (x, state)),
        "LRUModel.step": (model, "step", (carry, x[0], state)),
        "LRUModel.chunk": (model, "chunk", (carry, x, state)),
        "LRURetrievalModel.__call__": (retrieval, "__call__", (np.stack([x, x]), r_state)),
        "StreamPool.step": (pool, "step", (model, x[:2], state)),
        "StreamPool.chunk": (pool, "chunk", (model, np.stack([x, x]), state)),
    }


ENTRIES = [
    "ComplexLRU.__call__", "ComplexLRU.run", "ComplexLRU.step", "ComplexLRU.hidden_states",
    "LRUBlock.__call__", "LRUBlock.scan_body", "LRUBlock.step", "LRUBlock.chunk",
    "HawkBlock.__call__", "HawkBlock.step", "HawkBlock.chunk",
    "LRUModel.__call__", "LRUModel.features", "LRUModel.step", "LRUModel.chunk",
    "LRURetrievalModel.__call__", "StreamPool.step", "StreamPool.chunk",
]  # fmt: skip


@pytest.mark.parametrize("entry", ENTRIES)
def test_slips_name_the_users_method_and_argument(entry):
    owner, method, args = _entries()[entry]
    call = getattr(owner, method)
    n = len(args)
    plural = "s" if n != 1 else ""
    # A keyword given by position (`layer(u, dt)`, `model(x, state, key)`).
    with pytest.raises(TypeError, match=rf"^`{entry}` takes {n} positional argument{plural} "):
        call(*args, jax.random.PRNGKey(1))
    with pytest.raises(TypeError, match=rf"^`{entry}` takes .*pass the rest by name.*`dt=`"):
        call(*args, np.ones(L, np.float32))
    # A new-style PRNG key where the time steps go, and where the input goes.
    takes_key = "key" in inspect.signature(getattr(type(owner), method)).parameters
    hint = "pass a key by name as `key=`" if takes_key else "it takes no key"
    with pytest.raises(TypeError, match=rf"^`dt` of `{entry}` is a PRNG key.*{hint}"):
        call(*args, dt=jax.random.key(0))
    slot = 1 if entry.startswith("StreamPool") else 0  # its first argument is the model
    name = list(inspect.signature(getattr(type(owner), method)).parameters)[1 + slot]
    keyed = args[:slot] + (jax.random.key(0),) + args[slot + 1 :]
    with pytest.raises(TypeError, match=rf"^`{name}` of `{entry}` is a PRNG key"):
        call(*keyed)
    # A missing argument, and an unknown keyword.
    with pytest.raises(TypeError, match=rf"^`{entry}` is missing `"):
        call(*args[:-1])
    with pytest.raises(TypeError, match=rf"^`{entry}` has no argument `dts` \(did you mean"):
        call(*args, dts=1.0)

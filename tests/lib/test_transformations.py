"""The transformations users apply, with their defaults (issue 39 class 2), and settings
that are finite as Python numbers but overflow or underflow once used (class 3).

- `jax.shard_map` with `check_vma=True` (its default), on 4 CPU devices in one subprocess
  (XLA's device count is fixed when JAX starts): a batch split over the devices (data
  parallelism) through every core of `conformance.CORES`, and a sequence split over them
  (`SequenceParallel`) through an `LRUModel` with a traced `length`, which used to fail
  ("scan body function carry input and carry output must have equal types", "cond
  branches must have equal output types" in the run-time check).
- forward mode (`jax.jacfwd`, `jax.hessian`) through `linear_recurrence`, which used to
  be "can't apply forward-mode autodiff (jvp) to a custom_vjp function", against reverse
  mode in float64.
- the public layers under what users wrap them in: an ensemble stacked by
  `eqx.filter_vmap` over keys (equal to a loop over the members), `jax.checkpoint` with
  the policies `nothing_saveable` and `dots_saveable` (the values and gradients without
  it), `jax.export` of a core, a block and a model with a symbolic length (the exported,
  serialised and reloaded program equals the call), and forward mode through the
  blocks and a model in float64 (`jax.jvp` against central differences and against
  `jax.vjp`), which found the RG-LRU's bounded square root a custom VJP (no forward
  mode; now a custom JVP). Each with a traced `length`; sizes and inputs are
  `builders`'; one compiled program per layer and check.
"""

import functools
import json
import os
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from builders import (
    BATCH,
    D_MODEL,
    D_STATE,
    IN,
    LENGTH,
    core_factory,
    key,
    model,
    normal,
)
from builders import block as lru_block

import eqx_lru

DEVICES = 4


@pytest.mark.slow  # a child process with four devices: every core compiled again
def test_shard_map_defaults_on_four_devices():
    env = dict(os.environ)
    flags = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}"
    env["XLA_FLAGS"] = flags.strip()
    env["JAX_PLATFORMS"] = "cpu"
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tests = os.path.join(repo, "tests")
    env["PYTHONPATH"] = os.pathsep.join([repo, tests, os.path.join(tests, "lib")])
    proc = subprocess.run(
        [sys.executable, __file__], env=env, cwd=repo, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert results, proc.stdout[-3000:]
    failed = [r for r in results if not r["ok"]]
    assert not failed, failed


def _subprocess_checks():
    import equinox as eqx
    from conformance import CORES
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    key = jax.random.key(0)
    rng = np.random.default_rng(0)
    for name, case in CORES.items():
        core = case.make(*case.sizes, key=key)
        shape = (8, 7) if case.scalar_input else (8, 7, case.sizes[0])
        u = jnp.asarray(rng.normal(size=shape), jnp.float32)
        expected = jax.jit(jax.vmap(core))(u)
        f = jax.shard_map(jax.vmap(core), mesh=mesh, in_specs=P("data"), out_specs=P("data"))
        try:
            error = float(jnp.max(jnp.abs(jax.jit(f)(u) - expected)))
            print(json.dumps({"case": name, "ok": error < 1e-5, "error": error}))
        except Exception as e:  # noqa: BLE001 - reported as the failure
            print(json.dumps({"case": name, "ok": False, "error": str(e)[:300]}))
    # A sequence split over the devices, through a model with a traced length.
    seq = Mesh(np.asarray(jax.devices()), ("seq",))

    def model_of(method):
        block = lambda *a, **k: eqx_lru.LRUBlock(  # noqa: E731
            *a, core=lambda *a, **k: eqx_lru.RealLRU(*a, method=method, **k), **k
        )
        return eqx.nn.make_with_state(eqx_lru.LRUModel)(
            7, 3, 6, 5, 2, encoder="embedding", pooling="mean", block=block, key=key
        )

    tokens = jnp.asarray(rng.integers(0, 7, 16), jnp.int32)
    one, state = model_of("sequential")
    split, _ = model_of(eqx_lru.SequenceParallel("seq"))
    expected = one(tokens, state, length=11, inference=True)[0]
    f = jax.shard_map(
        lambda x, n: split(x, state, length=n, inference=True)[0],
        mesh=seq, in_specs=(P("seq"), P()), out_specs=P(),
    )  # fmt: skip
    try:
        error = float(jnp.max(jnp.abs(eqx.filter_jit(f)(tokens, jnp.int32(11)) - expected)))
        print(json.dumps({"case": "model sequence-parallel", "ok": error < 1e-5, "error": error}))
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"case": "model sequence-parallel", "ok": False, "error": str(e)[:300]}))
    try:
        jax.block_until_ready(eqx.filter_jit(f)(tokens, jnp.int32(40)))
        print(json.dumps({"case": "length out of range", "ok": False, "error": "accepted"}))
    except Exception as e:  # noqa: BLE001
        ok = "`length` must be between 1 and" in str(e)
        print(json.dumps({"case": "length out of range", "ok": ok, "error": str(e)[-300:]}))


@pytest.mark.parametrize("method", ["sequential", "associative"])
def test_forward_mode_matches_reverse_mode(method):
    rng = np.random.default_rng(1)
    algebra = eqx_lru.RotationScaling()
    with jax.enable_x64(True):
        a = jnp.asarray(rng.normal(size=(7, 2, 3)) * 0.5)
        b = jnp.asarray(rng.normal(size=(7, 2, 3)))
        h0 = jnp.asarray(rng.normal(size=(2, 3)))

        def loss(a):
            h = eqx_lru.linear_recurrence(a, b, algebra=algebra, initial_state=h0, method=method)
            return jnp.sum(jnp.sin(h))

        forward = jax.jit(jax.hessian(loss))(a)
        reverse = jax.jit(jax.jacrev(jax.jacrev(loss)))(a)
        np.testing.assert_allclose(forward, reverse, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "build,name",
    [
        (lambda v: eqx_lru.lru_optimizer(learning_rate=v, total_steps=10), "learning_rate"),
        (lambda v: eqx_lru.lru_optimizer(learning_rate=1e-3, total_steps=10, eps=v), "eps"),
        (lambda v: eqx_lru.lru_schedule(1e-3, 10, init_value=v), "init_value"),
        (lambda v: eqx_lru.MaskedBatchNorm(3, eps=v), "eps"),
        (lambda v: eqx_lru.baselines.S4D(3, 4, dt_min=v, key=jax.random.key(0)), "dt_min"),
    ],
)
@pytest.mark.parametrize("value", [float("nan"), 1e39, 1e-45])
def test_settings_that_break_once_used_are_refused(build, name, value):
    with pytest.raises(ValueError, match=f"`{name}`"):
        build(value)


# --- the public layers under users' transformations -------------------------------------

VALID = 5  # the traced `length` of every call below: positions 5 and 6 are padding


@functools.cache
def _hawk():
    """`(HawkBlock, state)` at the builders' sizes, its parameters drawn with NumPy on the
    block's shapes (`eqx.filter_eval_shape`): building it eagerly would compile one
    `jax.random` draw per distinct shape of its seven dense layers (4 s of CPU)."""
    shapes = eqx.filter_eval_shape(eqx_lru.HawkBlock, D_MODEL, D_STATE, key=key(0))
    rng = np.random.default_rng(7)

    def draw(leaf):
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        return (rng.normal(size=leaf.shape) * 0.5).astype(leaf.dtype)

    block = jax.tree.map(draw, shapes)
    norms = lambda b: (b.norm.weight, b.mlp_norm.weight)  # noqa: E731
    block = eqx.tree_at(norms, block, tuple(w + 1 for w in norms(block)))  # NumPy
    block = jax.tree.map(lambda a: jax.device_put(a) if isinstance(a, np.ndarray) else a, block)
    return block, eqx.nn.State(block)


#: `name: (build() -> (layer, state), the width of one input position)`: a bidirectional
#: `LRUBlock` (batch norm), a `HawkBlock` (the RG-LRU) and an `LRUModel` of two
#: bidirectional LRUBlocks.
LAYERS = {
    "lru_block": (functools.cache(lambda: lru_block(bidirectional=True)), D_MODEL),
    "hawk_block": (_hawk, D_MODEL),
    "model": (functools.cache(lambda: model(block_options=dict(bidirectional=True))), IN),
}


def _apply(layer, state, x, n, *, inference=True):
    """The layer's output on one sequence `x` with `n` valid positions (from a copy of
    `state`: Equinox refuses a state used twice in one trace)."""
    fresh = jax.tree.unflatten(*reversed(jax.tree.flatten(state)))
    return layer(x, fresh, length=n, inference=inference)[0]


def _float64(tree):
    """`tree` with its floating arrays in float64, by NumPy and `jax.device_put`
    (`jnp.asarray` compiles a program per shape)."""

    def cast(a):
        return jax.device_put(np.asarray(a, np.float64)) if eqx.is_inexact_array(a) else a

    return jax.tree.map(cast, tree)


def test_filter_vmap_ensemble_equals_a_loop_over_members():
    """An ensemble of bidirectional LRUBlocks built by `eqx.filter_vmap` over stacked keys,
    trained on a batch (batch norm reduces over its named batch axis inside each member,
    and each member's statistics are its own): the vmapped call equals a loop over the
    members, outputs and new states, and member `i` is the block built from key `i`."""
    members = 3
    make = eqx.nn.make_with_state(eqx_lru.LRUBlock)
    blocks, states = eqx.filter_vmap(
        lambda k: make(D_MODEL, D_STATE, core=core_factory(), bidirectional=True, key=k)
    )(jnp.stack([key(i) for i in range(members)]))  # fmt: skip
    x = normal(BATCH, LENGTH, D_MODEL, seed=2)
    lengths = np.asarray([VALID, LENGTH], np.int32)

    def train(block, state, x, n):  # a batch in training mode: (y, new state)
        call = lambda x, n: block(x, state, length=n, inference=False)  # noqa: E731
        return jax.vmap(call, axis_name="batch", out_axes=(0, None))(x, n)

    @eqx.filter_jit
    def ensemble(blocks, states, x, n):
        axes = (eqx.if_array(0), eqx.if_array(0), None, None)
        return eqx.filter_vmap(train, in_axes=axes)(blocks, states, x, n)

    @eqx.filter_jit
    def member(blocks, states, i, x, n):  # `i` traced: one program for every member
        block, state = _member((blocks, states), i)
        return train(block, state, x, n)

    together = ensemble(blocks, states, x, lengths)
    loop = [member(blocks, states, jnp.int32(i), x, lengths) for i in range(members)]
    loop = jax.tree.map(lambda *a: np.stack(a), *loop)
    for a, b in zip(jax.tree.leaves(together), jax.tree.leaves(loop), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    y, _ = together
    assert y.shape == (members, BATCH, LENGTH, D_MODEL)
    assert not np.allclose(y[0], y[1])  # the members differ
    alone = lru_block(bidirectional=True, seed=1)  # built from key(1) alone
    numpy = lambda a: np.asarray(a) if eqx.is_array(a) else a  # noqa: E731
    one = _member(jax.tree.map(numpy, (blocks, states)), 1)  # NumPy: no compile
    for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(alone), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # jit and eager round


def _member(ensemble, i):
    """Member `i` of a pytree stacked by `eqx.filter_vmap`."""
    arrays, static = eqx.partition(ensemble, eqx.is_array)
    return eqx.combine(jax.tree.map(lambda a: a[i], arrays), static)


_POLICIES = (
    jax.checkpoint_policies.nothing_saveable,
    jax.checkpoint_policies.dots_saveable,
)


@pytest.mark.parametrize("name", ["lru_block"])
def test_checkpoint_policies_keep_values_and_gradients(name):
    """`jax.checkpoint(loss, policy=...)` around a block in training mode (batch norm over
    the batch axis) gives the loss and the gradients, for the parameters and the input,
    of the loss without it, under both policies."""
    build, width = LAYERS[name]
    layer, state = build()
    x = normal(BATCH, LENGTH, width, seed=4)
    lengths = np.asarray([VALID, LENGTH], np.int32)
    params, static = eqx.partition(layer, eqx.is_inexact_array)

    def loss(params, x, n):
        call = lambda x, n: _apply(eqx.combine(params, static), state, x, n, inference=False)  # noqa: E731
        return jnp.sum(jnp.sin(jax.vmap(call, axis_name="batch")(x, n)))

    @jax.jit
    def plain_and_checkpointed(params, x, n):
        grad = lambda f: jax.value_and_grad(f, argnums=(0, 1))(params, x, n)  # noqa: E731
        return grad(loss), [grad(jax.checkpoint(loss, policy=p)) for p in _POLICIES]

    plain, checkpointed = plain_and_checkpointed(params, x, lengths)
    assert all(np.all(np.isfinite(a)) for a in jax.tree.leaves(plain))
    for result in checkpointed:
        for a, b in zip(jax.tree.leaves(result), jax.tree.leaves(plain), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_jax_export_of_a_core_blocks_and_a_model():
    """`jax.export.export` of a core, the two blocks and a model, each with a symbolic
    length and `length` an input: serialised, reloaded and called, the program gives the
    call's outputs."""
    core = LAYERS["lru_block"][0]()[0].core
    (length,) = jax.export.symbolic_shape("length")
    cases = {"core": (lambda u, n: core(u), D_MODEL)}
    for name, (build, width) in LAYERS.items():
        cases[name] = (functools.partial(_apply, *build()), width)
    failed = {}
    for name, (f, width) in cases.items():
        spec = (jax.ShapeDtypeStruct((length, width), jnp.float32),
                jax.ShapeDtypeStruct((), jnp.int32))  # fmt: skip
        program = jax.export.deserialize(jax.export.export(jax.jit(f))(*spec).serialize())
        x = normal(LENGTH, width, seed=6)
        got, expected = program.call(x, np.int32(VALID)), jax.jit(f)(x, VALID)
        error = float(np.max(np.abs(np.asarray(got) - np.asarray(expected))))
        if not error <= 1e-6:
            failed[name] = error
    assert not failed, failed


def test_bounded_square_root_has_the_bounded_derivative_in_both_modes():
    """The RG-LRU's (and the selective LRU's) normalisation `bounded_sqrt(x, m)`: the
    derivative 1 / (2 sqrt(max(x, 1/(4 m^2)))), at most m, from `jax.jvp` as from
    `jax.grad` (it was a custom VJP, which forward mode refused)."""
    from eqx_lru._cores._rglru_terms import bounded_sqrt

    x = np.asarray([0.0, 1e-9, 4.0], np.float32)
    f = lambda x: bounded_sqrt(x, 1000.0)  # noqa: E731

    @jax.jit
    def both(x):
        forward = jax.jvp(f, (x,), (jnp.ones_like(x),))[1]
        return forward, jax.grad(lambda x: jnp.sum(f(x)))(x)

    for derivative in both(x):
        np.testing.assert_allclose(derivative, [1000.0, 1000.0, 0.25], rtol=1e-6)


@pytest.mark.parametrize("name", ["hawk_block", "model"])
def test_forward_mode_through_blocks_and_a_model(name):
    """`jax.jvp` in float64 through a layer, with tangents on every parameter and on the
    input and a traced `length`, equals central differences and agrees with `jax.vjp`
    (`<w, J v> = <J^T w, v>`); per-position outputs have zero tangents at the pads."""
    build, width = LAYERS[name]
    with jax.enable_x64(True):
        layer, state = _float64(build())
        x = np.random.default_rng(1).normal(size=(LENGTH, width))  # float64
        params, static = eqx.partition(layer, eqx.is_inexact_array)
        rng = np.random.default_rng(5)
        tangents = jax.tree.map(lambda a: rng.normal(size=a.shape), params)
        dx = rng.normal(size=x.shape)

        def f(params, x, n):
            return _apply(eqx.combine(params, static), state, x, n)

        @jax.jit
        def modes(params, x, tangents, dx, n):
            y, jv = jax.jvp(lambda p, x: f(p, x, n), (params, x), (tangents, dx))
            w = jnp.sin(jnp.arange(y.size, dtype=y.dtype)).reshape(y.shape)
            dp, dx_back = jax.vjp(lambda p, x: f(p, x, n), params, x)[1](w)
            pairs = zip(jax.tree.leaves(dp), jax.tree.leaves(tangents), strict=True)
            back = sum(jnp.vdot(a, b) for a, b in pairs) + jnp.vdot(dx_back, dx)
            shift = lambda s: f(  # noqa: E731
                jax.tree.map(lambda a, t: a + s * t, params, tangents), x + s * dx, n
            )
            eps = 1e-6
            return jv, jnp.vdot(w, jv), back, (shift(eps) - shift(-eps)) / (2 * eps)

        jv, forward, back, differences = modes(params, x, tangents, dx, VALID)
        np.testing.assert_allclose(jv, differences, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(forward, back, rtol=1e-10)
        assert np.any(np.asarray(jv) != 0)
        if name != "model":  # per-position outputs, zero at the pads: so are their tangents
            assert np.all(np.asarray(jv)[VALID:] == 0)


if __name__ == "__main__":
    _subprocess_checks()

"""`HawkBlock` (Hawk's residual block: causal convolution, recurrent core, gated MLP): the
float64 NumPy loop (plain, packed, padded, with `dt`, two cores), streaming by `step` and
`chunk` equal to the call, packing equal to separate calls, in `LRUModel` (streaming,
remat), over a sequence split into chunks (a named vmap axis), and bad arguments."""

import functools
import re
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import hawk_loop, rglru_loop

import eqx_lru
import eqx_lru._blocks._gated_mlp
from eqx_lru._cores._core_factory import Core

H, N, L, K, E = 6, 8, 13, 3, 10  # d_model, d_state, length, conv taps, MLP width
CORES = {
    "rglru": functools.partial(eqx_lru.RGLRU, heads=2),
    "rglru-phase-real": functools.partial(eqx_lru.RGLRU, heads=2, phase=True, form="real"),
}


def _block(core: Any = "rglru", dtype=jnp.float64, seed=0, **options):
    block = eqx_lru.HawkBlock(
        H, N, core=cast(Core, CORES.get(core, core)), conv_width=K, mlp_width=E, dtype=dtype,
        key=jax.random.PRNGKey(seed), **options,
    )  # fmt: skip
    # Non-trivial norms, biases and convolution, so that every parameter matters.
    rng = np.random.default_rng(seed + 5)

    def rand(x, scale=0.5):
        return jnp.asarray(rng.normal(size=x.shape) * scale, x.dtype)

    def leaves(b):
        return (
            b.norm.weight, b.mlp_norm.weight, b.conv.weight, b.conv.bias, b.linear_x.bias,
            b.core.b_a, b.core.b_x,
        )  # fmt: skip

    new = [rand(x) + (1 if i < 2 else 0) for i, x in enumerate(leaves(block))]
    return eqx.tree_at(leaves, block, new)


def _params(block) -> dict:
    f = lambda a: np.asarray(a, np.float64)  # noqa: E731
    return dict(
        norm=f(block.norm.weight), mlp_norm=f(block.mlp_norm.weight),
        W_x=f(block.linear_x.weight), b_x=f(block.linear_x.bias),
        W_y=f(block.linear_y.weight), b_y=f(block.linear_y.bias),
        conv_w=f(block.conv.weight), conv_b=f(block.conv.bias),
        W_o=f(block.linear_out.weight), b_o=f(block.linear_out.bias),
        W_up=f(block.mlp.up.weight), b_up=f(block.mlp.up.bias),
        W_d=f(block.mlp.down.weight), b_d=f(block.mlp.down.bias),
    )  # fmt: skip


def _oracle_core(core, dt=None):
    names = ("Lambda", "theta", "W_a", "b_a", "W_x", "b_x")
    p = {n: None if getattr(core, n) is None else np.asarray(getattr(core, n)) for n in names}

    def run(u, segment_ids, h0):
        return rglru_loop(p, u, c=core.c, dt=dt, h0=h0, segment_ids=segment_ids)[0]

    return run


def _data(length=L, seed=1, dtype=jnp.float64):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(length, H)), dtype)
    return x, jnp.asarray(rng.uniform(0.3, 2.0, size=length), dtype)


IDS = np.asarray([0] * 4 + [1] * 1 + [2] * 5 + [0] * 3)  # a 1-long sequence, and ids reused


@eqx.filter_jit
def _plain_packed_padded(block, x, dt, ids):
    state = eqx.nn.State(block)
    plain, _ = block(x, state)
    packed, _ = block(x, state, segment_ids=ids, dt=dt)
    padded, _ = block(x.at[9:].set(jnp.nan), state, length=9)  # garbage after `length`
    return plain, packed, padded


@pytest.mark.parametrize("core", CORES)
def test_matches_float64_loop(core):
    with jax.enable_x64(True):
        block = _block(core)
        x, dt = _data()
        p = _params(block)
        plain, packed, padded = _plain_packed_padded(block, x, dt, jnp.asarray(IDS))
        tol: dict[str, Any] = dict(rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(plain, hawk_loop(p, x, _oracle_core(block.core)), **tol)
        expected = hawk_loop(p, x, _oracle_core(block.core, dt), segment_ids=IDS)
        np.testing.assert_allclose(packed, expected, **tol)
        expected = hawk_loop(p, x[:9], _oracle_core(block.core))
        np.testing.assert_allclose(padded[:9], expected, **tol)
        assert np.all(np.asarray(padded[9:]) == 0)


def _reverse_steps(dt, ids):
    """The steps of the run on the reversed sequence, in its order: position k's gap
    to the next, `dt[k + 1]`, or its own `dt[k]` at the end of a packed sequence."""
    ends = np.append(ids[1:] != ids[:-1], True)
    return np.where(ends, dt, np.append(dt[1:], 0.0))[::-1]


def _bidirectional_oracle(block, x, dt=None, ids=None):
    """A bidirectional block by its definition, in float64 NumPy: the forward run, plus
    the run of the reverse convolution and core on the reversed sequence (`x`, `ids`
    and the reverse-run steps reversed), reversed back, added before the gate."""
    assert block.reverse_conv is not None and block.reverse_core is not None
    x = np.asarray(x, np.float64)
    ids = np.zeros(x.shape[0], int) if ids is None else np.asarray(ids)
    dt = None if dt is None else np.asarray(dt, np.float64)
    p = _params(block)
    conv = block.reverse_conv
    mirrored = {**p, "conv_w": np.asarray(conv.weight, np.float64),
                "conv_b": np.asarray(conv.bias, np.float64)}  # fmt: skip
    steps = None if dt is None else _reverse_steps(dt, ids)
    reverse_core = _oracle_core(block.reverse_core, steps)
    reversed_h = []

    def keep(u, i, h0):  # the reversed run's recurrence output, kept
        reversed_h.append(reverse_core(u, i, h0))
        return reversed_h[0]

    hawk_loop(mirrored, x[::-1], keep, segment_ids=ids[::-1])
    forward = _oracle_core(block.core, dt)
    core = lambda u, i, h0: forward(u, i, h0) + reversed_h[0][::-1]  # noqa: E731
    return hawk_loop(p, x, core, segment_ids=ids)


def _bidirectional_block(core, seed=0):
    """`_block(core, bidirectional=True)` with the reverse convolution's taps and bias
    and the reverse core's gate biases drawn too, so that every reverse parameter
    matters (and differs from the forward one)."""
    block = _block(core, bidirectional=True, seed=seed)
    rng = np.random.default_rng(seed + 9)

    def leaves(b):
        return b.reverse_conv.weight, b.reverse_conv.bias, b.reverse_core.b_a, b.reverse_core.b_x

    new = [jnp.asarray(rng.normal(size=a.shape) * 0.5, a.dtype) for a in leaves(block)]
    return eqx.tree_at(leaves, block, new)


@pytest.mark.parametrize("core", CORES)
def test_bidirectional_matches_forward_plus_reversed_run(core):
    """`bidirectional=True`: the forward run plus the run on the reversed sequence
    (float64 loop), plain, packed with time steps, and padded with garbage after
    `length` (which changes no valid output, and gives zeros there)."""
    with jax.enable_x64(True):
        block = _bidirectional_block(core)
        x, dt = _data()
        plain, packed, padded = _plain_packed_padded(block, x, dt, jnp.asarray(IDS))
        tol: dict[str, Any] = dict(rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(plain, _bidirectional_oracle(block, x), **tol)
        np.testing.assert_allclose(packed, _bidirectional_oracle(block, x, dt, IDS), **tol)
        np.testing.assert_allclose(padded[:9], _bidirectional_oracle(block, x[:9]), **tol)
        assert np.all(np.asarray(padded[9:]) == 0)
        # The forward parameters are those of the key alone (the reverse ones draw keys
        # of their own), and the reverse direction matters: the forward block alone is
        # another function.
        forward = _block(core)
        same = lambda b: (b.norm, b.linear_x, b.linear_y, b.conv, b.core, b.linear_out, b.mlp)  # noqa: E731
        assert bool(eqx.tree_equal(same(forward), same(block)))
        alone = eqx.filter_jit(lambda b, x: b(x, eqx.nn.State(b))[0])(forward, x)
        assert np.max(np.abs(np.asarray(plain) - np.asarray(alone))) > 1e-3


def test_bidirectional_refuses_streaming_by_name():
    """`init_carry`, `step` and `chunk` of a bidirectional block, a model of them, and
    the conversion to recurrentgemma's causal block refuse, saying why (before reading
    a parameter: the block is built by shape only)."""
    key = jax.random.PRNGKey(0)
    block = eqx.filter_eval_shape(eqx_lru.HawkBlock, H, N, bidirectional=True, key=key)
    assert block.bidirectional
    state = eqx.nn.State(block)
    x, _ = _data(dtype=jnp.float32)
    carry = {"conv": jnp.zeros((3, N)), "core": jnp.zeros(N)}
    for name, run in [
        ("init_carry", block.init_carry),
        ("step", lambda: block.step(carry, x[0], state)),
        ("chunk", lambda: block.chunk(carry, x, state)),
    ]:
        with pytest.raises(
            ValueError, match=rf"`HawkBlock.{name}` needs a causal block.*bidirectional"
        ):
            run()
    make = functools.partial(eqx_lru.HawkBlock, conv_width=K, bidirectional=True)
    model = eqx.filter_eval_shape(eqx_lru.LRUModel, 5, 4, H, N, 1, block=make, key=key)
    with pytest.raises(ValueError, match="bidirectional"):
        model.init_carry()
    with pytest.raises(ValueError, match="bidirectional"):
        eqx_lru.recurrentgemma.hawk_block_to_recurrentgemma(block)


@eqx.filter_jit
def _call_and_streams(block, x, dt):
    """The call, `step` over every position, and two chunks (the first padded, the second
    packed) from the first's carry: one compiled program."""
    state = eqx.nn.State(block)
    y, _ = block(x, state, dt=dt)
    step = lambda c, xs: block.step(c, xs[0], state, dt=xs[1])  # noqa: E731
    carry, streamed = jax.lax.scan(step, block.init_carry(), (x, dt))
    first_carry, y1 = block.chunk(block.init_carry(), x[:8], state, length=5, dt=dt[:8])
    ids = jnp.asarray([0] * (L - 6) + [1])  # the last position: a new sequence
    last_carry, y2 = block.chunk(first_carry, x[5:], state, dt=dt[5:], segment_ids=ids)
    alone, _ = block(x[-1:], state, dt=dt[-1:])
    return y, streamed, carry, jnp.concatenate([y1[:5], y2[:-1]]), y1[5:], y2[-1], alone[0]


def test_streaming_equals_call():
    block = _block("rglru-phase-real", dtype=jnp.float32)
    x, dt = _data(dtype=jnp.float32)
    y, streamed, carry, chunked, pads, last, alone = _call_and_streams(block, x, dt)
    np.testing.assert_allclose(streamed, y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(chunked, y[:-1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(last, alone, rtol=1e-5, atol=1e-5)
    assert np.all(np.asarray(pads) == 0)
    # The carry after all positions: the last K - 1 convolution inputs and the core's state.
    assert carry["conv"].shape == (K - 1, N) and carry["core"].shape == (2, N // 2)


@eqx.filter_jit
def _training_and_many_streams(block, x, key):
    state = eqx.nn.State(block)
    called, _ = block(x, state, key=key, inference=False)
    chunked_carry, chunked = block.chunk(block.init_carry(), x, state, inference=False, key=key)
    garbage = jax.tree_util.tree_map(lambda c: c + 3.0, block.init_carry())
    _, reset = block.chunk(garbage, x, state, reset=jnp.asarray(True))
    _, fresh = block.chunk(block.init_carry(), x, state)
    kept, empty = block.chunk(chunked_carry, x, state, length=0)

    def loss(carry, carry_gradient):
        _, y = block.chunk(carry, x, state, carry_gradient=carry_gradient)
        return jnp.sum(y**2)

    grads = [jax.grad(loss)(garbage, flag) for flag in (False, True)]
    return called, chunked, reset, fresh, (kept, chunked_carry), empty, grads


def test_training_chunks_and_many_streams():
    """A training-mode chunk draws the call's dropout; `reset` starts from `init_carry()`;
    an empty chunk keeps the carry; the carry's gradient flows only with
    `carry_gradient=True`."""
    block = _block(dtype=jnp.float32, dropout=0.3)
    x, _ = _data(dtype=jnp.float32)
    called, chunked, reset, fresh, (kept, carry), empty, grads = _training_and_many_streams(
        block, x, jax.random.PRNGKey(7)
    )
    np.testing.assert_allclose(chunked, called, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(reset, fresh, rtol=0, atol=0)
    assert bool(eqx.tree_equal(kept, carry)) and np.all(np.asarray(empty) == 0)
    frozen, flowing = (jax.tree_util.tree_leaves(g) for g in grads)
    assert all(np.all(np.asarray(g) == 0) for g in frozen)
    assert all(np.any(np.asarray(g) != 0) for g in flowing)


def test_packed_sequences_equal_separate_calls():
    block = _block(dtype=jnp.float32)
    x, _ = _data(dtype=jnp.float32)
    starts = [0, 4, 5, 10, L]

    @eqx.filter_jit
    def packed_and_alone(block, x):
        state = eqx.nn.State(block)
        packed, _ = block(x, state, segment_ids=jnp.asarray(IDS))
        alone = [block(x[a:b], state)[0] for a, b in zip(starts[:-1], starts[1:], strict=True)]
        return packed, jnp.concatenate(alone)

    packed, alone = packed_and_alone(block, x)
    np.testing.assert_allclose(packed, alone, rtol=1e-5, atol=1e-6)


def test_in_model_streams_and_remats():
    key = jax.random.PRNGKey(3)
    make = functools.partial(eqx_lru.HawkBlock, conv_width=K, mlp_width=E)
    build = functools.partial(eqx_lru.LRUModel, 5, 4, H, N, 2, pooling=None, block=make, key=key)
    model, state = eqx.nn.make_with_state(build)()
    remat_model = build(remat=True)
    assert isinstance(cast(eqx_lru.HawkBlock, model.blocks[0]).core, eqx_lru.RGLRU)  # default core
    x = jnp.asarray(np.random.default_rng(0).normal(size=(L, 5)), jnp.float32)

    @eqx.filter_jit
    def run(model, remat_model, x):
        y, _ = model(x, state, inference=True)
        remat, _ = remat_model(x, state, inference=True)
        step = lambda c, x_t: model.step(c, x_t, state)  # noqa: E731
        _, streamed = jax.lax.scan(step, model.init_carry(), x)
        return y, remat, streamed

    y, remat, streamed = run(model, remat_model, x)
    np.testing.assert_allclose(remat, y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(streamed, y, rtol=1e-5, atol=1e-5)
    # The core is the optimiser's recurrent group; the convolution and projections are not.
    labels = eqx_lru.lru_param_labels(model)
    assert labels.blocks[0].core.Lambda == "recurrent"
    assert labels.blocks[0].conv.weight != "recurrent"


@pytest.mark.parametrize("bidirectional", [False, True])
def test_sequence_split_across_chunks(bidirectional):
    """Four chunks of a named vmap axis (the collectives of `SequenceParallel` and the
    convolution's halo work over it as over a mesh axis) give the one-device call, with
    padding, time steps and packed sequences that cross chunk boundaries; bidirectional,
    the reverse convolution's halo (the next chunk's first inputs) and the reverse
    core's steps cross them the other way."""
    chunks, length = 4, 16
    split = functools.partial(CORES["rglru"], method=eqx_lru.SequenceParallel("seq"))
    options = dict(dtype=jnp.float32, bidirectional=bidirectional)
    one, many = _block(**options), _block(split, **options)
    state = eqx.nn.State(one)
    x, dt = _data(length=length, dtype=jnp.float32)
    ids = jnp.asarray([0] * 3 + [1] * 6 + [2] * 7)  # boundaries inside chunks 0 and 2

    @eqx.filter_jit
    def split_and_whole(one, many, x, ids, dt):
        def run(x, ids, dt):
            return many(x, state, length=14, segment_ids=ids, dt=dt)[0]

        parts = (x.reshape(chunks, -1, H), ids.reshape(chunks, -1), dt.reshape(chunks, -1))
        y = jax.vmap(run, axis_name="seq")(*parts)
        return y, one(x, state, length=14, segment_ids=ids, dt=dt)[0]

    y, expected = split_and_whole(one, many, x, ids, dt)
    np.testing.assert_allclose(y.reshape(length, H), expected, rtol=1e-5, atol=1e-6)


def test_bad_arguments():
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="conv_width"):
        eqx_lru.HawkBlock(H, N, conv_width=0, key=key)
    with pytest.raises(ValueError, match="dropout"):
        eqx_lru.HawkBlock(H, N, dropout=1.0, key=key)
    with pytest.raises(ValueError, match="d_state"):  # the RG-LRU at the recurrence width
        eqx_lru.HawkBlock(H, N, core=lambda d, n, **kw: eqx_lru.RGLRU(d, n + 1, **kw), key=key)
    block = eqx_lru.HawkBlock(H, N, core=eqx_lru.baselines.S4D, conv_width=K, key=key)
    state = eqx.nn.State(block)
    x, dt = _data(dtype=jnp.float32)
    with pytest.raises(TypeError, match="S4D takes no `dt`"):
        block(x, state, dt=dt)
    with pytest.raises(ValueError, match="d_model is 6"):
        block(x[:, :4], state)
    with pytest.raises(ValueError, match=r"carry\['conv'\]"):
        block.step({"conv": jnp.zeros((K, N)), "core": block.core.init_state()}, x[0], state)


@pytest.mark.parametrize(
    "make, meaning",
    [
        (eqx_lru.ComplexLRU, r"\(ComplexLRU: the complex modes N\)"),
        (eqx_lru.baselines.S4D, r"\(S4D: the real state size N, N/2 complex modes kept\)"),
        (eqx_lru.HawkBlock, r"\(HawkBlock: the recurrence width N\)"),
        (eqx_lru.RGLRU, r"width of its input, so `d_state` must be None or d_model=3"),
    ],
    ids=["lru-complex-modes", "s4d-real-state", "hawk-width", "rglru-d_model"],
)  # fmt: skip
def test_wrong_d_state_names_its_meaning(make, meaning):
    """`d_state` means four things (complex modes, a real state size, a recurrence width,
    a bare RG-LRU's d_model; the table on the concepts page on cores): the error for a
    wrong one says which, in one line naming the argument."""
    with pytest.raises(ValueError, match=r"`d_state`") as info:
        make(3, 0, key=jax.random.PRNGKey(0))
    assert re.search(meaning, str(info.value)) and "\n" not in str(info.value)


_KEY = jax.random.PRNGKey(0)
_GATED_MLP = eqx_lru._blocks._gated_mlp.GatedMLP  # noqa: SLF001 (not a public name)


@pytest.mark.parametrize(
    "make, options, error, name",
    [
        (eqx_lru.RGLRU, dict(c=1e308), ValueError, "`c`"),
        (eqx_lru.RGLRU, dict(c=1e-320), ValueError, "`c`"),
        (eqx_lru.RGLRU, dict(r_max=1 - 1e-9), ValueError, "`r_max`"),
        (eqx_lru.RGLRU, dict(r_min=1e-30), ValueError, "`r_min`"),
        (eqx_lru.RGLRU, dict(phase=True, max_phase=1e39), ValueError, "`max_phase`"),
        (functools.partial(eqx_lru.HawkBlock, d_state=6, init="recurrentgemma"),
         dict(final_scale=1e308), ValueError, "`final_scale`"),
        (functools.partial(eqx_lru.HawkBlock, d_state=6, init="recurrentgemma"),
         dict(final_scale=1e-300), ValueError, "`final_scale`"),
        (functools.partial(_GATED_MLP, width=5, init="recurrentgemma"),
         dict(final_scale=1e308), ValueError, "`final_scale`"),
        (functools.partial(_GATED_MLP, width=5), dict(init="lecun"), ValueError, "`init`"),
    ],
)  # fmt: skip
def test_values_that_overflow_once_used_are_refused(make, options, error, name):
    """Init scales and options finite as Python numbers but infinite or zero once used in
    float32 (the weights' std, `c` times a gate, the ring sampled in a², the phases), and
    GatedMLP's unknown `init` (taken as "equinox" before), are refused at construction,
    by name. (CausalConv has no scale: its taps' std is √(0.01/K) for a size K.)"""
    with pytest.raises(error, match=name):
        make(4, key=_KEY, **options)

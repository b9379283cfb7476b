"""Many streams at once: `step`/`chunk` under `jax.vmap` with a reset and a chunk length
per stream, and `eqx_lru.StreamPool` (admit, step, chunk, evict).

The reference for every stream is the stream run alone, by the model's parallel call in
inference mode: the output after position t is the call on the current sequence up to t
(from the stream's last reset), padded to one shape (`length=`) so that one compilation
serves every prefix. Streams restart at random positions, chunks have random lengths
(0 included), and the streams take every path at once under one `jit`. Pooling `None`
`"mean"` (whose running sum and count must restart too) and `"last"`, both forms, batch
norm, layer norm and none.

Sizes are distinct: VOCAB 9, OUT 3, H 5, N 6, depth 2, 4 streams, 17 steps, chunks of 5.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru
from eqx_lru._models._model_io import Pooling

VOCAB, OUT, H, N, DEPTH, STREAMS, T, CHUNK, CALLS = 9, 3, 5, 6, 2, 4, 17, 5, 6

CONFIGS = {
    "complex-none-batch": ("complex", None, "batch"),
    "real-mean-layer": ("real", "mean", "layer"),
    "complex-last-nonorm": ("complex", "last", None),  # chunk test only
}


def _model(name, seed=0):
    form, pooling, norm = CONFIGS[name]
    core = functools.partial(
        eqx_lru.ComplexLRU if form == "complex" else eqx_lru.RealLRU, r_min=0.5, r_max=0.95
    )
    block = functools.partial(eqx_lru.LRUBlock, core=core, norm=norm)
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, OUT, H, N, DEPTH, encoder="embedding", pooling=pooling, block=block,
        key=jax.random.PRNGKey(seed),
    )  # fmt: skip
    rng = np.random.default_rng(seed + 1)
    for blk in model.blocks:  # running statistics off their init
        assert isinstance(blk, eqx_lru.LRUBlock)
        if isinstance(blk.norm, eqx_lru.MaskedBatchNorm):
            steps, mean, var = state.get(blk.norm.state_index)
            state = state.set(blk.norm.state_index, (
                jnp.asarray(4, steps.dtype), jnp.asarray(rng.normal(size=mean.shape), mean.dtype),
                jnp.asarray(rng.uniform(0.5, 2, size=var.shape), var.dtype),
            ))  # fmt: skip
    return model, state


@eqx.filter_jit
def alone(model, state, prefixes, lengths):
    """The parallel call on every (padded) prefix: `(rows, out_size)` pooled, or the
    output at the prefix's last position."""

    def one(x, n):
        out, _ = model(x, state, length=n, inference=True)
        return out if model.pooling is not None else out[n - 1]

    return jax.vmap(one)(prefixes, lengths)


def _reference(model, state, sequences):
    """For every stream, a list (per position) of the output of the stream alone: the
    parallel call on the current sequence up to that position. `sequences[b]` is the list
    of the stream's sequences (token lists), in order."""
    rows, lengths, where = [], [], []
    for b, stream in enumerate(sequences):
        for s, seq in enumerate(stream):
            for t in range(len(seq)):
                rows.append(np.pad(seq[: t + 1], (0, T - t - 1)))
                lengths.append(t + 1)
                where.append((b, s, t))
    out = np.asarray(alone(model, state, jnp.asarray(np.stack(rows), jnp.int32),
                           jnp.asarray(lengths, jnp.int32)))  # fmt: skip
    ref = {key: out[i] for i, key in enumerate(where)}
    return [[[ref[b, s, t] for t in range(len(seq))] for s, seq in enumerate(stream)]
            for b, stream in enumerate(sequences)]  # fmt: skip


@eqx.filter_jit
def last_carries(model, state, last, lengths):
    """Each stream's final carry, alone: its last sequence in one chunk from `init_carry()`."""
    return jax.vmap(lambda x, n: model.chunk(model.init_carry(), x, state, length=n)[0])(
        last, lengths
    )


def _check_carries(model, state, carry, sequences):
    lasts = [stream[-1] for stream in sequences]
    padded = np.stack([np.pad(s, (0, T - len(s))) for s in lasts])
    expected = last_carries(model, state, jnp.asarray(padded, jnp.int32),
                            jnp.asarray([len(s) for s in lasts], jnp.int32))  # fmt: skip
    for got, want in zip(jax.tree.leaves(carry), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@eqx.filter_jit
def stepped(model, state, tokens, resets):
    """Every stream by `step` (`jax.vmap` over the streams, `jax.lax.scan` over time)."""
    carry = jax.vmap(lambda _: model.init_carry())(jnp.arange(STREAMS))

    def body(carry, inputs):
        x, r = inputs
        return jax.vmap(lambda c, x, r: model.step(c, x, state, reset=r))(carry, x, r)

    return jax.lax.scan(body, carry, (tokens.T, resets.T))


@pytest.mark.parametrize("name", ["complex-none-batch", "real-mean-layer"])
def test_step_streams_restart_alone(name):
    model, state = _model(name)
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, VOCAB, (STREAMS, T)).astype(np.int32)
    resets = rng.random((STREAMS, T)) < 0.2
    resets[0] = False  # one stream never restarts; the others at random positions
    resets[1, [4, 5]] = True  # two restarts in a row: a sequence of one token
    carry, outs = stepped(model, state, jnp.asarray(tokens), jnp.asarray(resets))
    sequences = [
        [list(s) for s in np.split(tokens[b], np.flatnonzero(resets[b][1:]) + 1)]
        for b in range(STREAMS)
    ]  # a reset at position 0 starts the first sequence anyway
    ref = _reference(model, state, sequences)
    outs = np.asarray(outs).swapaxes(0, 1)  # (streams, T, out)
    for b in range(STREAMS):
        expected = np.stack([o for seq in ref[b] for o in seq])
        np.testing.assert_allclose(outs[b], expected, rtol=1e-5, atol=1e-5)
    _check_carries(model, state, carry, sequences)


@eqx.filter_jit
def chunked(model, state, chunks, lengths, resets):
    """Every stream by `chunk` calls: `jax.vmap` over the streams with a length and a reset
    each, a Python loop over the calls."""
    carry = jax.vmap(lambda _: model.init_carry())(jnp.arange(STREAMS))
    outs = []
    for k in range(CALLS):
        run = jax.vmap(lambda c, x, n, r: model.chunk(c, x, state, length=n, reset=r))
        carry, out = run(carry, chunks[:, k], lengths[:, k], resets[:, k])
        outs.append(out)
    return carry, jnp.stack(outs, axis=1)


def _random_calls(rng):
    """Per stream and call: a chunk length (0 included) and a reset flag, such that every
    stream's last sequence is not empty."""
    lengths = rng.integers(0, CHUNK + 1, (STREAMS, CALLS))
    lengths[:, 0] = np.maximum(lengths[:, 0], 1)
    lengths[:, -1] = np.maximum(lengths[:, -1], 1)
    lengths[2, 2] = 0  # an empty chunk that restarts the stream
    resets = rng.random((STREAMS, CALLS)) < 0.3
    resets[2, 2] = True
    return lengths, resets


@pytest.mark.parametrize("name", list(CONFIGS))
def test_chunk_streams_restart_alone(name):
    model, state = _model(name)
    rng = np.random.default_rng(3)
    lengths, resets = _random_calls(rng)
    chunks = np.full((STREAMS, CALLS, CHUNK), -3, np.int32)  # pads: out of the vocabulary
    sequences = [[[]] for _ in range(STREAMS)]
    for b in range(STREAMS):
        for k in range(CALLS):
            chunks[b, k, : lengths[b, k]] = rng.integers(0, VOCAB, lengths[b, k])
            if resets[b, k] and sequences[b][-1]:
                sequences[b].append([])
            sequences[b][-1].extend(chunks[b, k, : lengths[b, k]].tolist())
    carry, outs = chunked(model, state, *map(jnp.asarray, (chunks, lengths, resets)))
    ref = _reference(model, state, sequences)
    outs = np.asarray(outs)
    for b in range(STREAMS):
        seq, t = 0, 0  # where the stream is: its sequence and position
        for k in range(CALLS):
            n = lengths[b, k]
            if resets[b, k] and t > 0:  # a new sequence starts here
                seq, t = seq + 1, 0
            if n == 0:
                np.testing.assert_array_equal(outs[b, k], 0)
                continue
            expected = np.stack(ref[b][seq][t : t + n])
            got = outs[b, k, :n] if model.pooling is None else outs[b, k][None]
            want = expected if model.pooling is None else expected[-1:]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            if model.pooling is None:
                np.testing.assert_array_equal(outs[b, k, n:], 0)
            t += n
    _check_carries(model, state, carry, sequences)


def test_block_streams_restart_alone():
    """The block's own reset and chunk lengths (a block used without a model)."""
    block = eqx_lru.LRUBlock(H, N, core="real", norm="layer", key=jax.random.PRNGKey(4))
    state = eqx.nn.State(block)
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.normal(size=(STREAMS, 2, CHUNK, H)), jnp.float32)
    lengths = jnp.asarray([[3, 5], [0, 4], [5, 0], [2, 2]], jnp.int32)
    resets = jnp.asarray([[False, True], [False, False], [True, True], [False, False]])

    @eqx.filter_jit
    def run(block, x, lengths, resets):
        carry = jax.vmap(lambda _: block.init_carry())(jnp.arange(STREAMS))
        ys = []
        for k in range(2):
            run = jax.vmap(lambda c, x, n, r: block.chunk(c, x, state, length=n, reset=r))
            carry, y = run(carry, x[:, k], lengths[:, k], resets[:, k])
            ys.append(y)
        step = jax.vmap(lambda c, x, r: block.step(c, x, state, reset=r))
        return step(carry, x[:, 0, 0], resets[:, 1])[1], ys

    y_step, (y0, y1) = run(block, x, lengths, resets)
    call = eqx.filter_jit(lambda u, n: block(u, state, length=n, inference=True)[0])

    def full(u):  # the block's call, padded to one shape (one compilation)
        n = u.shape[0]
        return call(jnp.pad(u, ((0, 2 * CHUNK + 1 - n), (0, 0))), jnp.asarray(n))[:n]

    for b in range(STREAMS):
        n0, n1 = int(lengths[b, 0]), int(lengths[b, 1])
        first = x[b, 0, :n0]
        second = x[b, 1, :n1] if bool(resets[b, 1]) else jnp.concatenate([first, x[b, 1, :n1]])
        if n0:
            np.testing.assert_allclose(y0[b, :n0], full(first), rtol=1e-5, atol=1e-5)
        if n1:
            np.testing.assert_allclose(y1[b, :n1], full(second)[-n1:], rtol=1e-5, atol=1e-5)
        last = x[b, 0, :1] if bool(resets[b, 1]) else jnp.concatenate([second, x[b, 0, :1]])
        np.testing.assert_allclose(y_step[b], full(last)[-1], rtol=1e-5, atol=1e-5)


# --- the slot pool -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["real-mean-layer"])
def test_pool_serves_requests_as_if_alone(name):
    """Five requests through three slots: each admitted into a free slot when one is,
    prefilled by one `chunk` of its prompt (the other slots get length 0 in that call),
    then decoded by `step` beside the others, and evicted when done. Every output equals
    the request's prefix run alone."""
    model, state = _model(name, seed=6)
    rng = np.random.default_rng(7)
    prompts = [rng.integers(0, VOCAB, n) for n in (3, 5, 1, 4, 2)]
    tails = [rng.integers(0, VOCAB, n) for n in (4, 2, 6, 1, 3)]
    step = eqx.filter_jit(lambda pool, x: pool.step(model, x, state))
    prefill = eqx.filter_jit(lambda pool, x, n: pool.chunk(model, x, state, length=n))

    pool = eqx_lru.StreamPool(model, 3)
    waiting, running, got = list(range(5)), {}, {r: [] for r in range(5)}
    while waiting or running:
        slot = int(pool.free_slot())
        if waiting and slot >= 0:  # admit and prefill one request
            r = waiting.pop(0)
            pool = pool.admit(slot)
            x = np.zeros((3, CHUNK), np.int32)
            x[slot, : len(prompts[r])] = prompts[r]
            n = np.zeros(3, np.int32)
            n[slot] = len(prompts[r])
            pool, out = prefill(pool, jnp.asarray(x), jnp.asarray(n))
            got[r].append(np.asarray(out[slot]))
            running[slot] = [r, 0]
            continue
        x = np.zeros(3, np.int32)
        for slot, (r, t) in running.items():
            x[slot] = tails[r][t]
        pool, out = step(pool, jnp.asarray(x))
        free = [s for s in range(3) if s not in running]
        np.testing.assert_array_equal(np.asarray(out)[free], 0)  # free slots: zeros
        for slot in list(running):
            r, t = running[slot]
            got[r].append(np.asarray(out[slot]))
            running[slot][1] += 1
            if t + 1 == len(tails[r]):
                pool = pool.evict(slot)
                del running[slot]
    sequences = [[list(prompts[r]) + list(tails[r])] for r in range(5)]
    ref = _reference(model, state, sequences)
    for r in range(5):
        expected = [ref[r][0][len(prompts[r]) - 1], *ref[r][0][len(prompts[r]) :]]
        np.testing.assert_allclose(np.stack(got[r]), np.stack(expected), rtol=1e-5, atol=1e-5)
    assert int(pool.free_slot()) == 0 and not bool(np.any(pool.active))


def test_pool_errors():
    model, state = _model("real-mean-layer")
    pool = eqx_lru.StreamPool(model, 3)
    with pytest.raises((ValueError, TypeError), match="slot"):  # TypeError: the test hook
        pool.admit(jnp.zeros(2, jnp.int32))
    with pytest.raises(Exception, match=r"slot.*\[0, 3\)"):
        pool.admit(3)
    with pytest.raises(ValueError, match="one entry per slot"):
        pool.step(model, jnp.zeros(4, jnp.int32), state)
    with pytest.raises(TypeError, match="model"):
        eqx_lru.StreamPool(object(), 2)  # pyright: ignore[reportArgumentType]
    with pytest.raises((ValueError, TypeError), match="reset"):
        model.step(model.init_carry(), jnp.asarray(1), state, reset=jnp.ones(2, bool))
    with pytest.raises(Exception, match="between 0"):
        model.chunk(model.init_carry(), jnp.zeros(CHUNK, jnp.int32), state, length=CHUNK + 1)


# --- time steps per slot, and counters that cannot wrap -----------------------------------


def _small(pooling: Pooling = "mean"):
    """One block, no norm: the cheapest model whose cores take `dt`."""
    core = functools.partial(eqx_lru.ComplexLRU, r_min=0.5, r_max=0.95)
    block = functools.partial(eqx_lru.LRUBlock, core=core, norm=None)
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, OUT, H, N, 1, encoder="embedding", pooling=pooling, block=block,
        key=jax.random.PRNGKey(3),
    )  # fmt: skip


@eqx.filter_jit
def _pool_with_steps(model, state, pool, tokens, dt, chunks, lengths, chunk_dt):
    pool, first = pool.step(model, tokens, state, dt=dt)
    pool, then = pool.chunk(model, chunks, state, length=lengths, dt=chunk_dt)
    return first, then


def test_pool_time_steps_are_the_models():
    """`StreamPool.step/chunk(dt=)` (issue 34): each active slot's outputs equal the
    model's parallel call on that stream with those time steps (a free slot's steps,
    `nan` here, and a step after a slot's `length` are not read); a slot with `length` 0
    keeps its output."""
    model, state = _small()
    rng = np.random.default_rng(5)
    pool = eqx_lru.StreamPool(model, STREAMS).admit(0).admit(1).admit(3)
    tokens = rng.integers(0, VOCAB, STREAMS).astype(np.int32)
    dt = rng.uniform(0.3, 3, STREAMS).astype(np.float32)
    dt[2] = np.nan  # a free slot
    chunks = rng.integers(0, VOCAB, (STREAMS, CHUNK)).astype(np.int32)
    lengths = np.array([CHUNK, 2, 3, 0], np.int32)
    chunk_dt = rng.uniform(0.3, 3, (STREAMS, CHUNK)).astype(np.float32)
    chunk_dt[1, 2:] = np.nan  # after slot 1's length
    first, then = _pool_with_steps(model, state, pool, tokens, dt, chunks, lengths, chunk_dt)
    call = eqx.filter_jit(lambda x, n, dt: model(x, state, length=n, dt=dt, inference=True)[0])
    for slot in (0, 1, 3):
        n = 1 + lengths[slot]
        seq = np.pad(np.r_[tokens[slot], chunks[slot, : n - 1]], (0, CHUNK + 1 - n))
        steps = np.pad(np.r_[dt[slot], chunk_dt[slot, : n - 1]], (0, CHUNK + 1 - n),
                       constant_values=1)  # fmt: skip
        np.testing.assert_allclose(
            first[slot], call(seq, jnp.asarray(1), steps), rtol=1e-5, atol=1e-6
        )
        whole = call(seq, jnp.asarray(n), steps) if n > 1 else 0
        np.testing.assert_allclose(then[slot], whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(first[2], 0)
    np.testing.assert_array_equal(then[2], 0)


def test_mean_pooling_count_saturates_instead_of_wrapping():
    """Issue 34 (round 4's silent kind): a stream's position count passed 2**31 - 1 and
    wrapped, and mean pooling became garbage. Started from a carry 3 positions short of
    the limit, 5 more positions: the count stays at 2**31 - 1 and the pooled output is
    the mean of every position so far (float64 reference); later positions keep it
    there, finite."""
    model, state = _small()
    rng = np.random.default_rng(6)
    count = 2**31 - 4
    mean = rng.normal(size=H).astype(np.float32)
    carry = dict(model.init_carry(), sum=jnp.asarray(mean * np.float32(count)),
                 count=jnp.asarray(count, jnp.int32))  # fmt: skip
    x = jnp.asarray(rng.integers(0, VOCAB, CHUNK), jnp.int32)
    added = np.asarray(model.chunk(model.init_carry(), x, state)[0]["sum"], np.float64)
    new, out = model.chunk(carry, x, state)
    assert int(new["count"]) == 2**31 - 1
    expected = (mean.astype(np.float64) * count + added) / (count + CHUNK)
    got = np.asarray(new["sum"], np.float64) / int(new["count"])
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert model.head is not None
    np.testing.assert_allclose(out, model.head(jnp.asarray(expected, jnp.float32)), rtol=1e-5)
    later, out = model.step(new, jnp.asarray(1), state)
    assert int(later["count"]) == 2**31 - 1 and np.all(np.isfinite(out))


def test_batch_norm_step_count_saturates():
    """`MaskedBatchNorm`'s count of training batches (its bias correction's exponent)
    stays at 2**31 - 1 instead of wrapping to a negative count, which turned the running
    statistics into "never seen"."""
    norm, state = eqx.nn.make_with_state(eqx_lru.MaskedBatchNorm)(H, "batch")
    _, mean, var = state.get(norm.state_index)
    state = state.set(norm.state_index, (jnp.asarray(2**31 - 1, jnp.int32), mean + 1, var + 2))
    x = jnp.asarray(np.random.default_rng(7).normal(size=(2, CHUNK, H)), jnp.float32)
    _, state = jax.vmap(lambda x: norm(x, state), axis_name="batch", out_axes=(0, None))(x)
    steps, _, _ = state.get(norm.state_index)
    assert int(steps) == 2**31 - 1
    y, _ = norm(x[0], state, inference=True)
    assert np.all(np.isfinite(y))

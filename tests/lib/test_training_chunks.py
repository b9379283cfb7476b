"""Training by chunks (`LRUModel.chunk(..., inference=False)`): truncated backpropagation
through time.

- Forward: K training chunks (padded, with a packed-sequence boundary inside one) give
  the whole sequence's training-mode call, and the carry of a step loop.
- Gradient: with the default (`carry_gradient=False`) the gradient of the chunks' loss
  equals central finite differences, in float64, of the same loss computed by a loop of
  the model's `step` in which the carry at each chunk's start is held fixed (the
  truncation, computed independently of `chunk`, the scan methods and autodiff); with
  `carry_gradient=True` it equals the gradient of the whole sequence's call.

For both LRU forms and the sequential, associative and Pallas (interpret) methods
(complex-sequential, real-associative, complex-pallas), and S4D/S5; layer norm and no
norm, both GLUs. Also: dropout keys, batch norm's refusal,
`norm=None` against a NumPy loop, and a learning test (memory across chunk boundaries
through the carry beats the same model reset every chunk).

Sizes are distinct: VOCAB 7, OUT 2, H 3, N 4, L 13 in chunks of 6 (5 + 6 + 2 valid),
depth 2.
"""

import functools
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree
from reference import lru_loop, lru_params_np

import eqx_lru
from eqx_lru import baselines

VOCAB, OUT, H, N, DEPTH = 7, 2, 3, 4, 2
LENGTHS = (5, 6, 2)  # valid positions of the three chunks
CHUNK = 6  # their padded length
L = sum(LENGTHS)
SEGMENT_START = 8  # a packed sequence starts here, inside the second chunk
PALLAS = eqx_lru.PallasScan(interpret=True)


def _lru(form, method):
    cls = eqx_lru.ComplexLRU if form == "complex" else eqx_lru.RealLRU
    return functools.partial(cls, r_min=0.5, r_max=0.95, method=method)


# Each LRU form and each scan method at least once (a full cross costs CI minutes for
# little: the methods share the code around them, tested here in both forms).
CONFIGS = {
    "complex-sequential": (_lru("complex", "sequential"), "layer", "full"),
    "real-associative": (_lru("real", "associative"), None, "half"),
    "complex-pallas": (_lru("complex", PALLAS), None, "half"),
    "s4d": (baselines.S4D, "layer", "full"),
    "s5": (baselines.S5, None, "half"),
}
FAST = ("complex-sequential", "real-associative")
PARAMS = [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in CONFIGS]


def _perturbed(model, seed):
    """Every floating parameter moved off its init (no special points such as a layer
    norm's weight 1 and bias 0), in NumPy."""
    rng = np.random.default_rng(seed)

    def move(x):
        if not eqx.is_inexact_array(x):
            return x
        x_np = np.asarray(x, np.float64)
        moved = x_np * (1 + 0.1 * rng.normal(size=x.shape)) + 0.05 * rng.normal(size=x.shape)
        return jnp.asarray(moved, x.dtype)

    return jax.tree_util.tree_map(move, model)


def _model(name, *, dtype=jnp.float64, dropout=0.0, seed=0, depth=DEPTH):
    core, norm, glu = CONFIGS[name]
    block = functools.partial(eqx_lru.LRUBlock, core=core, norm=norm, glu=glu, dropout=dropout)
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, OUT, H, N, depth, encoder="embedding", pooling=None, block=block,
        dtype=dtype, key=jax.random.PRNGKey(seed),
    )  # fmt: skip
    return _perturbed(model, seed + 1), state


def _data(seed=2):
    """The sequence, its packed-sequence ids, the loss weights per position, and the
    same split into padded chunks (garbage in the pads)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VOCAB, L).astype(np.int32)
    ids = (np.arange(L) >= SEGMENT_START).astype(np.int32)
    w = rng.normal(size=(L, OUT))
    chunks = np.full((len(LENGTHS), CHUNK), -5, np.int32)  # out-of-vocabulary pads
    chunk_ids = np.zeros((len(LENGTHS), CHUNK), np.int32)
    chunk_w = np.zeros((len(LENGTHS), CHUNK, OUT))
    start = 0
    for k, n in enumerate(LENGTHS):
        chunks[k, :n], chunk_ids[k, :n] = x[start : start + n], ids[start : start + n]
        chunk_ids[k, n:] = chunk_ids[k, n - 1]
        chunk_w[k, :n] = w[start : start + n]
        start += n
    return x, ids, w, chunks, chunk_ids, chunk_w


# --- the chunked loss, the whole-sequence loss, the step loop (module-level jits) ----------


@eqx.filter_jit
def chunked_grad(model, state, chunks, ids, w, carry_gradient):
    """`(loss, outputs, final carry), gradient` of the chunks' loss
    `sum_k sum_t w_kt . y_kt`, each chunk from the carry of the previous one."""

    def loss(model):
        carry, total, ys = model.init_carry(), 0.0, []
        for k, n in enumerate(LENGTHS):
            carry, y = model.chunk(
                carry, chunks[k], state, length=n, segment_ids=ids[k], inference=False,
                carry_gradient=carry_gradient,
            )  # fmt: skip
            total, ys = total + jnp.sum(w[k] * y), ys + [y]
        return total, (jnp.stack(ys), carry)

    return eqx.filter_value_and_grad(loss, has_aux=True)(model)


@eqx.filter_jit
def whole_grad(model, state, x, ids, w):
    def loss(model):
        y, _ = model(x, state, segment_ids=ids, inference=False)
        return jnp.sum(w * y), y

    return eqx.filter_value_and_grad(loss, has_aux=True)(model)


def _where(flag, a, b):
    return jax.tree_util.tree_map(lambda p, q: jnp.where(flag, p, q), a, b)


def step_loss(model, state, x, ids, w, pinned):
    """The loss by `step` position by position, in a scan: a new packed sequence restarts
    from `init_carry()`; with `pinned` (the carry before every chunk's first position) the
    carry at each chunk's start is replaced by the pinned one. Returns `(loss, carries
    before every position, outputs)`."""
    init = model.init_carry()
    starts = np.zeros(L, bool)
    starts[np.cumsum((0,) + LENGTHS[:-1])] = True
    chunk_of = np.repeat(np.arange(len(LENGTHS)), LENGTHS)
    new_seq = jnp.concatenate([jnp.zeros(1, bool), ids[1:] != ids[:-1]])

    def body(carry, inputs):
        x_t, w_t, start, new, k = inputs
        before = carry
        if pinned is not None:
            carry = _where(start, jax.tree_util.tree_map(lambda c: c[k], pinned), carry)
        carry = _where(new, init, carry)
        carry, y = model.step(carry, x_t, state)
        return carry, (before, jnp.sum(w_t * y), y)

    inputs = (x, w, jnp.asarray(starts), new_seq, jnp.asarray(chunk_of))
    _, (befores, losses, ys) = jax.lax.scan(body, init, inputs)
    return jnp.sum(losses), befores, ys


@eqx.filter_jit
def finite_differences(model, state, x, ids, w, eps=1e-5):
    """Central differences of `step_loss` with the carries at the chunk starts held at
    their unperturbed values: the truncated-BPTT gradient, as a flat vector; and the
    outputs of the step loop."""
    params, static = eqx.partition(model, eqx.is_inexact_array)
    flat, unravel = ravel_pytree(params)
    _, befores, ys = step_loss(model, state, x, ids, w, None)
    index = np.cumsum((0,) + LENGTHS[:-1])
    pinned = jax.tree_util.tree_map(lambda c: c[index], befores)

    def loss(vector):
        model = eqx.combine(unravel(vector), static)
        return step_loss(model, state, x, ids, w, pinned)[0]

    shifts = eps * jnp.eye(flat.shape[0], dtype=flat.dtype)
    plus, minus = jax.vmap(loss)(flat + shifts), jax.vmap(loss)(flat - shifts)
    return (plus - minus) / (2 * eps), ys


def _rel(x, y) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-30))


def _flat(grads) -> np.ndarray:
    return np.asarray(ravel_pytree(eqx.filter(grads, eqx.is_inexact_array))[0])


@pytest.mark.parametrize("name", PARAMS)
def test_chunks_are_the_sequence_and_truncate_the_gradient(name):
    with jax.enable_x64(True):
        # Two blocks where the carry is also checked across blocks; one elsewhere (compiles).
        model, state = _model(name, depth=DEPTH if name in FAST else 1)
        x, ids, w, chunks, chunk_ids, chunk_w = _data()
        (value, (ys, carry)), grads = chunked_grad(model, state, chunks, chunk_ids, chunk_w, False)
        (whole_value, whole_y), whole = whole_grad(model, state, x, ids, w)

        # Forward: the chunks' outputs are the whole call's; zero at the pads.
        oracle, step_ys = finite_differences(model, state, x, ids, w)
        got = np.concatenate([np.asarray(ys[k, :n]) for k, n in enumerate(LENGTHS)])
        assert _rel(got, whole_y) < 1e-12
        assert _rel(got, step_ys) < 1e-12
        assert all(np.all(np.asarray(ys[k, n:]) == 0) for k, n in enumerate(LENGTHS))
        assert abs(float(value) - float(whole_value)) < 1e-12 * abs(float(whole_value)) + 1e-12

        # Gradient, truncated at the chunk starts: finite differences of the step loop.
        assert _rel(_flat(grads), np.asarray(oracle)) < 1e-6
        # ... which is not the whole sequence's gradient (the truncation matters here),
        full = _flat(whole)
        assert _rel(_flat(grads), full) > 1e-3
        # ... and with `carry_gradient=True` the chunks give the whole gradient.
        if name in FAST:
            (_, _), flowing = chunked_grad(model, state, chunks, chunk_ids, chunk_w, True)
            assert _rel(_flat(flowing), full) < 1e-10


@eqx.filter_jit
def _inference_chunk_and_call(model, state, x):
    """An inference chunk from `init_carry()` and the inference call (one program)."""
    _, chunked = model.chunk(model.init_carry(), x, state)
    return chunked, model(x, state, inference=True)[0]


def test_training_chunk_draws_the_calls_dropout():
    """A training chunk from `init_carry()` with key `k` is the training call with `k`
    (dropout masks included); another key gives other masks; inference mode none."""
    model, state = _model("complex-sequential", dtype=jnp.float32, dropout=0.4, depth=1)
    x = jnp.asarray(_data()[0])
    key = jax.random.PRNGKey(7)

    @eqx.filter_jit
    def both(model, x, key):
        _, chunked = model.chunk(model.init_carry(), x, state, inference=False, key=key)
        return chunked, model(x, state, key=key, inference=False)[0]

    chunked, called = both(model, x, key)
    np.testing.assert_array_equal(chunked, called)
    other, _ = both(model, x, jax.random.PRNGKey(8))
    assert _rel(other, chunked) > 1e-3
    inference, called = _inference_chunk_and_call(model, state, x)
    assert _rel(inference, called) < 1e-6


def test_training_chunk_refuses_batch_norm():
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, OUT, H, N, DEPTH, encoder="embedding", pooling=None, key=jax.random.PRNGKey(0)
    )
    x = jnp.zeros(CHUNK, jnp.int32)
    with pytest.raises(ValueError, match=r"batch norm.*norm='layer'.*norm=None"):
        model.chunk(model.init_carry(), x, state, inference=False)
    block = cast(eqx_lru.LRUBlock, model.blocks[0])
    with pytest.raises(ValueError, match=r"batch norm.*whole sequences"):
        block.chunk(block.init_carry(), jnp.zeros((CHUNK, H)), state, inference=False)
    _inference_chunk_and_call(model, state, x)  # inference mode: running statistics, fine


def test_block_without_norm_is_the_formula():
    """`LRUBlock(norm=None)`: $y = x + \\mathrm{GLU}(\\mathrm{GELU}(\\mathrm{LRU}(x)))$,
    against a float64 NumPy loop; its fields are those of a normed block with `None`."""
    with jax.enable_x64(True):
        block = eqx_lru.LRUBlock(H, N, norm=None, glu="half", dtype=jnp.float64,
                                 key=jax.random.PRNGKey(3))  # fmt: skip
        block = _perturbed(block, 4)
        x = np.random.default_rng(5).normal(size=(L, H))
        y, _ = block(jnp.asarray(x), eqx.nn.State(block))
        r, _ = lru_loop(lru_params_np(block.core), x)
        h = 0.5 * r * (1 + np.tanh(np.sqrt(2 / np.pi) * (r + 0.044715 * r**3)))  # gelu (tanh)
        w, b = np.asarray(block.glu.linear.weight), np.asarray(block.glu.linear.bias)
        expected = x + h / (1 + np.exp(-(h @ w.T + b)))
        assert _rel(y, expected) < 1e-12
    normed = eqx_lru.LRUBlock(H, N, norm="layer", key=jax.random.PRNGKey(3))
    assert [f for f in normed.__dataclass_fields__] == [f for f in block.__dataclass_fields__]
    with pytest.raises((ValueError, TypeError), match="norm"):  # TypeError: the test hook
        eqx_lru.LRUBlock(H, N, norm="group", key=jax.random.PRNGKey(3))  # pyright: ignore[reportArgumentType]


# --- learning across chunk boundaries -----------------------------------------------------

KEYS, NOISE, SPAN, CHUNKS, BATCH, STREAMS_PER_STEP = 4, 4, 8, 3, 32, 120


def _recall_streams(rng, n):
    """Streams of `CHUNKS` chunks of `SPAN` tokens: the first token is a key (one of
    `KEYS`), every other one noise; the target at every position is the stream's key. In
    chunk 2 the key was seen two chunks earlier: only the carry can bring it."""
    x = rng.integers(KEYS, KEYS + NOISE, (n, CHUNKS * SPAN))
    keys = rng.integers(0, KEYS, n)
    x[:, 0] = keys
    return jnp.asarray(x.reshape(n, CHUNKS, SPAN), jnp.int32), jnp.asarray(keys, jnp.int32)


def _recall_model(seed):
    core = functools.partial(eqx_lru.ComplexLRU, r_min=0.9, r_max=0.999, max_phase=0.1)
    block = functools.partial(eqx_lru.LRUBlock, core=core, norm="layer")
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        KEYS + NOISE, KEYS, 16, 16, 1, encoder="embedding", pooling=None, block=block,
        key=jax.random.PRNGKey(seed),
    )  # fmt: skip
    return model, state


@eqx.filter_jit
def _train_chunk(model, state, opt_state, carry, x, keys, carried, optimizer):
    """One update on one chunk of every stream: the chunk from the carry (`carried`) or
    from `init_carry()` (`reset` every chunk)."""

    def loss(model):
        def one(c, x):
            return model.chunk(c, x, state, reset=not carried, inference=False)

        carry_out, logits = jax.vmap(one)(carry, x)
        labels = jnp.broadcast_to(keys[:, None], x.shape)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return jnp.mean(ce), carry_out

    (value, carry), grads = eqx.filter_value_and_grad(loss, has_aux=True)(model)
    with jax.numpy_dtype_promotion("standard"):  # optax mixes floats and int32 counts
        updates, opt_state = optimizer.update(grads, opt_state)
    return eqx.apply_updates(model, updates), opt_state, carry, value


@eqx.filter_jit
def _accuracy_per_chunk(model, state, x, keys, carried):
    def stream(x):
        def body(c, x_k):
            return model.chunk(c, x_k, state, reset=not carried)

        return jax.lax.scan(body, model.init_carry(), x)[1]

    logits = jax.vmap(stream)(x)  # (streams, chunks, span, keys)
    return jnp.mean(jnp.argmax(logits, -1) == keys[:, None, None], axis=(0, 2))


@pytest.mark.slow
def test_truncated_bptt_learns_memory_across_chunks():
    """Trained by truncated BPTT, one update per chunk with the carry passed on, the model
    recalls in chunk 2 a key seen two chunks earlier; the same model and training with
    the carry reset every chunk stays at chance there (1/4)."""
    results = {}
    for carried in (True, False):
        model, state = _recall_model(0)
        optimizer = optax.adam(3e-3)
        opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
        rng = np.random.default_rng(1)
        start = jax.vmap(lambda _, m=model: m.init_carry())(jnp.arange(BATCH))  # zeros
        for _ in range(STREAMS_PER_STEP):
            x, keys = _recall_streams(rng, BATCH)
            carry = start
            for k in range(CHUNKS):
                model, opt_state, carry, _ = _train_chunk(
                    model, state, opt_state, carry, x[:, k], keys, carried, optimizer
                )
        x, keys = _recall_streams(np.random.default_rng(2), 256)
        results[carried] = np.asarray(_accuracy_per_chunk(model, state, x, keys, carried))
    assert results[True][2] > 0.9, results
    assert results[False][2] < 0.4, results
    assert results[False][0] > 0.9, results  # the reset model learned what it could see

"""Packed sequences (`segment_ids`) through `LRUBlock` and `LRUModel`.

Several sequences packed into one row (a new sequence wherever the id changes, padding
after `length`) give, in training mode, what the same sequences give as separate rows of
a padded batch: the outputs at every valid position, the pooled output of every sequence
(`num_segments=`), the new batch-norm statistics, and the gradients — for both
directions, every scan method (the Pallas kernel in interpret mode included) and random
layouts with sequences of length 1.

Sizes are distinct: VOCAB 7, OUT 4, H 5, N 6, L 13 (row length), depth 2, 2 packed rows.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import METHODS

import eqx_lru

VOCAB, OUT, H, N, L, DEPTH, ROWS = 7, 4, 5, 6, 13, 2, 2
SEQUENCES = 8  # packed into the two rows of every layout
NUM_SEGMENTS = 9  # pooled outputs per packed row (the rows hold at most 6 sequences)
FORMS = {"complex": eqx_lru.ComplexLRU, "real": eqx_lru.RealLRU}


def _layout(seed: int):
    """Random packed rows: per row the lengths of its sequences (some of length 1; 8
    sequences in all, so the separate batch has one shape) and its valid length (the
    second row ends in padding), and segment ids — random integers that change at every
    boundary (an id may come back later: a new sequence all the same)."""
    rng = np.random.default_rng(seed)
    counts = [int(rng.integers(3, 6))]
    counts.append(SEQUENCES - counts[0])
    rows = []
    for r, count in enumerate(counts):
        valid = L - int(rng.integers(1, 3)) if r else L
        while True:
            cuts = sorted(rng.choice(np.arange(1, valid), count - 1, replace=False).tolist())
            lengths = np.diff([0, *cuts, valid]).tolist()
            if 1 in lengths:
                break
        rows.append(lengths)
    ids = np.zeros((ROWS, L), np.int32)
    for r, lengths in enumerate(rows):
        start, previous = 0, -1
        for n in lengths:
            value = int(rng.choice([v for v in range(4) if v != previous]))
            ids[r, start : start + n], start, previous = value, start + n, value
        ids[r, start:] = int(rng.integers(0, 4))  # padding: any id
    return rows, ids


LAYOUTS = [_layout(seed) for seed in (0, 1)]


def _garbage(x: np.ndarray) -> np.ndarray:
    if np.issubdtype(x.dtype, np.integer):
        return np.full_like(x, -17)  # out of vocabulary: must never be embedded
    return np.full_like(x, np.nan)


def _pack(sequences, rows):
    """The `sequences` (in order) packed into rows per `rows`, garbage after the valid
    length; and the same sequences as a padded batch. Returns `(packed, row_lengths,
    separate, lengths)`."""
    shape = sequences[0].shape[1:]
    dtype = sequences[0].dtype
    packed = _garbage(np.zeros((ROWS, L, *shape), dtype))
    separate = _garbage(np.zeros((len(sequences), L, *shape), dtype))
    i = 0
    for r, lengths in enumerate(rows):
        start = 0
        for n in lengths:
            packed[r, start : start + n] = sequences[i]
            separate[i, :n] = sequences[i]
            start, i = start + n, i + 1
    row_lengths = np.array([sum(lengths) for lengths in rows], np.int32)
    lengths = np.array([n for row in rows for n in row], np.int32)
    return packed, row_lengths, separate, lengths


def _unpack(packed_out, rows):
    """Per-position outputs of the packed rows, as a list of per-sequence arrays."""
    out = []
    for r, lengths in enumerate(rows):
        start = 0
        for n in lengths:
            out.append(np.asarray(packed_out[r, start : start + n]))
            start += n
    return out


def _sequences(rows, *, tokens: bool, seed: int):
    rng = np.random.default_rng(seed)
    lengths = [n for row in rows for n in row]
    if tokens:
        return [rng.integers(0, VOCAB, size=n).astype(np.int32) for n in lengths]
    return [rng.normal(size=(n, H)).astype(np.float32) for n in lengths]


def _rel(x, y) -> float:
    x, y = np.asarray(x), np.asarray(y)
    return float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-30))


def _tree_rel(x, y) -> float:
    xs = jax.tree_util.tree_leaves(eqx.filter(x, eqx.is_inexact_array))
    ys = jax.tree_util.tree_leaves(eqx.filter(y, eqx.is_inexact_array))
    return max(_rel(a, b) for a, b in zip(xs, ys, strict=True))


def _perturbed(tree, seed):
    """Floating parameters moved off their init (in NumPy: nothing to compile)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    rng = np.random.default_rng(seed)

    def move(x):
        if not (eqx.is_inexact_array(x) and jnp.issubdtype(x.dtype, jnp.floating)):
            return x
        x_np = np.asarray(x, np.float64)
        return jnp.asarray(x_np * (1 + 0.1 * rng.normal(size=x.shape)), x.dtype)

    return jax.tree_util.tree_unflatten(treedef, [move(x) for x in leaves])


# --- blocks: packed == separate, training mode, outputs, statistics, gradients --------------


@eqx.filter_jit
def block_train(block, state, x, length, segment_ids):
    """Training-mode outputs, new state and parameter gradients of `sum(sin(y))` over a
    batch (`segment_ids` `None` or one row of ids per example)."""

    def loss(block):
        def one(x, n, ids):
            return block(x, state, length=n, segment_ids=ids)

        y, new_state = jax.vmap(one, axis_name="batch", out_axes=(0, None))(x, length, segment_ids)
        return jnp.sum(jnp.sin(y)), (y, new_state)

    (_, (y, new_state)), grads = eqx.filter_value_and_grad(loss, has_aux=True)(block)
    return y, new_state, grads


BLOCK_CASES = [(form, method, True) for form in FORMS for method in METHODS] + [
    ("real", "associative", False)
]
FAST_BLOCK_CASE = ("real", "sequential", True)  # the others are marked slow


@pytest.mark.parametrize(
    "form,method,bidirectional",
    [pytest.param(*case, marks=() if case == FAST_BLOCK_CASE else pytest.mark.slow)
     for case in BLOCK_CASES],
)  # fmt: skip
def test_block_packed_equals_separate(form, method, bidirectional):
    core = functools.partial(FORMS[form], r_min=0.6, r_max=0.97, method=METHODS[method].method)
    block, state = eqx.nn.make_with_state(eqx_lru.LRUBlock)(
        H, N, core=core, bidirectional=bidirectional, key=jax.random.PRNGKey(0)
    )
    block = _perturbed(block, 1)
    for seed, (rows, ids) in enumerate(LAYOUTS):
        sequences = _sequences(rows, tokens=False, seed=seed + 2)
        packed, row_lengths, separate, lengths = _pack(sequences, rows)
        y_packed, state_packed, g_packed = block_train(
            block, state, jnp.asarray(packed), jnp.asarray(row_lengths), jnp.asarray(ids)
        )
        y_separate, state_separate, g_separate = block_train(
            block, state, jnp.asarray(separate), jnp.asarray(lengths), None
        )
        y_separate = [np.asarray(y[:n]) for y, n in zip(y_separate, lengths, strict=True)]
        for a, b in zip(_unpack(y_packed, rows), y_separate, strict=True):
            assert _rel(a, b) < 1e-5
        # Batch-norm statistics of the packed rows = those of the separate sequences.
        index = block.norm.state_index
        assert _tree_rel(state_packed.get(index), state_separate.get(index)) < 1e-6
        assert int(state_packed.get(index)[0]) == 1
        assert _tree_rel(g_packed, g_separate) < 1e-4


# --- models: per-position and pooled outputs, gradients ---------------------------------------


def _model(pooling, *, encoder, remat=False, bidirectional=True, form="real"):
    core = functools.partial(FORMS[form], r_min=0.6, r_max=0.97)
    block = functools.partial(eqx_lru.LRUBlock, core=core, bidirectional=bidirectional)
    in_size = VOCAB if encoder == "embedding" else H
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        in_size,
        OUT,
        H,
        N,
        DEPTH,
        encoder=encoder,
        pooling=pooling,
        block=block,
        remat=remat,
        key=jax.random.PRNGKey(3),
    )
    return _perturbed(model, 4), state


@eqx.filter_jit
def model_train(model, state, x, length, segment_ids, num_segments=None):
    def loss(model):
        def one(x, n, ids):
            return model(x, state, length=n, segment_ids=ids, num_segments=num_segments)

        out, new_state = jax.vmap(one, axis_name="batch", out_axes=(0, None))(
            x, length, segment_ids
        )
        return jnp.sum(jnp.sin(out)), (out, new_state)

    (_, (out, new_state)), grads = eqx.filter_value_and_grad(loss, has_aux=True)(model)
    return out, new_state, grads


MODEL_CASES = {
    "per-position": dict(pooling=None, encoder="embedding"),
    "mean-remat": dict(pooling="mean", encoder="linear", remat=True),
    "last-unidirectional": dict(pooling="last", encoder="embedding", bidirectional=False),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_model_packed_equals_separate(case):
    options = MODEL_CASES[case]
    model, state = _model(**options)
    pooling, tokens = options["pooling"], options["encoder"] == "embedding"
    rows, ids = LAYOUTS[0]
    sequences = _sequences(rows, tokens=tokens, seed=5)
    packed, row_lengths, separate, lengths = _pack(sequences, rows)
    num_segments = None if pooling is None else NUM_SEGMENTS
    out_packed, state_packed, g_packed = model_train(
        model,
        state,
        jnp.asarray(packed),
        jnp.asarray(row_lengths),
        jnp.asarray(ids),
        num_segments,
    )
    out_separate, state_separate, g_separate = model_train(
        model, state, jnp.asarray(separate), jnp.asarray(lengths), None
    )
    if pooling is None:
        separate_outs = [np.asarray(o[:n]) for o, n in zip(out_separate, lengths, strict=True)]
        for a, b in zip(_unpack(out_packed, rows), separate_outs, strict=True):
            assert _rel(a, b) < 1e-5
    else:
        assert out_packed.shape == (ROWS, NUM_SEGMENTS, OUT)
        i = 0
        for r, row in enumerate(rows):
            for k in range(len(row)):
                assert _rel(out_packed[r, k], out_separate[i]) < 1e-5
                i += 1
            assert np.all(np.asarray(out_packed[r, len(row) :]) == 0)  # no sequence there
    assert _tree_rel(state_packed, state_separate) < 1e-6
    assert _tree_rel(g_packed, g_separate) < 1e-4

    if pooling is not None:  # more sequences than `num_segments`: an error, not a drop
        every_position = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (ROWS, L))
        with pytest.raises(Exception, match="num_segments"):
            model_train(
                model,
                state,
                jnp.asarray(packed),
                jnp.asarray(row_lengths),
                every_position,
                NUM_SEGMENTS,
            )


# --- errors ------------------------------------------------------------------------------------


def test_segment_argument_errors():
    model, state = _model("mean", encoder="embedding", bidirectional=False)
    x, ids = jnp.zeros(L, jnp.int32), jnp.zeros(L, jnp.int32)
    with pytest.raises(ValueError, match="num_segments"):
        model(x, state, segment_ids=ids, inference=True)
    with pytest.raises(ValueError, match="num_segments"):
        model(x, state, num_segments=3, inference=True)
    with pytest.raises((ValueError, TypeError), match="segment_ids"):
        model(x, state, segment_ids=jnp.zeros(L - 1, jnp.int32), num_segments=2)
    with pytest.raises((ValueError, TypeError), match="segment_ids"):
        model(x, state, segment_ids=jnp.zeros(L), num_segments=2)
    with pytest.raises((ValueError, TypeError), match="num_segments"):
        model(x, state, segment_ids=ids, num_segments=0)
    per_step, state = _model(None, encoder="embedding", bidirectional=False)
    with pytest.raises(ValueError, match="num_segments"):
        per_step(x, state, segment_ids=ids, num_segments=2)

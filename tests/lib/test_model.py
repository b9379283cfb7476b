"""`LRUModel` and `LRURetrievalModel`: shapes, complex = real, conversion, padding invariance
(garbage in the pads, both directions, all poolings, tokens and features, training and
inference mode), batch-norm modes and dropout."""

import functools
from typing import Any, Literal, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import max_rel_err

import eqx_lru

IN, OUT, H, N, DEPTH = 3, 2, 6, 5, 2  # distinct sizes
VOCAB = 7


FORMS = {"complex": eqx_lru.ComplexLRU, "real": eqx_lru.RealLRU}
MODEL_OPTIONS = ("pooling", "remat", "check_tokens", "dtype")


def _model(
    encoder: Literal["embedding", "linear"] = "linear",
    *,
    key=0,
    depth=DEPTH,
    out_size: int | None = OUT,
    form="complex",
    **kw,
):
    """A model; keywords other than the model's own go to every `LRUBlock`."""
    in_size = VOCAB if encoder == "embedding" else IN
    model_kw = {k: kw.pop(k) for k in MODEL_OPTIONS if k in kw}
    core = functools.partial(FORMS[form], r_min=0.5, r_max=0.99)
    block = functools.partial(eqx_lru.LRUBlock, core=core, **kw)
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        in_size,
        out_size,
        H,
        N,
        depth,
        encoder=encoder,
        block=block,
        key=jax.random.PRNGKey(key),
        **model_kw,
    )


# The configuration most tests share, so their compiled functions are shared too.
MAIN: dict[str, Any] = dict(encoder="embedding", bidirectional=True, pooling="mean", depth=1)


def _stats(block: eqx_lru.AbstractBlock) -> eqx.nn.StateIndex:
    """The index of the running statistics of these models' blocks (batch-norm `LRUBlock`s)."""
    return cast(eqx_lru.MaskedBatchNorm, cast(eqx_lru.LRUBlock, block).norm).state_index


def _random_running_stats(model, state, seed=0):
    """Non-trivial running batch-norm statistics, so inference mode is not the identity."""
    rng = np.random.default_rng(seed)
    for block in model.blocks:
        index = block.norm.state_index
        steps, mean, var = state.get(index)
        state = state.set(
            index,
            (
                steps + 3,
                jnp.asarray(rng.normal(size=mean.shape), mean.dtype),
                jnp.asarray(rng.uniform(0.5, 2, size=var.shape), var.dtype),
            ),
        )
    return state


def _vmapped(model, state, x, length, keys, inference):
    def one(x, length, key):
        return model(x, state, length=length, key=key, inference=inference)

    return jax.vmap(one, axis_name="batch", out_axes=(0, None))(x, length, keys)


@eqx.filter_jit
def infer(model, state, x, length=None):
    return _vmapped(model, state, x, length, None, True)[0]


@eqx.filter_jit
def train_grad(model, state, x, length=None, keys=None):
    """Training-mode outputs, new state and the gradient of a loss on valid outputs."""

    def loss(model):
        out, new_state = _vmapped(model, state, x, length, keys, False)
        return jnp.sum(jnp.sin(out)), (out, new_state)

    (_, (out, new_state)), grads = eqx.filter_value_and_grad(loss, has_aux=True)(model)
    return out, new_state, grads


def _inputs(encoder, batch, length, seed=1):
    key = jax.random.PRNGKey(seed)
    if encoder == "embedding":
        return jax.random.randint(key, (batch, length), 0, VOCAB)
    return jax.random.normal(key, (batch, length, IN))


def _pad(x, lengths, padded_length, seed):
    """Pad to `padded_length` and overwrite every position >= length with garbage: nan,
    ±1e30 for features; out-of-vocabulary (even negative) ids for tokens."""
    extra = padded_length - x.shape[1]
    x = jnp.concatenate([x, jnp.zeros((x.shape[0], extra) + x.shape[2:], x.dtype)], axis=1)
    shape = x.shape
    key = jax.random.PRNGKey(seed)
    if jnp.issubdtype(x.dtype, jnp.integer):
        garbage = jax.random.randint(key, shape, -1000, 1000)
    else:
        choice = jax.random.randint(key, shape, 0, 3)
        garbage = jnp.select([choice == 0, choice == 1], [jnp.nan, 1e30], -1e30).astype(x.dtype)
    valid = jnp.arange(padded_length)[None, :] < lengths[:, None]
    valid = valid.reshape(valid.shape + (1,) * (x.ndim - 2))
    return jnp.where(valid, x, garbage)


# --- shapes, forms, conversion -------------------------------------------------------------


def test_complex_and_real_models_agree():
    (cm, state), (rm, _) = (_model(form=f, **MAIN) for f in ("complex", "real"))
    assert isinstance(cast(eqx_lru.LRUBlock, rm.blocks[0]).reverse_core, eqx_lru.RealLRU)
    # Same key => the very same parameters; conversion is exact both ways.
    assert bool(eqx.tree_equal(eqx_lru.to_real(cm), rm))
    assert bool(eqx.tree_equal(eqx_lru.to_complex(rm), cm))
    x, length = _inputs("embedding", 3, 11), jnp.array([11, 5, 2])
    (oc, sc, gc), (or_, sr, gr) = (train_grad(m, state, x, length) for m in (cm, rm))
    assert oc.shape == (3, OUT)
    assert max_rel_err(or_, oc) < 1e-5
    assert bool(eqx.tree_equal(sr, sc, rtol=1e-5, atol=1e-6))
    gc, gr = jax.tree_util.tree_leaves(gc), jax.tree_util.tree_leaves(eqx_lru.to_complex(gr))
    assert len(gc) == len(gr)
    for a, b in zip(gr, gc, strict=True):
        assert max_rel_err(a, b) < 1e-4


# --- padding -------------------------------------------------------------------------------


# Depth 2 where a reverse scan could carry one block's pads into the next.
PAD_CONFIGS = [
    ("linear", False, "last", 1),
    ("linear", True, None, 2),
    ("embedding", False, "mean", 1),
    ("embedding", True, "last", 2),
]


@pytest.mark.parametrize("encoder,bidirectional,pooling,depth", PAD_CONFIGS)
def test_padding_invariance_inference(encoder, bidirectional, pooling, depth):
    out_size = None if pooling is None else OUT  # per-step: the last block's features
    model, state = _model(
        encoder, bidirectional=bidirectional, pooling=pooling, depth=depth, out_size=out_size
    )
    state = _random_running_stats(model, state)
    lengths = jnp.array([4, 9])  # padded by 8 and 3 positions
    x = _inputs(encoder, 2, 9)
    x_padded = _pad(x, lengths, 12, seed=2)
    padded = infer(model, state, x_padded, lengths)
    if pooling is None:  # `features` is the per-step output of a model without a head
        h, _ = eqx.filter_jit(lambda m, s, x, n: m.features(x, s, length=n, inference=True))(
            model, state, x_padded[0], lengths[0]
        )
        np.testing.assert_allclose(h, padded[0], rtol=1e-5, atol=1e-6)
    for b, n in enumerate(lengths.tolist()):
        ref = infer(model, state, x[b : b + 1, :n])[0]  # the unpadded sequence
        if pooling is None:
            assert padded.shape == (2, 12, H)
            np.testing.assert_allclose(padded[b, :n], ref, rtol=1e-5, atol=1e-6)
            assert bool(jnp.all(padded[b, n:] == 0))  # zero at pads
        else:
            assert padded.shape == (2, OUT)
            np.testing.assert_allclose(padded[b], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_padding_invariance_training():
    """Training mode: batch-norm statistics, running-stat updates and gradients ignore pads."""
    model, state = _model(**MAIN)
    x = _inputs("embedding", 3, 7)
    # Equal lengths: the padded batch behaves exactly like the unpadded one.
    out, new_state, grads = train_grad(model, state, x)
    lengths = jnp.array([7, 7, 7])
    out_p, state_p, grads_p = train_grad(model, state, _pad(x, lengths, 11, seed=3), lengths)
    np.testing.assert_allclose(out_p, out, rtol=1e-5, atol=1e-6)
    assert bool(eqx.tree_equal(state_p, new_state, rtol=1e-5, atol=1e-6))
    assert bool(eqx.tree_equal(grads_p, grads, rtol=1e-4, atol=1e-6))
    for block in model.blocks:  # training updated every running statistic
        assert int(new_state.get(_stats(block))[0]) == 1
    # Unequal lengths: two different paddings (amount and garbage) agree.
    lengths = jnp.array([2, 7, 5])
    x = _inputs("embedding", 3, 11)[:, :7]
    a = train_grad(model, state, _pad(x, lengths, 11, seed=4), lengths)
    b = train_grad(model, state, _pad(x, lengths, 14, seed=5), lengths)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
    assert bool(eqx.tree_equal(a[1], b[1], rtol=1e-5, atol=1e-6))
    assert bool(eqx.tree_equal(a[2], b[2], rtol=1e-4, atol=1e-6))
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(a[2]))


# --- modes ---------------------------------------------------------------------------------


def test_batch_norm_modes_and_dropout():
    model, state = _model(dropout=0.5, depth=1)
    no_drop, _ = _model(dropout=0.0, depth=1)
    x = _inputs("linear", 3, 9)
    run = eqx.filter_jit(_vmapped)
    keys_a, keys_b = jax.random.split(jax.random.PRNGKey(9), (2, 3))
    out_a, new_state = run(model, state, x, None, keys_a, False)
    out_b, _ = run(model, state, x, None, keys_b, False)
    assert not np.allclose(out_a, out_b)  # dropout is on in training, one key per example
    for block in model.blocks:  # training updated every running statistic
        assert int(new_state.get(_stats(block))[0]) == 1
    # Inference: running statistics, state unchanged, no dropout (equal to the rate-0 model).
    out_inf, same_state = run(model, new_state, x, None, None, True)
    assert bool(eqx.tree_equal(same_state, new_state))
    np.testing.assert_array_equal(out_inf, run(no_drop, new_state, x, None, None, True)[0])


def test_input_errors():
    model, state = _model("embedding", pooling="mean")
    with pytest.raises((ValueError, TypeError), match="integer|x"):
        model(jnp.ones((9, IN)), state, inference=True)
    with pytest.raises((ValueError, TypeError), match="integer|length"):
        model(jnp.ones(9, jnp.int32), state, length=jnp.array(3.0), inference=True)
    features, state = _model("linear")
    with pytest.raises(ValueError, match="shape"):
        features(jnp.ones((9, IN + 1)), state, inference=True)
    with pytest.raises((ValueError, TypeError), match="pooling"):
        eqx_lru.LRUModel(IN, OUT, H, N, 1, pooling="max", key=jax.random.PRNGKey(0))  # pyright: ignore[reportArgumentType]
    with pytest.raises((ValueError, TypeError), match="encoder"):
        eqx_lru.LRUModel(IN, OUT, H, N, 1, encoder="conv", key=jax.random.PRNGKey(0))  # pyright: ignore[reportArgumentType]


# --- retrieval -----------------------------------------------------------------------------


def _retrieval():
    core = functools.partial(eqx_lru.ComplexLRU, r_min=0.5)
    block = functools.partial(eqx_lru.LRUBlock, core=core)
    key_enc, key = jax.random.split(jax.random.PRNGKey(3))
    encoder = eqx_lru.LRUModel(VOCAB, None, H, N, 1, encoder="embedding", block=block, key=key_enc)
    return eqx.nn.make_with_state(eqx_lru.LRURetrievalModel)(encoder, OUT, mlp_size=4, key=key)


@pytest.mark.slow
def test_retrieval_model():
    model, state = _retrieval()
    docs = _inputs("embedding", 3, 2 * 9).reshape(3, 2, 9)
    lengths = jnp.array([[9, 4], [2, 9], [5, 5]])
    logits, new_state = eqx.filter_jit(_vmapped)(model, state, docs, lengths, None, False)
    assert logits.shape == (3, OUT)
    # Batch norm saw both documents of every pair: the same as encoding the 2B documents as
    # one batch (S5 concatenates them along the batch axis).
    enc = model.encoder

    @eqx.filter_jit
    def encode_all(enc, state, docs, lengths):
        def one(doc, n):
            return enc(doc, state, length=n, inference=False)

        inner = jax.vmap(one, axis_name="eqx_lru_pair", out_axes=(0, None))
        return jax.vmap(inner, axis_name="batch", out_axes=(0, None))(docs, lengths)

    # Garbage in the pads of the pairs changes nothing either.
    garbage = _pad(docs.reshape(6, 9), lengths.reshape(6), 9, seed=7)
    flat_docs, flat_len = garbage.reshape(6, 1, 9), lengths.reshape(6, 1)
    pooled, enc_state = encode_all(enc, state, flat_docs, flat_len)
    assert bool(eqx.tree_equal(enc_state, new_state, rtol=1e-5, atol=1e-6))
    u, v = pooled.reshape(3, 2, H)[:, 0], pooled.reshape(3, 2, H)[:, 1]
    feats = jnp.concatenate([u, v, u - v, u * v], axis=-1)
    expected = jax.vmap(lambda f: model.mlp_out(jax.nn.gelu(model.mlp_in(f))))(feats)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-6)
    # Inference mode, pads with garbage: the same logits as without padding.


# --- remat ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [False, True])
def test_remat_same_values_and_gradients(bidirectional):
    """Training mode with padding, batch norm and dropout: the scanned,
    rematerialised blocks give the unrolled model's outputs, running statistics and
    gradients (bidirectional: with the directions' backward passes one after the other)."""
    kw: dict[str, Any] = dict(encoder="embedding", norm="batch", dropout=0.25, depth=2)
    kw.update(bidirectional=bidirectional)
    (plain, state), (remat, _) = (_model(**kw, remat=r) for r in (False, True))
    x, length = _inputs("embedding", 3, 8), jnp.array([8, 5, 2])
    keys = jax.random.split(jax.random.PRNGKey(4), 3)
    a, b = train_grad(plain, state, x, length, keys), train_grad(remat, state, x, length, keys)
    np.testing.assert_allclose(b[0], a[0], rtol=1e-5, atol=1e-6)
    assert bool(eqx.tree_equal(b[1], a[1], rtol=1e-5, atol=1e-6))
    for index in (_stats(blk) for blk in plain.blocks):  # each block its own stats
        assert int(b[1].get(index)[0]) == 1
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a[2]), jax.tree_util.tree_leaves(b[2])
    assert len(leaves_a) == len(leaves_b)
    for ga, gb in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_allclose(gb, ga, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("remat", [False, True])
def test_inference_hands_back_the_state_it_was_given(remat):
    """Inference mode leaves the state as it is and returns that same object, so an eager
    caller can call again with it (the scan over rematerialised blocks once retired it)."""
    model, state = _model(encoder="embedding", depth=2, remat=remat)
    state = _random_running_stats(model, state)
    x = _inputs("embedding", 1, 8)[0]
    (y1, s1), (y2, s2) = (model(x, state, inference=True) for _ in range(2))
    assert s1 is state and s2 is state
    np.testing.assert_array_equal(y1, y2)


def test_remat_lowers_compiled_memory():
    """Compile only (nothing allocated): the training gradient of a depth-4 model needs
    far less XLA scratch memory with `remat=True` (1.27 → 0.49 MB here; 184 → 53 MB at
    depth 6, H = N = 64, L 1024, batch 8, bidirectional)."""

    def temp_bytes(remat):
        model, state = _model(depth=4, remat=remat)
        params, static = eqx.partition(model, eqx.is_array)

        def loss(params, x):
            out, _ = _vmapped(eqx.combine(params, static), state, x, None, None, False)
            return jnp.sum(out)

        x = jax.ShapeDtypeStruct((4, 256, IN), jnp.float32)
        compiled = jax.jit(jax.grad(loss)).lower(params, x).compile()
        analysis = compiled.memory_analysis()
        assert analysis is not None  # the CPU and GPU backends report one
        return analysis.temp_size_in_bytes

    plain, remat = temp_bytes(False), temp_bytes(True)
    assert remat < 0.6 * plain, (plain, remat)


def test_remat_of_blocks_that_differ_falls_back_to_checkpoints():
    """Blocks that differ in more than their arrays (here the dropout rate) cannot share a
    scan body: one checkpoint per block, the same values."""
    model, state = _model(norm="layer", depth=2)
    model = eqx.tree_at(lambda m: m.blocks[1].dropout, model, eqx.nn.Dropout(0.5))
    remat = eqx.tree_at(
        lambda m: m.blocks, _model(norm="layer", depth=2, remat=True)[0], model.blocks
    )
    x = _inputs("linear", 2, 5)
    a, b = infer(model, state, x), infer(remat, state, x)
    np.testing.assert_array_equal(a, b)  # (gradients through checkpoints: test_block.py)

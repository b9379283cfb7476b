"""Bad input to the library's layers, blocks and models (issue 12, items 5, 7, 10, 11): each
case gets a clear error naming the argument, or is accepted as a careful user would expect.

Sizes are distinct (d_model=4, d_state=3, length=6). The user-level checks (no jaxtyping
hook, as users run the library) are in one subprocess at the end.
"""

import subprocess
import sys
import textwrap
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru

H, N, L, VOCAB = 4, 3, 6, 5
KEY = jax.random.PRNGKey(0)
FORMS = (eqx_lru.ComplexLRU, eqx_lru.RealLRU)


def _model(**kw):
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, 2, H, N, 1, encoder="embedding", key=KEY, **kw
    )


@eqx.filter_jit
def infer(model, state, x, length=None):
    """One example in inference mode, jitted (shared by the tests below)."""
    return model(x, state, length=length, inference=True)[0]


# --- token ids (item 5) --------------------------------------------------------------------


@pytest.mark.parametrize("bad", [99, -1, VOCAB])
def test_token_ids_out_of_range_raise(bad):
    model, state = _model()
    tokens = jnp.array([0, 1, bad, 2, 4, 3])
    # Eagerly: a ValueError naming the vocabulary size and the bad id.
    with pytest.raises(ValueError, match=rf"\[0, {VOCAB}\).*id {bad}\b"):
        model(tokens, state, inference=True)
    # Under jit and vmap: eqx.error_if, naming the vocabulary size.
    run = eqx.filter_jit(lambda m, x: jax.vmap(lambda x: m(x, state, inference=True)[0])(x))
    with pytest.raises(Exception, match=rf"Token ids must be in \[0, {VOCAB}\)"):
        jax.block_until_ready(run(model, jnp.stack([tokens, tokens])))
    good = jnp.array([[0, 1, 4, 2, 4, 3]] * 2)
    assert run(model, good).shape == (2, 2)


def test_token_ids_checked_at_valid_positions_only_and_switchable():
    model, state = _model()
    tokens = jnp.array([0, 1, 2, 99, -7, 1000])  # garbage in the pads is fine
    out = infer(model, state, tokens, jnp.array(3))
    np.testing.assert_array_equal(out, infer(model, state, tokens.at[3:].set(0), jnp.array(3)))
    unchecked, state = _model(check_tokens=False)
    infer(unchecked, state, tokens)  # clamped by JAX, as asked


# --- RealLRU state layout (item 7) ---------------------------------------------------------


def test_real_state_layout_is_checked_and_documented():
    layer = eqx_lru.RealLRU(H, N, key=KEY)
    u = jnp.ones((L, H))
    transposed = jnp.zeros((2, N))
    for call in (
        lambda: layer(u, initial_state=transposed),
        lambda: layer.step(transposed, u[0]),
        lambda: layer.hidden_states(u, initial_state=transposed),
    ):
        with pytest.raises(ValueError, match=r"\(d_state, 2\).*transposed.*state\.T"):
            call()
    # With d_state = 2 the two layouts share a shape: documented, loudly.
    for doc in (eqx_lru.RealLRU.__doc__, eqx_lru.AbstractLRU.__call__.__doc__):
        assert doc is not None and "(d_state, 2)" in doc and "(2, d_state)" in doc


# --- length-0 sequences (item 10) ----------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("method", ["sequential", "associative", "auto"])
def test_empty_sequence_one_error_for_every_method(form, method):
    layer = form(H, N, method=method, key=KEY)
    empty = jnp.zeros((0, H))
    for call in (
        lambda: layer(empty),
        lambda: layer(empty, reverse=True),
        lambda: layer.hidden_states(empty),
        lambda: jax.grad(lambda u: jnp.sum(layer(u)))(empty),
    ):
        with pytest.raises(ValueError, match="`u` has length 0"):
            call()


def test_empty_sequence_blocks_and_models():
    block, state = eqx.nn.make_with_state(eqx_lru.LRUBlock)(H, N, norm="layer", key=KEY)
    with pytest.raises(ValueError, match="`x` has length 0"):
        block(jnp.zeros((0, H)), state)
    model, state = _model()
    with pytest.raises(ValueError, match="`x` has length 0"):
        model(jnp.zeros((0,), jnp.int32), state, inference=True)


# --- NumPy arrays, NumPy sizes, lengths of any integer dtype (item 11) ---------------------


def test_numpy_arrays_are_accepted():
    u = np.random.default_rng(0).normal(size=(L, H)).astype(np.float32)
    layer = eqx_lru.RealLRU(H, N, key=KEY)
    np.testing.assert_array_equal(layer(u), layer(jnp.asarray(u)))
    state, y = layer.step(np.asarray(layer.init_state()), u[0])
    assert y.shape == (H,) and isinstance(state, jax.Array)
    block, bstate = eqx.nn.make_with_state(eqx_lru.LRUBlock)(H, N, norm="layer", key=KEY)
    np.testing.assert_array_equal(block(u, bstate)[0], block(jnp.asarray(u), bstate)[0])
    model, mstate = _model()
    tokens = np.array([0, 1, 4, 2, 0, 3], np.int32)
    out = infer(model, mstate, tokens, np.int32(3))
    ref = infer(model, mstate, jnp.asarray(tokens), jnp.array(3))
    np.testing.assert_array_equal(out, ref)


def test_numpy_integer_sizes_are_accepted():
    size = np.int64(H)
    assert eqx_lru.ComplexLRU(size, np.int32(N), key=KEY).d_model == H
    block = eqx_lru.LRUBlock(size, np.int64(N), norm="layer", key=KEY)
    assert cast(eqx_lru.ComplexLRU, block.core).d_state == N
    model = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        np.int64(VOCAB), np.int64(2), size, np.int64(N), np.int64(1), key=KEY
    )[0]
    assert type(cast(eqx.nn.Linear, model.encoder).in_features) is int
    assert eqx_lru.GLU(size, key=KEY).linear.in_features == H
    with pytest.raises((ValueError, TypeError), match="d_model"):
        eqx_lru.ComplexLRU(np.float64(4.0), N, key=KEY)  # pyright: ignore[reportArgumentType]
    with pytest.raises((ValueError, TypeError), match="d_state"):
        eqx_lru.ComplexLRU(H, np.int64(0), key=KEY)


@pytest.mark.parametrize("dtype", [jnp.uint8, jnp.int8, jnp.uint32, jnp.int64])
def test_length_of_any_integer_dtype(dtype):
    block, state = eqx.nn.make_with_state(eqx_lru.LRUBlock)(H, N, norm="layer", key=KEY)
    x = jax.random.normal(KEY, (L, H))
    with jax.enable_x64(dtype == jnp.int64):
        length = jnp.asarray(4, dtype)
        y, _ = block(x, state, length=length)
        ref, _ = block(x, state, length=jnp.asarray(4, jnp.int32))
    np.testing.assert_array_equal(y, ref)
    with pytest.raises((ValueError, TypeError), match="length"):
        block(x, state, length=jnp.asarray(4.0))


def test_user_level_errors_without_the_test_hook():
    """As a user runs the library (no jaxtyping import hook, which would name `key`
    itself): `key=0` gets our error naming `key`; NumPy sizes work."""
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, numpy as np, equinox as eqx, eqx_lru
        for build in (lambda: eqx_lru.ComplexLRU(4, 3, key=0),
                      lambda: eqx_lru.LRUBlock(4, 3, key=0),
                      lambda: eqx_lru.LRUModel(5, 2, 4, 3, 1, key=0),
                      lambda: eqx_lru.GLU(4, key=0)):
            try:
                build()
            except TypeError as e:
                assert "`key` must be a JAX PRNG key" in str(e), e
            else:
                raise AssertionError("key=0 accepted")
        layer = eqx_lru.RealLRU(np.int64(4), np.int64(3), key=jax.random.PRNGKey(0))
        assert layer.d_model == 4
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_model_construction_errors():
    with pytest.raises(TypeError, match="block"):  # the hook in tests, ours for users
        eqx_lru.LRUModel(VOCAB, 2, H, N, 1, block="lru", key=KEY)  # pyright: ignore[reportArgumentType]
    with_head = eqx_lru.LRUModel(VOCAB, 2, H, N, 1, encoder="embedding", key=KEY)
    with pytest.raises(ValueError, match="out_size=None"):
        eqx_lru.LRURetrievalModel(with_head, 2, key=KEY)
    per_step = eqx_lru.LRUModel(VOCAB, None, H, N, 1, pooling=None, key=KEY)
    with pytest.raises(ValueError, match="pooling"):
        eqx_lru.LRURetrievalModel(per_step, 2, key=KEY)
    with pytest.raises((ValueError, TypeError), match="core"):
        eqx_lru.LRUBlock(H, N, core=3, key=KEY)  # pyright: ignore[reportArgumentType]

"""One-line errors where users compose blocks and models (issue 26 item 5, issue 27 item 6):
a batch given to a one-example call, an input width other than the block's `d_model`, a
dtype that is not real floats, and a malformed carry given to `step`/`chunk` each get one
line naming the argument and the fix, raised before the type checker and before JAX.

Sizes are distinct: IN 5, VOCAB 7, OUT 3, H 4, N 3, L 6, depth 2.
"""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import eqx_lru

IN, VOCAB, OUT, H, N, L, DEPTH = 5, 7, 3, 4, 3, 6, 2
KEY = jax.random.PRNGKey(0)


def _one_line(call, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        call()
    assert "\n" not in str(info.value), str(info.value)


@pytest.fixture(scope="module")
def block():
    return eqx.nn.make_with_state(eqx_lru.LRUBlock)(H, N, norm="layer", key=KEY)


@pytest.fixture(scope="module")
def model():
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(IN, OUT, H, N, DEPTH, key=KEY)


BATCHED = r"has shape \(2, 6, 4\), but LRUBlock takes one sequence .*`jax\.vmap`"
WIDTH = r"has 5 features \(shape \(6, 5\)\), but LRUBlock's d_model is 4"
BLOCK_INPUTS = {  # method: [(input, what the error says)]
    "call": [
        (jnp.ones((2, L, H)), "`x` " + BATCHED),
        (jnp.ones((L, H + 1)), "`x` " + WIDTH),
        (jnp.ones((L, H), jnp.int32), r"`x` must hold real floats .*int32.*embedding"),
        (jnp.ones((L, H), jnp.complex64), r"`x` must hold real floats .*complex64"),
    ],
    "chunk": [(jnp.ones((2, L, H)), "`x` " + BATCHED), (jnp.ones((L, H + 1)), "`x` " + WIDTH)],
    "step": [
        (jnp.ones((2, H)), r"`x_t` has shape \(2, 4\), but LRUBlock takes one position"),
        (jnp.ones(H + 1), r"`x_t` has 5 features \(shape \(5,\)\), but .* d_model is 4"),
        (jnp.ones(H, jnp.int32), r"`x_t` must hold real floats .*int32"),
    ],
}


@pytest.mark.parametrize("method", BLOCK_INPUTS)
def test_block_input_errors(block, method):
    block, state = block
    call = {
        "call": lambda x: block(x, state),
        "chunk": lambda x: block.chunk(block.init_carry(), x, state),
        "step": lambda x: block.step(block.init_carry(), x, state),
    }[method]
    for x, pattern in BLOCK_INPUTS[method]:
        _one_line(lambda x=x: call(x), pattern)


def test_block_carry_errors(block):
    block, state = block
    x = jnp.ones((L, H))
    carry = block.init_carry()  # complex64, (N,)
    for bad, pattern in (
        (None, r"`carry` is None: pass `LRUBlock\.init_carry\(\)`"),
        (jnp.zeros(N + 1, carry.dtype), r"`carry` is an array of shape \(4,\).*shape \(3,\)"),
        (jnp.zeros(N, jnp.float32), r"`carry` is an array .* float32.*complex64"),
        ((carry,), r"`carry` is a tuple of 1 entries.*an array of shape \(3,\)"),
    ):
        _one_line(lambda bad=bad: block.step(bad, x[0], state), pattern)
        _one_line(lambda bad=bad: block.chunk(bad, x, state), pattern)


def test_model_input_errors(model):
    model, state = model
    _one_line(
        lambda: model(jnp.ones((2, L, IN)), state),
        r"`x` must be a float array of shape \(length, 5\); got float32 of shape \(2, 6, 5\)\. "
        r"Batch with `jax\.vmap`",
    )
    _one_line(
        lambda: model.features(jnp.ones((L, IN), jnp.complex64), state),
        r"`x` must be a float array of shape \(length, 5\); got complex64 of shape \(6, 5\)\.$",
    )
    tokens, token_state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, OUT, H, N, 1, encoder="embedding", key=KEY
    )
    _one_line(
        lambda: tokens(jnp.ones((2, L), jnp.int32), token_state),
        r"integer array of shape \(length,\); got int32 of shape \(2, 6\)\. Batch with `jax\.vmap`",
    )


def test_model_carry_errors(model):
    model, state = model
    x = jnp.ones((L, IN))
    carry = model.init_carry()
    other_state_size = eqx_lru.LRUModel(IN, OUT, H, N + 2, DEPTH, key=KEY).init_carry()
    last = eqx_lru.LRUModel(IN, OUT, H, N, DEPTH, pooling="last", key=KEY).init_carry()
    for bad, pattern in (
        (None, r"`carry` is None: pass `LRUModel\.init_carry\(\)`"),
        (
            dict(carry, blocks=carry["blocks"][:1]),  # one block short
            r"`carry\['blocks'\]` is a tuple of 1 entries, but .* a tuple of 2 entries there",
        ),
        (
            other_state_size,  # another model's
            r"`carry\['blocks'\]\[0\]` is an array of shape \(5,\) .* shape \(3,\)",
        ),
        (last, r"`carry` is a dict with keys \['blocks'\], .* \['blocks', 'count', 'sum'\]"),
        (dict(carry, count=jnp.zeros((), jnp.float32)), r"`carry\['count'\]`.*float32.*int32"),
    ):
        _one_line(lambda bad=bad: model.step(bad, x[0], state), pattern)
        _one_line(lambda bad=bad: model.chunk(bad, x, state), pattern)
    # Under `jit` the check runs at trace time, with the same message.
    step = jax.jit(lambda c, x_t: model.step(c, x_t, state))
    _one_line(lambda: step(dict(carry, blocks=carry["blocks"][:1]), x[0]), r"1 entries")


@pytest.mark.parametrize("form", [eqx_lru.ComplexLRU, eqx_lru.RealLRU])
def test_complex_input_to_a_core(form):
    layer = form(H, N, key=KEY)
    pattern = re.escape("`u` must be a real floating array") + r".*complex64"
    _one_line(lambda: layer(jnp.ones((L, H), jnp.complex64)), pattern)

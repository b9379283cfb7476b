"""The block contract (`eqx_lru.AbstractBlock`, `eqx_lru.AbstractStreamingBlock`) that
`LRUModel` relies on: a block of one's own runs in a model (unrolled, rematerialised scan,
streaming) through the contract alone, equal to a float64 NumPy loop of the whole model;
a block that does not subclass the contract is refused at construction.

Sizes are distinct: IN 5, OUT 3, H 4, L 11, depth 2.
"""

from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru

IN, OUT, H, N, L, DEPTH = 5, 3, 4, 2, 11, 2
KEY = jax.random.PRNGKey(0)


def _cumsum(weight, x, length):
    mask = eqx_lru.valid_mask(length, x.shape[0])
    x = eqx_lru.where_valid(mask, x)
    return eqx_lru.where_valid(mask, x + weight * jnp.cumsum(x, axis=0))


class CumSum(eqx_lru.AbstractStreamingBlock):
    r"""$y_t = x_t + w \odot \sum_{s \le t} x_s$ over the valid positions: a block of one's
    own, on the contract's one signature (no packing, no time steps: it asserts it is
    given none)."""

    weight: jax.Array

    def __init__(self, d_model, d_state, *, dtype=None, key):
        del d_state
        self.weight = 0.3 * jax.random.normal(key, (d_model,), dtype or jnp.float32)

    def __call__(
        self, x, state, *, length=None, segment_ids=None, dt=None, key=None, inference=None
    ):
        assert segment_ids is None and dt is None
        return _cumsum(self.weight, x, length), state

    def init_carry(self):
        return jnp.zeros_like(self.weight)

    def step(self, carry, x_t, state, *, reset=None, dt=None):
        assert reset is None and dt is None
        carry = carry + x_t
        return carry, x_t + self.weight * carry

    def chunk(
        self,
        carry,
        x,
        state,
        *,
        length=None,
        segment_ids=None,
        reset=None,
        inference=True,
        key=None,
        carry_gradient=False,
        dt=None,
    ):
        del inference, key, carry_gradient
        assert segment_ids is None and reset is None and dt is None
        x = cast(jax.Array, x)
        mask = eqx_lru.valid_mask(length, x.shape[0])
        x = eqx_lru.where_valid(mask, x)
        sums = carry + jnp.cumsum(x, axis=0)  # pads add zero: the last row is the carry
        return sums[-1], eqx_lru.where_valid(mask, x + self.weight * sums)


class NotStreaming(eqx_lru.AbstractBlock):
    """`CumSum`'s call, without the streaming methods."""

    weight: jax.Array

    def __init__(self, d_model, d_state, *, dtype=None, key):
        self.weight = CumSum(d_model, d_state, dtype=dtype, key=key).weight

    def __call__(
        self, x, state, *, length=None, segment_ids=None, dt=None, key=None, inference=None
    ):
        return _cumsum(self.weight, x, length), state


def _oracle(model, x, length):
    """The model (linear encoder, `CumSum` blocks, mean pooling, head) as a float64 NumPy
    loop over the valid positions."""
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    h = f64(x[:length]) @ f64(model.encoder.weight).T + f64(model.encoder.bias)
    for block in model.blocks:
        total, rows = np.zeros(H), []
        for h_t in h:
            total = total + h_t
            rows.append(h_t + f64(block.weight) * total)
        h = np.stack(rows)
    return f64(model.head.weight) @ h.mean(axis=0) + f64(model.head.bias)


def test_lru_block_subclasses_the_contract():
    block = eqx_lru.LRUBlock(H, N, key=KEY)
    assert isinstance(block, eqx_lru.AbstractStreamingBlock)
    assert issubclass(eqx_lru.AbstractStreamingBlock, eqx_lru.AbstractBlock)
    for abstract in (eqx_lru.AbstractBlock, eqx_lru.AbstractStreamingBlock):
        with pytest.raises(TypeError, match="abstract"):
            abstract()  # pyright: ignore[reportAbstractUsage]


@pytest.mark.parametrize("remat", [False, True])
def test_a_block_of_ones_own_runs_and_streams_through_the_contract(remat):
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        IN, OUT, H, N, DEPTH, block=CumSum, remat=remat, key=KEY
    )
    x = jax.random.normal(jax.random.PRNGKey(1), (L, IN))
    x = x.at[8:].set(jnp.nan)  # pads: never read
    expected = _oracle(model, np.asarray(x), 8)
    out, _ = model(x, state, length=8, inference=True)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    _, outs = jax.lax.scan(lambda c, x_t: model.step(c, x_t, state), model.init_carry(), x[:8])
    np.testing.assert_allclose(outs[-1], expected, rtol=1e-5, atol=1e-5)
    carry, _ = model.chunk(model.init_carry(), x[:3], state)
    _, out = model.chunk(carry, x[3:], state, length=5)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_a_block_that_cannot_stream_runs_and_names_the_streaming_contract():
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        IN, OUT, H, N, DEPTH, block=NotStreaming, remat=True, key=KEY
    )
    x = jax.random.normal(jax.random.PRNGKey(1), (L, IN))
    out, _ = model(x, state, inference=True)
    np.testing.assert_allclose(out, _oracle(model, np.asarray(x), L), rtol=1e-5, atol=1e-5)
    for call in (
        model.init_carry,
        lambda: model.step({"blocks": (), "sum": None, "count": None}, x[0], state),
        lambda: model.chunk({"blocks": (), "sum": None, "count": None}, x, state),
    ):
        with pytest.raises(TypeError, match=r"block 0 \(NotStreaming\).*AbstractStreamingBlock"):
            call()


def test_a_block_that_is_not_an_abstract_block_is_refused():
    class Plain(eqx.Module):  # LRUBlock's call signature, but not the contract
        def __init__(self, d_model, d_state, *, dtype=None, key):
            pass

        def __call__(self, x, state, *, length=None, key=None, inference=None):
            return x, state

    with pytest.raises(TypeError, match=r"block 0 .*Plain.*Subclass eqx_lru\.AbstractBlock"):
        eqx_lru.LRUModel(IN, OUT, H, N, DEPTH, block=Plain, key=KEY)  # pyright: ignore[reportArgumentType]

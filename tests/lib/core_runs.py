"""Runs of one core that must agree, compiled as one program (for the `dt` and RG-LRU
tests)."""

import equinox as eqx
import jax
import jax.numpy as jnp


@eqx.filter_jit
def packed_chunked_streamed(core, x, dt):
    """One run, and the same sequence packed with another, in two chunks, and by `step`
    (one compiled program: the comparisons' runs share a compilation)."""
    y, final = core.run(x, dt=dt)
    ids = jnp.asarray([3] * 5 + [4] * (x.shape[0] - 5))
    packed = core(x, dt=dt, segment_ids=ids)
    first, second = core(x[:5], dt=dt[:5]), core(x[5:], dt=dt[5:])
    y1, carry = core.run(x[:9], dt=dt[:9], length=5)
    y2, final2 = core.run(x[5:], dt=dt[5:], initial_state=carry)
    chunked = jnp.concatenate([y1[:5], y2])
    step = lambda c, xs: core.step(c, xs[0], dt=xs[1])  # noqa: E731
    streamed_final, streamed = jax.lax.scan(step, core.init_state(), (x, dt))
    return (
        (y, final),
        (packed, jnp.concatenate([first, second])),
        (chunked, final2),
        (
            streamed,
            streamed_final,
        ),
    )

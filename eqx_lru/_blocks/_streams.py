r"""The pieces every streaming call shares: where a stream starts this call (its carry, or
a fresh one on `reset`), whether gradients flow into that carry, and which positions of a
chunk are new.

A stream's call $(c, x_{1..\ell}) \mapsto (c', y_{1..\ell})$ starts from

$$c_0 = \begin{cases} \text{init\_carry}() & \text{reset} \\
\operatorname{sg}(c) & \text{otherwise (truncated BPTT: a constant)} \\
c & \text{otherwise, with } \texttt{carry\_gradient=True} \end{cases}$$

where $\operatorname{sg}$ is `jax.lax.stop_gradient`. Under `jax.vmap` each stream has its
own `reset` and `length`, so one call serves streams at different points: a slot that
starts a new sequence, slots that continue, slots with nothing new (`length=0`).
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Integer, PyTree

from .._checks import Dim, check_integer_scalar
from .._runtime_check import check_range


def check_reset(reset: ArrayLike | None) -> Array | None:
    """`reset` as a boolean scalar array (`None` stays `None`), or a `ValueError` naming
    it."""
    if reset is None:
        return None
    reset = jnp.asarray(reset)
    if reset.shape != () or reset.dtype != jnp.bool_:
        raise ValueError(
            "`reset` must be one boolean (True: this stream starts a new sequence from "
            f"`init_carry()` at this call); got {reset.dtype} of shape {reset.shape}. For "
            "a batch of streams give one per stream under `jax.vmap`."
        )
    return reset


def start_carry(
    carry: PyTree[ArrayLike],
    init_carry: Callable[[], PyTree[Array]],
    *,
    reset: Bool[ArrayLike, ""] | None,
    carry_gradient: bool,
) -> PyTree[Array]:
    """The carry a call starts from: `init_carry()` where `reset` is true, else `carry`,
    as a constant of the gradient unless `carry_gradient` (see the module docstring)."""
    carry = jax.tree_util.tree_map(jnp.asarray, carry)
    reset = check_reset(reset)
    if reset is not None:
        fresh = init_carry()
        carry = jax.tree_util.tree_map(lambda new, old: jnp.where(reset, new, old), fresh, carry)
    if not carry_gradient:
        carry = jax.lax.stop_gradient(carry)
    return carry


def chunk_mask(
    length: Integer[ArrayLike, ""] | None, size: Dim
) -> tuple[Bool[Array, " size"] | None, Integer[Array, ""] | None]:
    """`(mask, valid)` of a chunk of `size` positions with `length` new ones: the mask
    `arange(size) < length` and `length` as int32, or `(None, None)` when every position
    is new. Unlike a sequence's length, a chunk's may be 0 (a stream with nothing new in a
    call over many streams). A `length` outside `[0, size]` is a `ValueError` when known,
    else a run-time error (`runtime_check`, as `eqx.error_if`; skipped in an exported
    program)."""
    if length is None:
        return None, None
    check_integer_scalar(
        length,
        "`length` must be a scalar integer (the number of new leading positions of this "
        "stream's chunk; batch it with `jax.vmap`)",
    )
    n = check_range(
        length,
        0,
        size,
        f"`length` must be between 0 (nothing new for this stream) and the chunk's padded "
        f"length {size}.",
        check="length",
    )
    return jnp.arange(size, dtype=jnp.int32) < n, n


def keep_when_empty(
    valid: Integer[Array, ""] | None, new: PyTree[Array], old: PyTree[Array]
) -> PyTree[Array]:
    """`new`, or `old` where the chunk had no new position (`valid == 0`)."""
    if valid is None:
        return new
    return jax.tree_util.tree_map(lambda a, b: jnp.where(valid > 0, a, b), new, old)


#: The most positions a stream's running count holds: int32's largest, 2**31 - 1.
COUNT_MAX = 2**31 - 1


def running_sum(
    total: Array, count: Integer[ArrayLike, ""], added: Array, n: Integer[ArrayLike, ""]
) -> tuple[Array, Integer[Array, ""]]:
    r"""Mean pooling's running sum and count of positions after `n` more positions whose
    features sum to `added`: $(s + a,\ c + n)$ while the count fits int32. The count never
    wraps: from $C = 2^{31} - 1$ positions on it stays $C$, and the sum is scaled by
    $C / (c + n)$ so that $s / c$ is still the mean of every position so far; after that
    each new position weighs $1/C$ (a running average over about the last $C$
    positions)."""
    count = jnp.asarray(count)
    n = jnp.asarray(n).astype(count.dtype)
    room = COUNT_MAX - count
    total = total + added
    over = n > room
    seen = count.astype(total.dtype) + n.astype(total.dtype)
    scale = jnp.where(over, COUNT_MAX / jnp.maximum(seen, 1), 1).astype(total.dtype)
    return total * scale, count + jnp.minimum(n, room)

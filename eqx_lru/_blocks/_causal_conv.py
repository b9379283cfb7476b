r"""`CausalConv`: the short depthwise causal convolution of Hawk's block (De et al. 2024).

Per channel, over positions, with $K$ taps,

$$y_t = b + \sum_{k=0}^{K-1} w_k \odot x_{t-k},$$

where an input before the start of the sequence, or in another packed sequence than
position $t$'s, counts as zero. A stream carries the last $K - 1$ inputs (the *history*),
which stand before the first position of the next call.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Integer, PRNGKeyArray

from .._checks import Size, check_key, check_size, float_dtype
from .._padding import segment_index


class CausalConv(eqx.Module):
    r"""A depthwise causal convolution with `width` taps:
    $y_t = b + \sum_{k<K} w_k \odot x_{t-k}$ (see the module docstring).

    **Fields:** `weight` `(width, features)`, row $k$ multiplying the input $k$ positions
    back (row 0 the current one); `bias` `(features,)`.

    **Initialisation.** $w_k \sim \mathcal N(0, 0.01/K)$ (Griffin's small taps) plus 1 on
    the current input's tap (`identity=True`, the default), $b = 0$: the convolution
    starts near the identity, so the recurrence reads its projected input from the first
    step (with Griffin's taps alone, `identity=False`, it starts about ten times smaller,
    $\sqrt{K \cdot 0.01/K}$, and in the test suite's small recall task training left the
    plateau later or not at all; see the concepts page on the RG-LRU).

    recurrentgemma's `Conv1D` stores the same taps in the other order: its `w[K - 1 - k]`
    is `weight[k]`.
    """

    weight: Float[Array, "width features"]
    bias: Float[Array, " features"]

    def __init__(
        self,
        features: Size,
        width: Size = 4,
        *,
        identity: bool = True,
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** `features` (channels in and out), `width` (taps, $K \\ge 1$),
        `identity` (add 1 to the current input's tap; see above), `dtype` of the
        parameters, `key`."""
        features, width = check_size("features", features), check_size("conv_width", width)
        check_key(key)
        dtype = float_dtype(dtype)
        scale = math.sqrt(0.01 / width)
        taps = scale * jax.random.normal(key, (width, features), dtype)
        self.weight = taps.at[0].add(1) if identity else taps
        self.bias = jnp.zeros(features, dtype)

    @property
    def width(self) -> int:
        return self.weight.shape[0]

    def init_history(self) -> Float[Array, "width_minus_1 features"]:
        """The history before a sequence's first position: `width - 1` zero inputs."""
        return jnp.zeros((self.width - 1, self.weight.shape[1]), self.weight.dtype)

    def __call__(
        self,
        x: Float[Array, "length features"],
        *,
        history: Float[Array, "width_minus_1 features"] | None = None,
        segment_ids: Integer[Array, " length"] | None = None,
        history_ids: Integer[Array, " width_minus_1"] | None = None,
    ) -> Float[Array, "length features"]:
        """The outputs at every position of `x`.

        - `history`: the `width - 1` inputs before `x[0]` (oldest first; default zeros).
        - `segment_ids`: packed sequences (a new one wherever the value changes); no
            output reads an input of another sequence. The history belongs to the first
            sequence, unless `history_ids` gives its own ids (a sequence split across
            devices: the previous chunk's last ids).
        """
        extended, index = _extend(self, x, history, segment_ids, history_ids)
        size, past = x.shape[0], self.width - 1
        y = jnp.broadcast_to(self.bias, x.shape)
        for lag in range(self.width):
            window = extended[past - lag : past - lag + size]
            if index is not None:
                same = index[past - lag : past - lag + size] == index[past:]
                window = jnp.where(same[:, None], window, 0)
            y = y + self.weight[lag] * window
        return y

    def step(
        self, history: Float[Array, "width_minus_1 features"], x_t: Float[Array, " features"]
    ) -> tuple[Float[Array, "width_minus_1 features"], Float[Array, " features"]]:
        """One position: `(history, x_t) -> (history', y_t)`."""
        extended = jnp.concatenate([history, x_t[None]])
        y_t = self.bias + jnp.sum(self.weight[::-1] * extended, axis=0)
        return extended[1:], y_t

    def next_history(
        self,
        x: Float[Array, "length features"],
        *,
        history: Float[Array, "width_minus_1 features"] | None = None,
        length: Integer[Array, ""] | None = None,
        segment_ids: Integer[Array, " length"] | None = None,
    ) -> Float[Array, "width_minus_1 features"]:
        """The history after position `length - 1` of `x` (all of `x` if `None`): the last
        `width - 1` inputs up to it, zero where they precede its sequence's start."""
        extended, index = _extend(self, x, history, segment_ids, None)
        past = self.width - 1
        end = x.shape[0] if length is None else length
        out = jax.lax.dynamic_slice_in_dim(extended, end, past)
        if index is None:
            return out
        own = jax.lax.dynamic_slice_in_dim(index, end, past)
        last = jax.lax.dynamic_index_in_dim(index, end + past - 1, keepdims=False)
        return jnp.where((own == last)[:, None], out, 0)


def _extend(conv: CausalConv, x, history, segment_ids, history_ids):
    """`(history ++ x, segment index of every row or None)`."""
    history = conv.init_history() if history is None else history.astype(x.dtype)
    extended = jnp.concatenate([history, x])
    if segment_ids is None:
        return extended, None
    past = conv.width - 1
    if history_ids is None:
        history_ids = jnp.broadcast_to(segment_ids[:1], (past,))
    ids = jnp.concatenate([history_ids.astype(segment_ids.dtype), segment_ids])
    return extended, segment_index(ids)

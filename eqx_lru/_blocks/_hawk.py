r"""`HawkBlock`: the residual block of Hawk (De et al. 2024, Griffin's recurrent-only model):
a short causal convolution before the recurrence, a gated MLP after it.

$$\begin{aligned}
z &= \operatorname{RMSNorm}(x), \qquad g = \operatorname{GELU}(W_y z + b_y), \qquad
u = \operatorname{Conv}(W_x z + b_x), \\
r &= x + \operatorname{Dropout}\big(W_o (\operatorname{Rec}(u) \odot g) + b_o\big), \\
y &= r + \operatorname{Dropout}\big(\operatorname{MLP}(\operatorname{RMSNorm}(r))\big),
\end{aligned}$$

per position except the convolution (`CausalConv`, $K$ taps) and the recurrent core
`Rec` (the RG-LRU by default), both causal. Bidirectional (`bidirectional=True`), the
temporal mixing also runs on the reversed sequence, with its own convolution and core,

$$\operatorname{Rec}(v) = \overrightarrow{\text{core}}(\overrightarrow{\operatorname{Conv}}(v)) +
\overleftarrow{\text{core}}(\overleftarrow{\operatorname{Conv}}(v)),$$

$\overleftarrow{\operatorname{Conv}}(v)_t = b' + \sum_k w'_k v_{t+k}$ and the reverse core
scanning from the end ($v = W_x z + b_x$; the projections, the gate and the MLP shared).
"""

from collections.abc import Hashable
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Bool, Float, Integer, PRNGKeyArray, PyTree, jaxtyped

from .._checks import Size, _check_number, check_key, check_size
from .._cores._core import AbstractRecurrentCore
from .._cores._core_factory import Core, build_core, core_factory
from .._cores._dt import reverse_steps
from .._cores._rglru import RGLRU
from .._cores._rglru_init import check_lecun_scale, lecun_linear
from .._padding import where_valid
from .._scan import _sharding as sharding
from .._surface import check_carry, check_features, checks_first
from ._abstract_block import AbstractStreamingBlock
from ._causal_conv import CausalConv
from ._gated_mlp import GatedMLP
from ._prologue import start_call, start_chunk, start_step
from ._streams import keep_when_empty


def _check_call(block: "HawkBlock", x, *args, **kwargs) -> None:
    del args, kwargs
    check_features(x, block.d_model, name="x", owner="HawkBlock")


def _check_step(block: "HawkBlock", carry, x_t, *args, **kwargs) -> None:
    del args, kwargs
    block._causal("step")
    check_features(x_t, block.d_model, name="x_t", owner="HawkBlock", position=True)
    check_carry(carry, block.init_carry, "HawkBlock")


def _check_chunk(block: "HawkBlock", carry, x, *args, **kwargs) -> None:
    del args, kwargs
    block._causal("chunk")
    check_features(x, block.d_model, name="x", owner="HawkBlock")
    check_carry(carry, block.init_carry, "HawkBlock")


class HawkBlock(AbstractStreamingBlock):
    r"""Hawk's residual block (see the module docstring for the maths): RMS norm, two
    projections to the recurrence width $N$ (`d_state`), a GELU gate on one and a short
    causal convolution then the recurrent core on the other, their product projected back,
    a residual; then RMS norm, a gated MLP and a second residual.

    `LRUModel(block=functools.partial(eqx_lru.HawkBlock, ...))` builds a Hawk model.

    **The core.** `core=` as in `LRUBlock`, built at the recurrence width as
    `make_core(d_state, d_state, *, key)`: the RG-LRU by default (`eqx_lru.RGLRU`,
    Griffin's ring), or any causal `eqx_lru.AbstractRecurrentCore`, e.g.
    `functools.partial(eqx_lru.RGLRU, phase=True, form="real")` or `"complex"` (the LRU
    with $N$ modes).

    **Bidirectional** (`bidirectional=True`). A second convolution and core (own
    parameters, as `LRUBlock`'s reverse core) run on the reversed sequence and their
    output is added to the forward one's, before the gate:
    $h = \overrightarrow{\text{core}}(\overrightarrow{\operatorname{Conv}}(v)) +
    \overleftarrow{\text{core}}(\overleftarrow{\operatorname{Conv}}(v))$, the reverse
    convolution reading $v_t, \dots, v_{t+K-1}$ and the reverse core scanning from the
    end (`core(u, reverse=True)`), so the output at a position depends on the whole
    sequence. It is the forward run plus the run on the reversed sequence (each packed
    sequence, the valid positions, reversed), reversed back; the reverse core gets the
    steps of `reverse_steps` (`dt[k + 1]`, a run's last position its own). It does not
    stream: `init_carry`, `step` and `chunk` refuse, saying why.

    **Padding and packing.** With `length=ℓ` positions `t >= ℓ` never change an output at a
    valid position (the convolution and the core are causal, and the inputs are zeroed
    there; bidirectional, the reverse convolution's inputs are zeroed there too, so it and
    the reverse scan from the padded end read zeros until `ℓ - 1`) and the outputs there
    are zero. With `segment_ids` the convolutions read no input of another packed sequence
    and the cores reset at each boundary, so each sequence's outputs are those of the
    sequence alone.

    **Streaming.** `init_carry()`, then `step` (inference mode) or `chunk` (inference
    mode, or training by chunks with `inference=False`: the norms are per position), as
    `LRUBlock`'s, with `reset` and empty chunks for many streams: the carry is the
    convolution's last $K - 1$ inputs and the core's state (`{"conv", "core"}`).

    **Time steps.** `dt=` (a core that takes it, e.g. the RG-LRU) goes to the core (steps
    at padded positions ignored); the convolution reads positions, not times.

    **Sequence parallelism.** With a core scanning by `eqx_lru.SequenceParallel`, each
    device's chunk reads the previous chunk's last $K - 1$ inputs (a `ppermute`); chunks
    must hold at least $K - 1$ positions (bidirectional: the reverse convolution reads
    the next chunk's first $K - 1$, and the reverse core's steps the next chunk's first).

    **Initialisation** (`init=`). The norms' weights are 1 and the core initialises itself
    (the RG-LRU as recurrentgemma does) either way. `"equinox"` (default): the dense layers
    as `eqx.nn.Linear` (weights and biases uniform on $\pm 1/\sqrt{\text{fan-in}}$), the
    convolution near the identity (`CausalConv`). `"recurrentgemma"`: equal in distribution
    to recurrentgemma's `ResidualBlock`: zero biases, $W_x, W_y \sim \mathcal N(0, 1/H)$,
    $W_o \sim \mathcal N(0, s/N)$, the MLP's $W_g, W_v \sim \mathcal N(0, 1/(2H))$ and
    $W_d \sim \mathcal N(0, s/E)$, taps $\mathcal N(0, 0.01/K)$ ($s$ = `final_scale`,
    recurrentgemma's `final_w_init_variance_scale`; its Griffin model passes
    $2/\text{layers}$).

    **Document starts.** recurrentgemma's RG-LRU takes a document's first input
    unnormalised: build the core as
    `functools.partial(eqx_lru.RGLRU, document_start="unnormalised")` (what
    `eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma` builds).
    """

    norm: eqx.nn.RMSNorm
    linear_x: eqx.nn.Linear
    linear_y: eqx.nn.Linear
    conv: CausalConv
    core: AbstractRecurrentCore
    reverse_conv: CausalConv | None
    reverse_core: AbstractRecurrentCore | None
    linear_out: eqx.nn.Linear
    mlp_norm: eqx.nn.RMSNorm
    mlp: GatedMLP
    dropout: eqx.nn.Dropout

    def __init__(
        self,
        d_model: Size,
        d_state: Size,
        *,
        core: Core = RGLRU,
        conv_width: Size = 4,
        mlp_width: Size | None = None,
        bidirectional: bool = False,
        dropout: float = 0.0,
        init: Literal["equinox", "recurrentgemma"] = "equinox",
        final_scale: float = 1.0,
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `d_model`: $H$, the features of the residual stream.
        - `d_state`: $N$, the recurrence width (Griffin's `lru_width`): the convolution,
            the core's input and output.
        - `core`: `make_core(d_state, d_state, *, key)` (and `dtype=`), `"complex"` or
            `"real"` (see above); default `eqx_lru.RGLRU`.
        - `conv_width`: $K$, the convolution's taps (4 in Griffin).
        - `mlp_width`: $E$, the MLP's hidden features (default $3H$, Griffin's expansion).
        - `bidirectional`: add a reverse convolution and core (own parameters) run on the
            reversed sequence, summed with the forward ones (see above); default `False`.
        - `dropout`: rate on each residual branch (training mode only).
        - `init`: `"equinox"` (default) or `"recurrentgemma"` (see above).
        - `final_scale`: with `init="recurrentgemma"`, the variance scale of the layers
            that end the two residual branches ($W_o$, $W_d$); default 1.
        - `dtype`: of every parameter (passed to the core as `dtype=` when not `None`).
        - `key`: a `jax.random.PRNGKey`.
        """
        d_model = check_size("d_model", d_model)
        d_state = check_size("d_state", d_state, "HawkBlock: the recurrence width N")
        conv_width = check_size("conv_width", conv_width)
        mlp_width = 3 * d_model if mlp_width is None else check_size("mlp_width", mlp_width)
        check_key(key)
        if not 0 <= dropout < 1:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout}.")
        core_factory(core)
        _check_init(init, final_scale)
        if init == "recurrentgemma":  # W_o's and W_d's spreads, before building anything
            check_lecun_scale("final_scale", final_scale, d_state, dtype)
            check_lecun_scale("final_scale", final_scale, mlp_width, dtype)
        keys = jax.random.split(key, 6)
        self.norm = eqx.nn.RMSNorm(d_model, eps=1e-6, use_bias=False, dtype=dtype)
        self.linear_x = _dense(init, d_model, d_state, 1.0, dtype, keys[0])
        self.linear_y = _dense(init, d_model, d_state, 1.0, dtype, keys[1])
        identity = init == "equinox"
        self.conv = CausalConv(d_state, conv_width, identity=identity, dtype=dtype, key=keys[2])
        self.core = build_core(core, d_state, d_state, dtype=dtype, key=keys[3])
        if not self.core.causal:
            raise ValueError(
                f"HawkBlock needs a causal core; {type(self.core).__name__} declares "
                "`causal = False`."
            )
        self.reverse_conv = self.reverse_core = None
        if bidirectional:  # keys of their own: the forward parameters are those of `key`
            conv_key, core_key = jax.random.split(jax.random.fold_in(key, 1))
            self.reverse_conv = CausalConv(
                d_state, conv_width, identity=identity, dtype=dtype, key=conv_key
            )
            self.reverse_core = build_core(core, d_state, d_state, dtype=dtype, key=core_key)
        self.linear_out = _dense(init, d_state, d_model, final_scale, dtype, keys[4])
        self.mlp_norm = eqx.nn.RMSNorm(d_model, eps=1e-6, use_bias=False, dtype=dtype)
        self.mlp = GatedMLP(
            d_model, mlp_width, init=init, final_scale=final_scale, dtype=dtype, key=keys[5]
        )
        self.dropout = eqx.nn.Dropout(dropout)

    @property
    def d_model(self) -> int:
        return int(self.linear_x.in_features)

    @property
    def bidirectional(self) -> bool:
        return self.reverse_core is not None

    def _causal(self, method: str) -> None:
        """A `ValueError` saying why a bidirectional block cannot run `method`."""
        if self.reverse_core is not None:
            raise ValueError(
                f"`HawkBlock.{method}` needs a causal block, and this one is bidirectional "
                "(`bidirectional=True`): its reverse convolution and core read the sequence "
                "from the end, so the output at a position depends on later positions, "
                "which no carry from earlier ones can provide. Stream with "
                "`bidirectional=False`, or run whole sequences with the block's call."
            )

    @checks_first(_check_call)
    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        x: Float[ArrayLike, "length d_model"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "length d_model"], eqx.nn.State]:
        """Run the block on one sequence (batch with `jax.vmap`).

        **Arguments:** as `LRUBlock.__call__` (`x` of shape `(length, d_model)`, `state`
        passed through unchanged, `length`, `segment_ids`, `key` for dropout,
        `inference`), and `dt`: the core's time steps, `(length,)` or a scalar (a core
        that takes them; see `eqx_lru.RGLRU`).

        **Returns:** `(y, state)`, `y` of shape `(length, d_model)`, zero at padded
        positions.
        """
        c = start_call(self, x, core=self.core, length=length, segment_ids=segment_ids, dt=dt)
        gate, v = _mix_in(self, c.x)
        history, history_ids = _halo(self, v, c.segment_ids, c.axis)
        u = self.conv(v, history=history, segment_ids=c.segment_ids, history_ids=history_ids)
        u = where_valid(c.mask, u)
        h = self.core(u, segment_ids=c.segment_ids, dt=c.dt)
        if self.reverse_core is not None:
            h = h + _reverse_run(self, v, c.segment_ids, c.dt, c.mask, c.axis)
        return _mix_out(self, c.x, h, gate, c.mask, key, inference, c.axis), state

    # --- streaming ---------------------------------------------------------------------

    def init_carry(self) -> PyTree[Array]:
        """`{"conv": the last K - 1 inputs of the convolution (zeros), "core": the core's
        init_state()}`. A bidirectional block raises a `ValueError` (it cannot stream)."""
        self._causal("init_carry")
        return {"conv": self.conv.init_history(), "core": self.core.init_state()}

    @checks_first(_check_step)
    @jaxtyped(typechecker=beartype)
    def step(
        self,
        carry: PyTree[ArrayLike],
        x_t: Float[ArrayLike, " d_model"],
        state: eqx.nn.State,
        *,
        reset: Bool[ArrayLike, ""] | None = None,
        dt: ArrayLike | None = None,
    ) -> tuple[PyTree[Array], Float[Array, " d_model"]]:
        r"""One position in inference mode: $(c_{t-1}, x_t) \mapsto (c_t, y_t)$, from
        `init_carry()` when `reset` is true (as `LRUBlock.step`); `dt`: this position's
        time step. Repeated from `init_carry()`: the call, position by position.
        **Returns:** `(carry, y_t)`."""
        carry, x_t, dt = start_step(self, carry, x_t, core=self.core, reset=reset, dt=dt)
        gate, v = _mix_in(self, x_t[None])
        history, u = self.conv.step(carry["conv"], v[0])
        core_state, h = self.core.step(carry["core"], u, dt=dt)
        y = _mix_out(self, x_t[None], h[None], gate, None, None, True, None)
        return {"conv": history, "core": core_state}, y[0]

    @checks_first(_check_chunk)
    @jaxtyped(typechecker=beartype)
    def chunk(
        self,
        carry: PyTree[ArrayLike],
        x: Float[ArrayLike, "length d_model"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        reset: Bool[ArrayLike, ""] | None = None,
        inference: bool = True,
        key: PRNGKeyArray | None = None,
        carry_gradient: bool = False,
        dt: ArrayLike | None = None,
    ) -> tuple[PyTree[Array], Float[Array, "length d_model"]]:
        """The next chunk of a stream in parallel, from `carry`: as `LRUBlock.chunk`
        (`length` new positions, possibly 0; packed `segment_ids` whose first continues
        the stream; `reset`; `inference=False` trains, with `key` for dropout; the
        incoming carry a constant of the gradient unless `carry_gradient`), with `dt` the
        core's time steps. **Returns:** `(carry, y)`, the carry after the last valid
        position and the outputs, zero at pads."""
        c = start_chunk(
            self, carry, x, core=self.core, length=length, segment_ids=segment_ids, reset=reset,
            carry_gradient=carry_gradient, dt=dt,
        )  # fmt: skip
        gate, v = _mix_in(self, c.x)
        conv = dict(history=c.carry["conv"], segment_ids=c.segment_ids)
        u = where_valid(c.mask, self.conv(v, **conv))
        history = self.conv.next_history(v, length=c.last, **conv)
        h, core_state = self.core.run(
            u, initial_state=c.carry["core"], length=c.last,
            segment_ids=c.segment_ids, dt=c.dt,
        )  # fmt: skip
        y = _mix_out(self, c.x, h, gate, c.mask, key, inference, None)
        new = {"conv": history, "core": core_state}
        return keep_when_empty(c.valid, new, c.carry), y


def _check_init(init: str, final_scale: float) -> None:
    if init not in ("equinox", "recurrentgemma"):
        raise ValueError(f"`init` must be 'equinox' or 'recurrentgemma', got {init!r}.")
    if not 0 < _check_number("final_scale", final_scale) < float("inf"):
        raise ValueError(f"`final_scale` must be a positive finite number, got {final_scale!r}.")
    if init == "equinox" and final_scale != 1:
        raise ValueError(
            f"`final_scale`={final_scale} scales recurrentgemma's initialisation; it needs "
            "`init='recurrentgemma'` (the default 'equinox' init has no such scale)."
        )


def _dense(init: str, d_in: int, d_out: int, scale: float, dtype, key) -> eqx.nn.Linear:
    if init == "recurrentgemma":
        return lecun_linear(d_in, d_out, scale=scale, dtype=dtype, key=key)
    return eqx.nn.Linear(d_in, d_out, dtype=dtype, key=key)


def _mix_in(block: HawkBlock, x: Array) -> tuple[Array, Array]:
    r"""$(g, v)$: the GELU gate and the convolution's input, per position."""
    z = jax.vmap(block.norm)(x)
    gate = jax.nn.gelu(jax.vmap(block.linear_y)(z))
    return gate, jax.vmap(block.linear_x)(z)


def _mix_out(block: HawkBlock, x, h, gate, mask, key, inference, axis: Hashable | None):
    r"""$r = x + \operatorname{Dropout}(W_o (h \odot g) + b_o)$, then $r +
    \operatorname{Dropout}(\operatorname{MLP}(\operatorname{RMSNorm}(r)))$; zero at pads."""
    key = sharding.chunk_key(key, axis)
    keys = (None, None) if key is None else jax.random.split(key)
    mixed = jax.vmap(block.linear_out)(h * gate)
    r = x + block.dropout(mixed, key=keys[0], inference=inference)
    m = jax.vmap(block.mlp)(jax.vmap(block.mlp_norm)(r))
    return where_valid(mask, r + block.dropout(m, key=keys[1], inference=inference))


def _reverse_run(block: HawkBlock, v: Array, segment_ids, dt, mask, axis: Hashable | None):
    r"""$\overleftarrow{\text{core}}(\overleftarrow{\operatorname{Conv}}(v))$: the reverse
    convolution as the causal one on the reversed sequence (pads zeroed first, so that
    at the end they read as the zeros after a sequence), then the reverse core from the
    end, with the steps of a reverse run (`reverse_steps`)."""
    assert block.reverse_conv is not None and block.reverse_core is not None
    flipped = where_valid(mask, v)[::-1]
    flipped_ids = None if segment_ids is None else segment_ids[::-1]
    history, history_ids = _halo(block, flipped, flipped_ids, axis, reverse=True)
    conv = block.reverse_conv(
        flipped, history=history, segment_ids=flipped_ids, history_ids=history_ids
    )
    u = where_valid(mask, conv[::-1])
    steps = dt
    if dt is not None and jnp.ndim(dt) == 1:
        steps = reverse_steps(dt, axis=axis, segment_ids=segment_ids, mask=mask)
    return block.reverse_core(u, reverse=True, segment_ids=segment_ids, dt=steps)


def _halo(block: HawkBlock, v: Array, segment_ids, axis: Hashable | None, reverse=False):
    """Over a sequence split across devices: the previous chunk's last `K - 1` inputs of
    the convolution (zeros on the first chunk) and their segment ids; `(None, None)` on
    one device. `reverse`: `v` is this device's chunk reversed, and the previous chunk
    is the next device's, reversed (zeros on the last device)."""
    past = block.conv.width - 1
    if axis is None or past == 0:
        return None, None
    if v.shape[0] < past:
        raise ValueError(
            f"HawkBlock over a sequence split across devices needs chunks of at least "
            f"conv_width - 1 = {past} positions (the convolution reads that many back); "
            f"got chunks of {v.shape[0]}. Use fewer devices or a longer sequence."
        )
    n = jax.lax.axis_size(axis)
    perm = [(d, (d - 1 if reverse else d + 1) % n) for d in range(n)]
    first = jax.lax.axis_index(axis) == (n - 1 if reverse else 0)
    tail = v[v.shape[0] - past :]
    history = jnp.where(first, jnp.zeros_like(tail), jax.lax.ppermute(tail, axis, perm))
    if segment_ids is None:
        return history, None
    ids = jax.lax.ppermute(segment_ids[segment_ids.shape[0] - past :], axis, perm)
    return history, jnp.where(first, segment_ids[0], ids)

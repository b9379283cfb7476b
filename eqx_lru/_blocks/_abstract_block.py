r"""`AbstractBlock` and `AbstractStreamingBlock`: the contracts `LRUModel` relies on.

A block maps one sequence of the residual stream to another of the same shape,

$$(x, s) \mapsto (y, s'), \qquad x, y \in \mathbb R^{L \times H},$$

where $s$ is the `eqx.nn.State` (batch-norm running statistics, or nothing). A streaming
block is also an RNN: a carry $c$ with $(c_{t-1}, x_t) \mapsto (c_t, y_t)$ that, repeated
from `init_carry()`, gives the call in inference mode. `LRUModel` uses these methods only
(no probing of the block's type or attributes), so a block of your own plugs in by
subclassing one of the two classes.
"""

import abc
from typing import ClassVar

import equinox as eqx
from jaxtyping import Array, ArrayLike, Bool, Float, Integer, PRNGKeyArray, PyTree

#: The name (`jax.ad_checkpoint.checkpoint_name`) under which a block's `scan_body` may
#: mark an intermediate value for the enclosing rematerialised scan over blocks
#: (`LRUModel(remat=True)`) to keep instead of recomputing: `LRUBlock` marks a
#: bidirectional block's summed recurrence output, so the recomputation reruns no scan.
RECURRENCE = "eqx_lru_recurrence"


class AbstractBlock(eqx.Module):
    r"""A block of a deep model: one sequence `(length, d_model)` in, one of the same
    shape out, with the model's `eqx.nn.State` passed through. `eqx_lru.LRUBlock`, or your
    own subclass; `LRUModel(block=...)` builds blocks that subclass this.

    Subclasses implement `__call__`. `scan_body` (what `LRUModel(remat=True)` runs inside
    its rematerialised scan over blocks) defaults to `__call__`.

    **Class attributes:**

    - `remat_name`: the `jax.ad_checkpoint.checkpoint_name` under which `scan_body` marks
        the values that the rematerialised scan keeps instead of recomputing.

    **One signature.** The model calls every block with every option by name (`length`,
    `segment_ids`, `dt`, `key`, `inference`; `None` for one not given): a block takes them
    all, and refuses one it cannot honour (a `dt` for cores without time steps) with an
    error naming it.
    """

    remat_name: ClassVar[str] = RECURRENCE

    @abc.abstractmethod
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

        **Arguments:**

        - `x`: shape `(length, d_model)`.
        - `state`: the model's `eqx.nn.State`.
        - `length`: the number of valid leading positions (the rest is padding, which
            must not change the output at a valid position); `None`: all valid.
        - `segment_ids`: packed sequences, a new one wherever the value changes; `None`:
            one sequence.
        - `dt`: the time step of each position, `(length,)` or a scalar, for blocks whose
            cores take it (see the concepts page on time steps); `None`: none.
        - `key`: randomness in training mode (e.g. dropout).
        - `inference`: overrides the block's inference flags if not `None`.

        **Returns:** `(y, state)`, `y` of shape `(length, d_model)`.
        """

    def scan_body(
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
        """The block as the body of an enclosing rematerialised scan over blocks
        (`LRUModel(remat=True)`, which checkpoints the body with
        `jax.checkpoint_policies.save_only_these_names(self.remat_name)`): the same values and
        gradients as `__call__`, with the same arguments. The default calls `__call__`; a
        block overrides it to drop a checkpoint of its own (which would hide saved values
        from the enclosing policy) or to mark values to keep with
        `jax.ad_checkpoint.checkpoint_name(value, self.remat_name)`.
        """
        return self(
            x, state, length=length, segment_ids=segment_ids, dt=dt, key=key, inference=inference
        )


class AbstractStreamingBlock(AbstractBlock):
    r"""A block that also runs as an RNN: `init_carry()`, then `step` position by position
    or `chunk` over chunks, each equal to the call on the sequence so far. `step` is in
    inference mode; `chunk` is in inference mode by default and trains with
    `inference=False` (truncated backpropagation through time: the incoming carry is a
    constant unless `carry_gradient=True`). `LRUModel.init_carry`/`step`/`chunk` need every
    block to subclass this. A block whose configuration cannot stream (a bidirectional
    `LRUBlock`) raises a `ValueError` saying why from these methods.

    **Many streams.** Under `jax.vmap` every stream has its own `reset` (start a new
    sequence from `init_carry()` at this call) and its own chunk `length` (0: nothing new,
    the carry is kept), so one call serves streams at different points of their sequences.

    **One signature.** The model calls `step(carry, x_t, state, dt=dt)` and `chunk` with
    every option but `reset` by name (`length`, `segment_ids`, `inference`, `key`,
    `carry_gradient`, `dt`); it applies `reset` to its whole carry itself and gives its
    blocks the carry to start from.
    """

    @abc.abstractmethod
    def init_carry(self) -> PyTree[Array]:
        """The recurrent state before the first position (a pytree of arrays)."""

    @abc.abstractmethod
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
        `init_carry()` instead of `carry` when `reset` is true; `state` is read, not
        updated; `dt` the position's time step (a scalar; blocks whose cores take it).
        **Returns:** `(carry, y_t)`."""

    @abc.abstractmethod
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
        """The next chunk of a stream in parallel, from `carry` (from `init_carry()` when
        `reset` is true); the first of packed `segment_ids` continues the stream, later
        ones start afresh. `inference=False` is training mode (`key` for randomness such as
        dropout); gradients do not flow into the incoming carry unless `carry_gradient`;
        `dt` the positions' time steps (blocks whose cores take them).
        **Returns:** `(carry, y)`: the carry after the last valid position (`length`, which
        may be 0: the carry is kept), and the outputs, zero at padded positions."""


def call_block(
    block: AbstractBlock,
    x: Array,
    state: eqx.nn.State,
    *,
    length: Integer[ArrayLike, ""] | None,
    segment_ids: Integer[ArrayLike, " length"] | None,
    dt: ArrayLike | None,
    key: PRNGKeyArray | None,
    inference: bool | None,
    scan_body: bool = False,
) -> tuple[Array, eqx.nn.State]:
    """The one place a model calls a block, every option by name: `block(x, state,
    length=..., segment_ids=..., dt=..., key=..., inference=...)`, or `block.scan_body`
    inside the rematerialised scan over blocks."""
    call = block.scan_body if scan_body else block
    return call(
        x, state, length=length, segment_ids=segment_ids, dt=dt, key=key, inference=inference
    )

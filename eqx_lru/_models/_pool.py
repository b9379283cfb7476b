r"""`StreamPool`: a fixed number of slots, each holding one stream of a streaming model,
that requests enter (`admit`), advance together (`step`, `chunk`) and leave (`evict`).

Slot $i$ holds a carry $c_i$ and two flags: `active` (it holds a stream) and `fresh`
(admitted and not yet run). One call advances every slot at once, as a `jax.vmap` of the
model's `step` or `chunk` over the slots, with `reset = fresh`: a newly admitted stream
starts from `init_carry()` while the others continue,

$$c_i' = \begin{cases} f(\text{init\_carry}(), x_i) & \text{fresh}_i \\
f(c_i, x_i) & \text{active}_i \\ c_i & \text{otherwise.} \end{cases}$$

The shapes never change, so one compilation serves every mix of requests.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Integer, PyTree

from .._blocks._abstract_block import AbstractStreamingBlock
from .._checks import Size, check_integer_scalar, check_size, check_token_ids, shape_and_dtype
from .._cores._dt import check_known_steps, model_dtype
from .._runtime_check import check_integers, check_range, known
from .._surface import checks_first
from ._model import LRUModel


def _check_streaming(model) -> None:
    if not callable(getattr(model, "init_carry", None)) or not callable(
        getattr(model, "step", None)
    ):
        raise TypeError(
            "`model` must stream: an eqx_lru.LRUModel of causal blocks or an "
            f"eqx_lru.AbstractStreamingBlock (with `init_carry`, `step`, `chunk`); got "
            f"{type(model).__name__}."
        )


def _select(mask: Array, new: PyTree[Array], old: PyTree[Array]) -> PyTree[Array]:
    """Per slot (leading axis): `new` where `mask`, else `old`."""

    def pick(a, b):
        return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree_util.tree_map(pick, new, old)


class StreamPool(eqx.Module):
    r"""Slots of independent streams of one streaming model (`eqx_lru.LRUModel` of causal
    blocks, or an `eqx_lru.AbstractStreamingBlock`), advanced together: a server's state
    for many users, each at their own position.

    ```python
    pool = eqx_lru.StreamPool(model, slots=8)
    pool = pool.admit(3)  # slot 3 starts a new stream at the next call
    pool, out = pool.step(model, tokens, state)  # tokens: (8,), one per slot
    pool = pool.evict(3)  # slot 3 is free again
    ```

    `step` and `chunk` are `jax.vmap`s of the model's over the slots with
    `reset=fresh`, so an admitted slot restarts from `init_carry()` (its old carry, and
    the running sum and count of mean pooling, are dropped) while the other slots
    continue; slots without a stream keep their carry and output zeros. Jit a function
    that takes and returns the pool: its shapes are fixed by the number of slots.
    """

    carry: PyTree[Array]
    active: Bool[Array, " slots"]
    fresh: Bool[Array, " slots"]

    def __init__(self, model: LRUModel | AbstractStreamingBlock, slots: Size):
        """**Arguments:**

        - `model`: the streaming model (its `init_carry()` gives each slot's carry).
        - `slots`: the number of slots, a positive int.
        """
        _check_streaming(model)
        slots = check_size("slots", slots)
        init = model.init_carry()
        self.carry = jax.tree_util.tree_map(
            lambda a: jnp.broadcast_to(jnp.asarray(a), (slots, *jnp.shape(a))), init
        )
        self.active = jnp.zeros(slots, bool)
        self.fresh = jnp.zeros(slots, bool)

    @property
    def slots(self) -> int:
        return self.active.shape[0]

    def _slot(self, slot: Integer[ArrayLike, ""]) -> Array:
        message = f"`slot` must be one integer index in [0, {self.slots})"
        check_integer_scalar(slot, message)
        return check_range(slot, 0, self.slots - 1, message + ".", check="slot")

    def admit(self, slot: Integer[ArrayLike, ""]) -> "StreamPool":
        """The pool with a new stream in `slot`: it starts from `init_carry()` at the
        next `step` or `chunk` (admitting an active slot restarts it). A `slot` outside
        `[0, slots)` is a `ValueError` when known, a run-time error under `jit`."""
        slot = self._slot(slot)
        return eqx.tree_at(
            lambda p: (p.active, p.fresh),
            self,
            (self.active.at[slot].set(True), self.fresh.at[slot].set(True)),
        )

    def evict(self, slot: Integer[ArrayLike, ""]) -> "StreamPool":
        """The pool with `slot` free: it keeps its carry and outputs zeros until admitted
        again."""
        slot = self._slot(slot)
        return eqx.tree_at(
            lambda p: (p.active, p.fresh),
            self,
            (self.active.at[slot].set(False), self.fresh.at[slot].set(False)),
        )

    def free_slot(self) -> Integer[Array, ""]:
        """The lowest free slot, or -1 when every slot holds a stream."""
        free = ~self.active
        return jnp.where(jnp.any(free), jnp.argmax(free), -1).astype(jnp.int32)

    @checks_first()
    def step(
        self,
        model: LRUModel | AbstractStreamingBlock,
        x: ArrayLike,
        state: eqx.nn.State,
        *,
        dt: ArrayLike | None = None,
    ) -> tuple["StreamPool", Array]:
        """One position of every slot: `model.step` over the slots, `reset` where a slot
        was just admitted.

        **Arguments:**

        - `model`: the model the pool was made for.
        - `x`: one position per slot, leading axis `slots` (token ids `(slots,)` or
            features `(slots, ...)`); the entries of free slots are not read.
        - `state`: the model's `eqx.nn.State`.
        - `dt`: each slot's time step (the gap since its previous position), `(slots,)`,
            or one scalar for every slot; free slots' entries are not read. `None`: none
            (models whose cores take no `dt` refuse it).

        **Returns:** `(pool, out)`: `out` per slot (zero for free slots).
        """
        _check_streaming(model)
        x = self._per_slot(x, "x")
        self._check_known_tokens(model, x, None)
        x = _select(self.active, x, jnp.zeros_like(x))  # a free slot's entry: never read
        steps = self._steps(model, dt, None, self.active)

        def one(carry, x_t, reset, dt_t):
            return model.step(carry, x_t, state, reset=reset, dt=dt_t)

        carry, out = jax.vmap(one)(self.carry, x, self.fresh, steps)
        return self._advanced(carry), _select(self.active, out, jnp.zeros_like(out))

    @checks_first()
    def chunk(
        self,
        model: LRUModel | AbstractStreamingBlock,
        x: ArrayLike,
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, " slots"] | None = None,
        dt: ArrayLike | None = None,
    ) -> tuple["StreamPool", Array]:
        """The next chunk of every slot: `model.chunk` over the slots (inference mode),
        `reset` where a slot was just admitted; free slots get `length=0`.

        **Arguments:**

        - `model`: the model the pool was made for.
        - `x`: one padded chunk per slot, leading axis `slots`.
        - `state`: the model's `eqx.nn.State`.
        - `length`: the new positions of each slot's chunk, `(slots,)` integers in
            `[0, chunk length]` (0: nothing new for that slot, its carry is kept);
            `None`: all positions of every active slot.
        - `dt`: time steps: `(slots, chunk length)` (each position's gap since the
            position before it), `(slots,)` (one step for every position of a slot's
            chunk) or a scalar; entries of free slots and of positions at or after
            `length` are not read. `None`: none.

        **Returns:** `(pool, out)`: each slot's output as the model's `chunk` returns it
        (zero for free slots and for slots with `length` 0).
        """
        _check_streaming(model)
        x = self._per_slot(x, "x")
        if x.ndim < 2:
            raise ValueError(
                f"`x` must hold one chunk per slot, shape (slots, length, ...); got {x.shape}."
            )
        size = x.shape[1]
        if length is None:
            length = jnp.full(self.slots, size, jnp.int32)
        else:
            length = self._lengths(length, size)
        length = jnp.where(self.active, length, 0)
        self._check_known_tokens(model, x, length)
        x = _select(self.active, x, jnp.zeros_like(x))
        steps = self._steps(model, dt, size, length)

        def one(carry, x, n, reset, dt):
            return model.chunk(carry, x, state, length=n, reset=reset, dt=dt)

        carry, out = jax.vmap(one)(self.carry, x, length, self.fresh, steps)
        return self._advanced(carry), out

    def _per_slot(self, given: ArrayLike, name: str) -> Array:
        x = check_integers(given, name)  # a known id beyond int32 would wrap into range
        if x.ndim == 0 or x.shape[0] != self.slots:
            raise ValueError(
                f"`{name}` must have one entry per slot, a leading axis of {self.slots}; got "
                f"shape {x.shape}."
            )
        return x

    def _check_known_tokens(self, model, x: Array, length: Array | None) -> None:
        """Known token ids of active slots (before each slot's `length` in a chunk),
        checked at once as the model's call checks them (under the `jax.vmap` over the
        slots they are traced, and checked at run time only)."""
        if not isinstance(model, LRUModel) or not isinstance(model.encoder, eqx.nn.Embedding):
            return
        values, active = known(x), known(self.active)
        limit = None if length is None else known(length)
        if values is None or active is None or (length is not None and limit is None):
            return
        read = (
            active if limit is None else active[:, None] & (np.arange(x.shape[1]) < limit[:, None])
        )
        if model.check_tokens:
            check_token_ids(np.where(read, values, 0), model.encoder.num_embeddings)

    def _lengths(self, length: ArrayLike, size: int) -> Array:
        """`length` of `chunk`: `(slots,)` integers in `[0, size]` at active slots, a
        `ValueError` when known (`model.chunk` checks traced ones at run time)."""
        shape, dtype = shape_and_dtype(length)
        if shape != (self.slots,) or not jnp.issubdtype(dtype, jnp.integer):
            raise ValueError(
                f"`length` must be {self.slots} integers, one per slot (the new positions of "
                f"its chunk); got {dtype} of shape {shape}."
            )
        values, active = known(length), known(self.active)
        if values is not None and active is not None:
            bad = ((values < 0) | (values > size)) & active
            if bad.any():
                slot = int(np.argmax(bad))
                raise ValueError(
                    f"`length` must be between 0 and the chunk length {size} at every active "
                    f"slot; got {values[slot]} (at slot {slot})."
                )
            length = np.where(active, values, 0)
        return check_integers(length, "length")

    def _steps(self, model, dt: ArrayLike | None, size: int | None, length: Array) -> Array | None:
        """`dt` with one row per slot (`(slots,)`, or `(slots, size)` for a chunk), 1 at
        free slots; checked at once when known (`check_dt`; `model` checks traced ones)."""
        if dt is None:
            return None
        shape, dtype = shape_and_dtype(dt)
        shapes = [(), (self.slots,)] + ([] if size is None else [(self.slots, size)])
        if shape not in shapes or not jnp.issubdtype(dtype, jnp.floating):
            raise ValueError(
                f"`dt` must be real floating time steps of shape "
                f"{' or '.join(map(str, shapes))} (one per slot"
                + (", or one per slot and position" if size else "")
                + f"); got {dtype} of shape {shape}."
            )
        steps = jnp.broadcast_to(jnp.asarray(dt), (self.slots,) + shape[1:])
        values, read = known(dt), known(self.active)
        if values is not None and read is not None:
            read = read.reshape((-1,) + (1,) * (len(shape) - 1))
            limit = known(length)
            if len(shape) == 2 and limit is not None:
                read = read & (np.arange(shape[1]) < limit[:, None])
            read = np.broadcast_to(read, steps.shape)
            if shape == ():  # one step for every slot: named without a slot
                values, read = values.reshape(1), read.reshape(-1)[:1] | read.any()
            values = np.where(read, np.broadcast_to(values, read.shape), np.ones((), dtype))
            where = ("slot", "position") if shape else ()
            check_known_steps(values, model_dtype(model), where=where)
        mask = self.active.reshape((-1,) + (1,) * (steps.ndim - 1))
        return jnp.where(mask, steps, jnp.ones((), steps.dtype))

    def _advanced(self, carry: PyTree[Array]) -> "StreamPool":
        """The pool after a call: the new carries of the slots with a stream, the fresh
        flags cleared."""
        carry = _select(self.active, carry, self.carry)
        return eqx.tree_at(lambda p: (p.carry, p.fresh), self, (carry, jnp.zeros_like(self.fresh)))

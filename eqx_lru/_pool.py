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
from jaxtyping import Array, ArrayLike, Bool, Integer, PyTree

from ._checks import Size, check_size


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

    def __init__(self, model: eqx.Module, slots: Size):
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
        slot = jnp.asarray(slot)
        if slot.shape != () or not jnp.issubdtype(slot.dtype, jnp.integer):
            raise ValueError(
                f"`slot` must be one integer index in [0, {self.slots}); got {slot.dtype} of "
                f"shape {slot.shape}."
            )
        return eqx.error_if(
            slot, (slot < 0) | (slot >= self.slots), f"`slot` must be in [0, {self.slots})."
        )

    def admit(self, slot: Integer[ArrayLike, ""]) -> "StreamPool":
        """The pool with a new stream in `slot`: it starts from `init_carry()` at the
        next `step` or `chunk` (admitting an active slot restarts it)."""
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

    def step(
        self, model: eqx.Module, x: ArrayLike, state: eqx.nn.State
    ) -> tuple["StreamPool", Array]:
        """One position of every slot: `model.step` over the slots, `reset` where a slot
        was just admitted.

        **Arguments:**

        - `model`: the model the pool was made for.
        - `x`: one position per slot, leading axis `slots` (token ids `(slots,)` or
            features `(slots, ...)`); the entries of free slots are not read.
        - `state`: the model's `eqx.nn.State`.

        **Returns:** `(pool, out)`: `out` per slot (zero for free slots).
        """
        _check_streaming(model)
        x = self._per_slot(x, "x")
        x = _select(self.active, x, jnp.zeros_like(x))  # a free slot's entry: never read

        def one(carry, x_t, reset):
            return model.step(carry, x_t, state, reset=reset)

        carry, out = jax.vmap(one)(self.carry, x, self.fresh)
        return self._advanced(carry), _select(self.active, out, jnp.zeros_like(out))

    def chunk(
        self,
        model: eqx.Module,
        x: ArrayLike,
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, " slots"] | None = None,
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

        **Returns:** `(pool, out)`: each slot's output as the model's `chunk` returns it
        (zero for free slots and for slots with `length` 0).
        """
        _check_streaming(model)
        x = self._per_slot(x, "x")
        if x.ndim < 2:
            raise ValueError(
                f"`x` must hold one chunk per slot, shape (slots, length, ...); got {x.shape}."
            )
        if length is None:
            length = jnp.full(self.slots, x.shape[1], jnp.int32)
        length = self._per_slot(length, "length")
        length = jnp.where(self.active, length, 0)
        x = _select(self.active, x, jnp.zeros_like(x))

        def one(carry, x, n, reset):
            return model.chunk(carry, x, state, length=n, reset=reset)

        carry, out = jax.vmap(one)(self.carry, x, length, self.fresh)
        return self._advanced(carry), out

    def _per_slot(self, x: ArrayLike, name: str) -> Array:
        x = jnp.asarray(x)
        if x.ndim == 0 or x.shape[0] != self.slots:
            raise ValueError(
                f"`{name}` must have one entry per slot, a leading axis of {self.slots}; got "
                f"shape {x.shape}."
            )
        return x

    def _advanced(self, carry: PyTree[Array]) -> "StreamPool":
        """The pool after a call: the new carries of the slots with a stream, the fresh
        flags cleared."""
        carry = _select(self.active, carry, self.carry)
        return eqx.tree_at(lambda p: (p.carry, p.fresh), self, (carry, jnp.zeros_like(self.fresh)))

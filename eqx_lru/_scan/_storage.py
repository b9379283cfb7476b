"""How the scan stores its length-long arrays, versus the states the algebra computes with.

Internal: the layers use it to keep complex states as real pairs (no conversion pass over
the whole sequence) or low-precision states with a float32 carry.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array


class AbstractStorage(eqx.Module):
    """How the scan stores states: `load` and `store` are mutually inverse linear maps (up to
    rounding) between the stored form and the algebra's form, acting on arrays with a
    leading length (or block) axis. `load_cotangent`/`store_cotangent` are their transposes
    (`store`'s and `load`'s), and `cotangent()` is the storage whose `load`/`store` are
    those transposes, i.e. how the backward pass stores the cotangents of the states.

    Implementations (final): `Identity`, `ComplexPairs`, `Cast`.
    """

    @abc.abstractmethod
    def load(self, x: Array) -> Array:
        """Stored form → the algebra's form."""

    @abc.abstractmethod
    def store(self, h: Array) -> Array:
        """The algebra's form → stored form."""

    def load_cotangent(self, g: Array) -> Array:
        return self.cotangent().load(g)

    def store_cotangent(self, ct: Array) -> Array:
        return self.cotangent().store(ct)

    def cotangent(self) -> "AbstractStorage":
        """The storage of the adjoint recurrence (itself for storages that are their own
        transpose)."""
        return self


class Identity(AbstractStorage):
    """The stored arrays are the states."""

    def load(self, x: Array) -> Array:
        return x

    def store(self, h: Array) -> Array:
        return h


class ComplexPairs(AbstractStorage):
    """Complex states stored as real pairs: a stored array `(length, 2, *state_shape)` holds
    the real parts in `[:, 0]` and the imaginary parts in `[:, 1]` (planar, the layout of
    `RotationScaling` states).

    `conjugate=True` stores `(Re h, -Im h)` instead: the transposes of the plain maps in
    JAX's convention (of `complex(x, y)`, ct ↦ (Re ct, -Im ct); of `(Re h, Im h)`,
    (g_re, g_im) ↦ g_re - i g_im), i.e. the storage of the cotangents.
    """

    conjugate: bool = eqx.field(default=False, static=True)

    def load(self, x: Array) -> Array:
        return jax.lax.complex(x[:, 0], -x[:, 1] if self.conjugate else x[:, 1])

    def store(self, h: Array) -> Array:
        return jnp.stack([h.real, -h.imag if self.conjugate else h.imag], axis=1)

    def cotangent(self) -> AbstractStorage:
        return ComplexPairs(conjugate=not self.conjugate)


class Cast(AbstractStorage):
    """States computed (and carried from step to step) in `compute`, stored in `stored`,
    e.g. a float32 recurrence over bfloat16 inputs and outputs.

    Both maps round to `stored` explicitly (`jax.lax.reduce_precision`): XLA on GPUs
    removes float32 → bfloat16 → float32 cast pairs when `xla_allow_excess_precision` is on
    (its default), so without it a value could reach the recurrence rounded in one program
    (the parallel call, where it passes through memory) and unrounded in another (`step`,
    where the casts fuse). With it, what is loaded is a `stored` value on every backend.
    """

    compute: str = eqx.field(static=True)
    stored: str = eqx.field(static=True)

    def load(self, x: Array) -> Array:
        return round_to(x.astype(self.compute), self.stored)

    def store(self, h: Array) -> Array:
        return round_to(h, self.stored).astype(self.stored)


def round_to(x: Array, dtype) -> Array:
    """`x` rounded to the precision of the floating `dtype`, in `x`'s own dtype: an explicit
    rounding that XLA's excess-precision optimisation keeps (a plain cast round trip may be
    removed inside a fusion on GPUs)."""
    info = jnp.finfo(dtype)
    if jnp.finfo(x.dtype).bits <= info.bits:
        return x
    return jax.lax.reduce_precision(x, exponent_bits=info.nexp, mantissa_bits=info.nmant)

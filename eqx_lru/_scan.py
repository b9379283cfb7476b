r"""The generic linear-recurrence scan.

Computes, over the leading (length) axis,

$$h_k = a_k \otimes h_{k-1} + b_k, \qquad h_{-1} = h_\text{init} \ (\text{default } 0),$$

where $\otimes$ is the action of an *algebra* of transitions on states. The pairs
$(a, b)$ form a monoid under

$$(a_j, b_j) \bullet (a_i, b_i) = (a_j \circ a_i,\ a_j \otimes b_i + b_j)$$

("first $i$, then $j$"), which is what `jax.lax.associative_scan` needs. The composition
order matters for non-commuting algebras such as `Block2x2`.
"""

import abc
from collections.abc import Callable
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Inexact, jaxtyped

ScanMethod = Literal["auto", "associative", "sequential"]
_METHODS = ("auto", "associative", "sequential")


class AbstractAlgebra(eqx.Module):
    """How transitions compose and act on states.

    A new algebra is one small subclass: the shape of a transition for a given state
    shape, how two transitions compose, and how a transition acts on a state.
    """

    @abc.abstractmethod
    def transition_shape(self, state_shape: tuple[int, ...]) -> tuple[int, ...]:
        """Shape of one transition acting on one state of shape `state_shape`."""

    @abc.abstractmethod
    def compose(self, later: Array, earlier: Array) -> Array:
        """The transition `later ∘ earlier` (apply `earlier` first)."""

    @abc.abstractmethod
    def apply(self, a: Array, h: Array) -> Array:
        """The state `a ⊗ h`."""

    def check_state_shape(self, state_shape: tuple[int, ...]) -> None:
        """Raise a `ValueError` if states of this shape are not valid for the algebra."""


class Diagonal(AbstractAlgebra):
    r"""Elementwise transitions: $a \otimes h = a \odot h$, with `a.shape == h.shape`.

    Works for real and complex dtypes (complex diagonal LRU, paper §3.2).
    """

    def transition_shape(self, state_shape: tuple[int, ...]) -> tuple[int, ...]:
        return state_shape

    def compose(self, later: Array, earlier: Array) -> Array:
        return later * earlier

    def apply(self, a: Array, h: Array) -> Array:
        return a * h


class Block2x2(AbstractAlgebra):
    r"""General real 2×2 blocks: `a[..., 2, 2]` acts on `h[..., 2]` by matrix-vector product.

    $(a \otimes h)_i = \sum_j a_{ij} h_j$; composition is the matrix product
    `later @ earlier`, which does not commute in general. With the rotation-scaling
    blocks $|\lambda| R(\theta)$ this is the real Jordan form of a complex diagonal
    recurrence (paper §E.3).
    """

    def transition_shape(self, state_shape: tuple[int, ...]) -> tuple[int, ...]:
        return state_shape + (2,)

    def compose(self, later: Array, earlier: Array) -> Array:
        # Written out rather than as a batched matmul: four multiply-adds per entry
        # vectorise well on every backend and never dispatch a tiny matmul.
        l00, l01, l10, l11 = _entries(later)
        e00, e01, e10, e11 = _entries(earlier)
        row0 = jnp.stack([l00 * e00 + l01 * e10, l00 * e01 + l01 * e11], axis=-1)
        row1 = jnp.stack([l10 * e00 + l11 * e10, l10 * e01 + l11 * e11], axis=-1)
        return jnp.stack([row0, row1], axis=-2)

    def apply(self, a: Array, h: Array) -> Array:
        a00, a01, a10, a11 = _entries(a)
        h0, h1 = h[..., 0], h[..., 1]
        return jnp.stack([a00 * h0 + a01 * h1, a10 * h0 + a11 * h1], axis=-1)

    def check_state_shape(self, state_shape: tuple[int, ...]) -> None:
        if len(state_shape) == 0 or state_shape[-1] != 2:
            raise ValueError(
                "Block2x2 states must end in an axis of size 2 (the pair (h_0, h_1) a 2x2 "
                f"block acts on), so `b` must have shape (length, ..., 2); got a state shape "
                f"{state_shape}."
            )


def _entries(a: Array) -> tuple[Array, Array, Array, Array]:
    return a[..., 0, 0], a[..., 0, 1], a[..., 1, 0], a[..., 1, 1]


def default_method() -> Literal["associative", "sequential"]:
    """The scan method `"auto"` resolves to on the default backend.

    The sequential `lax.scan` is fastest on CPU for forward and backward (see
    `experiments/bench/`); on accelerators the work-efficient parallel scan wins.
    """
    return "sequential" if jax.default_backend() == "cpu" else "associative"


def _scan_sequential(
    algebra: AbstractAlgebra, a: Array, b: Array, shared: bool
) -> Array:
    def step(h, ab):
        a_k, b_k = (a, ab) if shared else ab
        h = algebra.apply(a_k, h) + b_k
        return h, h

    xs = b if shared else (a, b)
    _, hs = jax.lax.scan(step, jnp.zeros_like(b[0]), xs)
    return hs


def _scan_associative(
    algebra: AbstractAlgebra, a: Array, b: Array, shared: bool
) -> Array:
    if shared:
        a = jnp.broadcast_to(a, (b.shape[0],) + a.shape)

    def combine(earlier, later):
        a_i, b_i = earlier
        a_j, b_j = later
        return algebra.compose(a_j, a_i), algebra.apply(a_j, b_i) + b_j

    _, hs = jax.lax.associative_scan(combine, (a, b))
    return hs


_SCANS: dict[str, Callable[[AbstractAlgebra, Array, Array, bool], Array]] = {
    "associative": _scan_associative,
    "sequential": _scan_sequential,
}


@jaxtyped(typechecker=beartype)
def linear_recurrence(
    a: Inexact[Array, "..."],
    b: Inexact[Array, "length ..."],
    *,
    algebra: AbstractAlgebra,
    initial_state: Inexact[Array, "..."] | None = None,
    reverse: bool = False,
    method: ScanMethod = "auto",
) -> Inexact[Array, "length ..."]:
    r"""All states of the linear recurrence $h_k = a_k \otimes h_{k-1} + b_k$.

    **Arguments:**

    - `a`: the transitions. Either one transition shared by every step, of shape
        `algebra.transition_shape(b.shape[1:])`, or one per step, with an extra
        leading length axis. Never broadcast otherwise.
    - `b`: the inputs, shape `(length, *state_shape)`.
    - `algebra`: `Diagonal()` or `Block2x2()` (or any `AbstractAlgebra`).
    - `initial_state`: $h_{-1}$, shape `state_shape`; zeros if `None`.
    - `reverse`: run from the end: $h_k = a_k \otimes h_{k+1} + b_k$ with
        $h_\text{length} = $ `initial_state`.
    - `method`: `"sequential"` (`jax.lax.scan`), `"associative"`
        (`jax.lax.associative_scan`, $O(\log L)$ depth), or `"auto"` (sequential on CPU,
        associative on accelerators; see `default_method`). All are exact and
        differentiable.

    **Returns:**

    All states $h_0, \dots, h_{L-1}$, shape `b.shape`.
    """
    if method not in _METHODS:
        raise ValueError(f"`method` must be one of {_METHODS}, got {method!r}.")
    if b.ndim < 1 or b.shape[0] == 0:
        raise ValueError(
            f"`b` must have a non-empty leading length axis; got shape {b.shape}."
        )
    state_shape = b.shape[1:]
    algebra.check_state_shape(state_shape)
    transition = algebra.transition_shape(state_shape)
    if a.shape == transition:
        shared = True
    elif a.shape == (b.shape[0],) + transition:
        shared = False
    else:
        raise ValueError(
            f"`a` must have shape {transition} (one transition shared by all steps) or "
            f"{(b.shape[0],) + transition} (one per step) for `b` of shape {b.shape} "
            f"under {type(algebra).__name__}; got {a.shape}."
        )
    if a.dtype != b.dtype:
        raise ValueError(
            f"`a` and `b` must have the same dtype; got a: {a.dtype}, b: {b.dtype}. "
            "Cast one of them explicitly."
        )
    if initial_state is not None:
        if initial_state.shape != state_shape:
            raise ValueError(
                f"`initial_state` must have the state shape {state_shape} (= b.shape[1:]); "
                f"got {initial_state.shape}."
            )
        if initial_state.dtype != b.dtype:
            raise ValueError(
                f"`initial_state` must have dtype {b.dtype} like `b`; got "
                f"{initial_state.dtype}."
            )
    if method == "auto":
        method = default_method()

    if reverse:
        b = jnp.flip(b, axis=0)
        if not shared:
            a = jnp.flip(a, axis=0)
    if initial_state is not None:
        # Fold h_{-1} into the first input: h_0 = a_0 ⊗ h_{-1} + b_0.
        a_first = a if shared else a[0]
        b = b.at[0].add(algebra.apply(a_first, initial_state))
    hs = _SCANS[method](algebra, a, b, shared)
    return jnp.flip(hs, axis=0) if reverse else hs

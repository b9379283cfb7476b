r"""The residual block of the deep LRU (paper Fig. 1, §D.1) and its recurrent-core knob.

$$y = x + \operatorname{Dropout}\big(\operatorname{GLU}(\operatorname{GELU}(
\operatorname{Rec}(\operatorname{Norm}(x))))\big)$$

applied to one sequence `x` of shape `(length, d_model)`. Padded positions (those at or
after `length`) are masked so they never change an output at a valid position.
"""

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from beartype import beartype
from jaxtyping import Array, ArrayLike, Float, Integer, PRNGKeyArray, jaxtyped

from ._glu import GLU
from ._init import Size, check_key, check_size
from ._lru import AbstractLRU, ComplexLRU, RealLRU
from ._norm import MaskedBatchNorm
from ._padding import check_length, valid_mask, where_valid

#: `make_core(d_model, d_state, *, key) -> core`, where
#: `core(u: Float[Array, "length d_model"], *, reverse: bool = False)` has the same shape.
CoreFactory = Callable[..., eqx.Module]
Core = Literal["complex", "real"] | CoreFactory

#: The name (`jax.ad_checkpoint.checkpoint_name`) of a bidirectional block's summed
#: recurrence output under remat, which `LRUModel(remat=True)` saves.
RECURRENCE = "eqx_lru_recurrence"

_SHORTCUTS: dict[str, type[AbstractLRU]] = {"complex": ComplexLRU, "real": RealLRU}


def core_factory(core: Core, dtype=None) -> CoreFactory:
    """The factory `make_core(d_model, d_state, *, key)` that `core=` stands for:
    `"complex"`/`"real"` build `ComplexLRU`/`RealLRU` with their defaults and `dtype`; a
    callable is used as is."""
    if isinstance(core, str):
        if core not in _SHORTCUTS:
            raise ValueError(
                "`core` must be 'complex', 'real' or a callable "
                f"`make_core(d_model, d_state, *, key)`; got {core!r}."
            )
        return functools.partial(_SHORTCUTS[core], dtype=dtype)
    if not callable(core):
        raise TypeError(
            "`core` must be 'complex', 'real' or a callable `make_core(d_model, d_state, *, "
            f"key)` returning a recurrent core; got {type(core).__name__}."
        )
    return core


def _make_core(make_core: CoreFactory, d_model: int, d_state: int, key: PRNGKeyArray):
    core = make_core(d_model, d_state, key=key)
    if not isinstance(core, eqx.Module):
        raise TypeError(f"`core` must build an `eqx.Module`; got {type(core).__name__}.")
    if not isinstance(core, AbstractLRU):
        # Check the contract once, at trace cost only.
        u = jax.ShapeDtypeStruct((3, d_model), jnp.zeros((), _core_dtype(core)).dtype)
        for reverse in (False, True):
            out = eqx.filter_eval_shape(lambda c, u: c(u, reverse=reverse), core, u)
            if getattr(out, "shape", None) != (3, d_model) or out.dtype != u.dtype:
                raise ValueError(
                    "A recurrent core must map `u` of shape (length, d_model) to the same "
                    f"shape and dtype (core(u, *, reverse=False)); {type(core).__name__} "
                    f"mapped {u.shape} {u.dtype} to {out}."
                )
    return core


def _core_dtype(core: eqx.Module):
    """The floating dtype of the first floating array in `core` (default float if none)."""
    for leaf in jax.tree_util.tree_leaves(core):
        if eqx.is_inexact_array(leaf) and jnp.issubdtype(leaf.dtype, jnp.floating):
            return leaf.dtype
    return None


class LRUBlock(eqx.Module):
    r"""The pre-norm residual block of the deep LRU (paper Fig. 1, §D.1):

    $$y = x + \operatorname{Dropout}\big(\operatorname{GLU}(\operatorname{GELU}(
    \operatorname{Rec}(\operatorname{Norm}(x))))\big).$$

    `Rec` is one recurrent core, or with `bidirectional=True` a forward and a reverse
    core whose outputs are **summed**,
    $\operatorname{Rec}(z) = \overrightarrow{\text{core}}(z) + \overleftarrow{\text{core}}(z)$.
    For the LRU this is $C_f x^{\rightarrow} + C_b x^{\leftarrow} + (D_f + D_b) u$: the
    same function class as S5's bidirectional layer (one output map on the concatenated
    states), and S4's summed kernels, with no extra parameters or width; it keeps the
    core contract one call per direction, so any core works bidirectionally.

    **Padding.** With `length=ℓ`, positions `t >= ℓ` are padding and never change the
    output at a valid position: the input is zeroed there, batch-norm statistics skip them
    (`MaskedBatchNorm`), and the recurrence input is zeroed there, so a reverse scan that
    starts at the padded end carries an exactly-zero state until it reaches `ℓ - 1`. The
    output is zero at padded positions.

    **Recurrent cores.** `core=` is the one knob of the recurrence: `"complex"`,
    `"real"`, or a callable `make_core(d_model, d_state, *, key)` returning any
    `eqx.Module` called as `core(u: Float[Array, "length d_model"], *, reverse=False)` and
    returning `Float[Array, "length d_model"]` — e.g.
    `functools.partial(eqx_lru.RealLRU, r_min=0.9, method="associative")`: the ring,
    scan method, precision and storage dtype are options of the core. For the padding
    guarantee a core must be causal in its direction (a forward core's output at `t`
    depends on `u[:t+1]` only, a reverse core's on `u[t:]`) and keep a zero state on zero
    input (any linear recurrence without bias does; so do $\tanh$/ReLU RNNs without bias).
    A core opts in to the optimiser's recurrent group with a class attribute
    `recurrent_fields` (see `lru_param_labels`). `eqx_lru.to_real` / `eqx_lru.to_complex`
    convert the LRU cores of a block (or any pytree) between forms.
    """

    norm: MaskedBatchNorm | eqx.nn.LayerNorm
    core: eqx.Module
    reverse_core: eqx.Module | None
    glu: GLU
    dropout: eqx.nn.Dropout
    remat: bool = eqx.field(static=True)

    def __init__(
        self,
        d_model: Size,
        d_state: Size,
        *,
        core: Core = "complex",
        norm: Literal["batch", "layer"] = "batch",
        bidirectional: bool = False,
        dropout: float = 0.0,
        glu: Literal["full", "half"] = "full",
        remat: bool = False,
        axis_name: Hashable | Sequence[Hashable] = "batch",
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `d_model`: $H$, the features of the residual stream.
        - `d_state`: $N$, the state size passed to the core (LRU: complex modes).
        - `core`: `"complex"` (`ComplexLRU`), `"real"` (`RealLRU`; same parameters, same
            function, real arithmetic only) — both with their default options and `dtype` —
            or a callable `make_core(d_model, d_state, *, key)` (see above).
        - `norm`: `"batch"` (`MaskedBatchNorm`, what the paper used) or `"layer"`
            (`eqx.nn.LayerNorm`, per position; no batch axis needed). With layer norm the
            block still takes and returns a state, unchanged, so model code is uniform.
        - `bidirectional`: add a reverse core (own parameters) and sum the two outputs.
        - `dropout`: dropout rate after the GLU (active in training mode only).
        - `glu`: `"full"` or `"half"` (see `GLU`).
        - `remat`: recompute the block's forward pass in the backward pass
            (`eqx.filter_checkpoint`) instead of storing its intermediates: the same values
            and gradients (bidirectional: the backward pass recomputes and differentiates
            one direction after the other). XLA may schedule the recomputation early
            (compiled for the CPU it saves little: 184 → 147 MB of temp for a depth-6
            bidirectional model); for a stack of blocks use `LRUModel(remat=True)`, which
            scans over the blocks and does bound the memory (53 MB there).
        - `axis_name`: the `jax.vmap` axis name batch norm reduces over in training.
        - `dtype`: parameter dtype (default: JAX's default float). Not passed to a
            callable `core`.
        - `key`: a `jax.random.PRNGKey`. The same key gives the same parameters for
            `core="complex"` and `core="real"`.
        """
        d_model, d_state = check_size("d_model", d_model), check_size("d_state", d_state)
        check_key(key)
        if not 0 <= dropout < 1:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout}.")
        make_core = core_factory(core, dtype)
        core_key, reverse_key, glu_key = jax.random.split(key, 3)
        if norm == "batch":
            self.norm = MaskedBatchNorm(d_model, axis_name, dtype=dtype)
        elif norm == "layer":
            self.norm = eqx.nn.LayerNorm(d_model, dtype=dtype)
        else:
            raise ValueError(f"`norm` must be 'batch' or 'layer', got {norm!r}.")
        self.core = _make_core(make_core, d_model, d_state, core_key)
        self.reverse_core = (
            _make_core(make_core, d_model, d_state, reverse_key) if bidirectional else None
        )
        self.glu = GLU(d_model, glu, dtype, key=glu_key)
        self.dropout = eqx.nn.Dropout(dropout)
        self.remat = remat

    @property
    def bidirectional(self) -> bool:
        return self.reverse_core is not None

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        x: Float[ArrayLike, "length d_model"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, ""] | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "length d_model"], eqx.nn.State]:
        """Run the block on one sequence; batch with `jax.vmap(..., axis_name=...)`.

        **Arguments:**

        - `x`: shape `(length, d_model)`, `length >= 1` (a JAX or NumPy array).
        - `state`: the `eqx.nn.State` from `eqx.nn.make_with_state(LRUBlock)(...)`.
        - `length`: number of valid leading positions, a scalar of any integer dtype, (the
            rest is padding, with any content); `None` means all valid.
        - `key`: for dropout; needed in training mode when `dropout > 0`.
        - `inference`: overrides the `inference` flags of the norm and dropout (as set by
            `eqx.nn.inference_mode`) if not `None`. Inference mode: batch norm uses running
            statistics and leaves the state unchanged; no dropout.

        **Returns:** `(y, new_state)`, `y` of shape `(length, d_model)`, zero at padded
        positions.
        """
        x = jnp.asarray(x)
        check_length(x, "x")
        remat = self.remat
        return self._apply(x, state, length, key, inference, remat=remat, checkpoint=remat)

    def _apply(self, x, state, length, key, inference, *, remat: bool, checkpoint: bool):
        """`__call__` without its checks. `remat`: a bidirectional block's backward pass
        recomputes each direction just before its own backward pass, one direction after
        the other (`_both_directions`); `checkpoint`: the whole forward pass is
        recomputed in the backward pass. `LRUModel(remat=True)` calls this inside its own
        rematerialised scan body with `remat=True, checkpoint=False`."""
        mask = valid_mask(length, x.shape[0])
        forward = eqx.filter_checkpoint(_forward) if checkpoint else _forward
        return forward(self, x, state, mask, key, inference, sequential=remat)


def _forward(block: LRUBlock, x, state, mask, key, inference, *, sequential: bool = False):
    """The block's formula (Fig. 1) on one sequence with a validity `mask` (or `None`)."""
    x = where_valid(mask, x)
    if isinstance(block.norm, MaskedBatchNorm):
        z, state = block.norm(x, state, mask=mask, inference=inference)
    else:
        z = jax.vmap(block.norm)(x)
    # Zero pads before the recurrence: the norm's shift makes them non-zero, and a
    # reverse scan starting at the padded end would carry them into valid positions.
    z = where_valid(mask, z)
    if block.reverse_core is None:
        h = block.core(z)
    elif sequential:
        h = checkpoint_name(_both_directions((block.core, block.reverse_core, z)), RECURRENCE)
    else:
        h = block.core(z) + block.reverse_core(z, reverse=True)
    h = jax.vmap(block.glu)(jax.nn.gelu(h))
    h = block.dropout(h, key=key, inference=inference)
    return where_valid(mask, x + h), state


@eqx.filter_custom_vjp
def _both_directions(cores_and_input):
    r"""$\overrightarrow{\text{core}}(z) + \overleftarrow{\text{core}}(z)$, whose
    backward pass runs one direction after the other: it keeps only the cores and $z$,
    and recomputes each direction's forward pass just before that direction's backward
    pass, so one direction's states (and their adjoints) are live at a time."""
    return _sum_of_directions(cores_and_input)


def _sum_of_directions(cores_and_input):
    core, reverse_core, z = cores_and_input
    return core(z) + reverse_core(z, reverse=True)


@_both_directions.def_fwd
def _both_directions_fwd(perturbed, cores_and_input):
    del perturbed
    return _sum_of_directions(cores_and_input), None  # no residuals but the inputs


@_both_directions.def_bwd
def _both_directions_bwd(residuals, grad, perturbed, cores_and_input):
    del residuals, perturbed
    core, reverse_core, z = cores_and_input
    _, vjp = eqx.filter_vjp(lambda c, z: c(z), core, z)
    d_core, dz = vjp(grad)
    # The reverse direction may start only once the forward direction's gradients exist:
    # a data dependency (`+ 0 * dz[0, 0]`, exact for finite gradients) that XLA keeps on
    # every backend, where the CPU compiler drops `lax.optimization_barrier`. Both the
    # reverse core's input and its cotangent depend on it, or XLA computes the reverse
    # output projection's transpose (a state-sized buffer) early.
    zero = jnp.zeros((), z.dtype) * dz[0, 0]
    z, grad = z + zero, grad + zero.astype(grad.dtype)
    _, vjp = eqx.filter_vjp(lambda c, z: c(z, reverse=True), reverse_core, z)
    d_reverse, dz_reverse = vjp(grad)
    return d_core, d_reverse, dz + dz_reverse

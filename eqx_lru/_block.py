r"""The residual block of the deep LRU (paper Fig. 1, §D.1) and its recurrent-core knob.

$$y = x + \operatorname{Dropout}\big(\operatorname{GLU}(\operatorname{GELU}(
\operatorname{Rec}(\operatorname{Norm}(x))))\big)$$

applied to one sequence `x` of shape `(length, d_model)`. Padded positions (those at or
after `length`) are masked so they never change an output at a valid position.
"""

import inspect
from collections.abc import Callable, Hashable, Sequence
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jax.ad_checkpoint import checkpoint_name
from jaxtyping import Array, ArrayLike, Float, Integer, PRNGKeyArray, jaxtyped

from ._checks import Size, check_key, check_size
from ._core import AbstractRecurrentCore
from ._glu import GLU
from ._lru import ComplexLRU, RealLRU
from ._norm import MaskedBatchNorm
from ._padding import check_length, valid_mask, where_valid

#: `make_core(d_model, d_state, *, key)` (and `dtype=` when the block has one) returning an
#: `eqx_lru.AbstractRecurrentCore`.
CoreFactory = Callable[..., AbstractRecurrentCore]
Core = Literal["complex", "real"] | CoreFactory

#: The name (`jax.ad_checkpoint.checkpoint_name`) of a bidirectional block's summed
#: recurrence output in `LRUBlock.scan_body`, which `LRUModel(remat=True)` saves.
RECURRENCE = "eqx_lru_recurrence"

_SHORTCUTS: dict[str, CoreFactory] = {"complex": ComplexLRU, "real": RealLRU}


def core_factory(core: Core) -> CoreFactory:
    """The factory `make_core(d_model, d_state, *, key)` that `core=` stands for:
    `"complex"`/`"real"` give `ComplexLRU`/`RealLRU`; a callable is used as is."""
    if isinstance(core, str):
        if core not in _SHORTCUTS:
            raise ValueError(
                "`core` must be 'complex', 'real' or a callable "
                f"`make_core(d_model, d_state, *, key)`; got {core!r}."
            )
        return _SHORTCUTS[core]
    if not callable(core):
        raise TypeError(
            "`core` must be 'complex', 'real' or a callable `make_core(d_model, d_state, *, "
            f"key)` returning an eqx_lru.AbstractRecurrentCore; got {type(core).__name__}."
        )
    return core


def _takes_dtype(make_core: CoreFactory) -> bool:
    """Whether `make_core` accepts a `dtype=` keyword (`True` when its signature is
    unknown)."""
    try:
        parameters = inspect.signature(make_core).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.name == "dtype" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
    )


def build_core(
    core: Core, d_model: int, d_state: int, *, dtype=None, key: PRNGKeyArray
) -> AbstractRecurrentCore:
    """The core that `core=` builds: `make_core(d_model, d_state, key=key)`, with
    `dtype=dtype` when `dtype` is not `None`; a `TypeError` unless it is an
    `eqx_lru.AbstractRecurrentCore`."""
    factory = core_factory(core)
    options = {}
    if dtype is not None:
        if not _takes_dtype(factory):
            raise TypeError(
                f"`core` ({getattr(factory, '__name__', factory)!r}) takes no `dtype=`, but "
                f"the block's `dtype` is {dtype!r}: the block passes its dtype to the core. "
                "Accept `dtype=` in the factory, or leave the block's `dtype` as None."
            )
        options["dtype"] = dtype
    built = factory(d_model, d_state, key=key, **options)
    if not isinstance(built, AbstractRecurrentCore):
        raise TypeError(
            f"`core` must build an eqx_lru.AbstractRecurrentCore; got "
            f"{type(built).__name__}. Subclass eqx_lru.AbstractRecurrentCore (implement "
            "`init_state`, `step`, `run` and declare `recurrent_fields`) — see its docstring."
        )
    return built


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
    `"real"`, or a callable `make_core(d_model, d_state, *, key)` returning an
    `eqx_lru.AbstractRecurrentCore` (the LRU forms, `eqx_lru.ablation`'s and
    `eqx_lru.baselines`' cores, or your own subclass) — e.g.
    `functools.partial(eqx_lru.RealLRU, r_min=0.9, method="associative")`: the ring,
    scan method, precision and storage dtype are options of the core. The block relies on
    the contract only: it calls `core(u)` and `core(u, reverse=True)`; for the padding
    guarantee the core must be `causal` (see `AbstractRecurrentCore`), and its
    `recurrent_fields` give the optimiser's recurrent group (see `lru_param_labels`).
    `eqx_lru.to_real` / `eqx_lru.to_complex` convert the cores of a block (or any pytree)
    between forms.

    **Remat.** `remat=True` checkpoints the whole block (`__call__`). An enclosing
    rematerialised scan over blocks (`LRUModel(remat=True)`) calls `scan_body` instead.
    """

    norm: MaskedBatchNorm | eqx.nn.LayerNorm
    core: AbstractRecurrentCore
    reverse_core: AbstractRecurrentCore | None
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
            function, real arithmetic only) — both with their default options — or a
            callable `make_core(d_model, d_state, *, key)` returning an
            `eqx_lru.AbstractRecurrentCore` (see above).
        - `norm`: `"batch"` (`MaskedBatchNorm`, what the paper used) or `"layer"`
            (`eqx.nn.LayerNorm`, per position; no batch axis needed). With layer norm the
            block still takes and returns a state, unchanged, so model code is uniform.
        - `bidirectional`: add a reverse core (own parameters) and sum the two outputs.
        - `dropout`: dropout rate after the GLU (active in training mode only).
        - `glu`: `"full"` or `"half"` (see `GLU`).
        - `remat`: recompute the block's forward pass in the backward pass
            (`eqx.filter_checkpoint`) instead of storing its intermediates: the same values
            and gradients (bidirectional: the backward pass recomputes and differentiates
            one direction after the other). XLA may schedule the recomputation early, so
            for one block it may save little; for a stack of blocks use
            `LRUModel(remat=True)`, which scans over the blocks and does bound the memory
            (measured on the documentation's performance page).
        - `axis_name`: the `jax.vmap` axis name batch norm reduces over in training.
        - `dtype`: parameter dtype of the norm, the GLU and the cores (default: JAX's
            default float). When not `None` it is passed to the core factory as
            `make_core(d_model, d_state, dtype=dtype, key=key)` (a `TypeError` if the
            factory takes no `dtype`), so `LRUModel(dtype=...)` reaches every core:
            the LRU's, S4D's, S5's, the ablation cores'.
        - `key`: a `jax.random.PRNGKey`. The same key gives the same parameters for
            `core="complex"` and `core="real"`.
        """
        d_model, d_state = check_size("d_model", d_model), check_size("d_state", d_state)
        check_key(key)
        if not 0 <= dropout < 1:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout}.")
        core_factory(core)  # check `core` before building anything
        core_key, reverse_key, glu_key = jax.random.split(key, 3)
        if norm == "batch":
            self.norm = MaskedBatchNorm(d_model, axis_name, dtype=dtype)
        elif norm == "layer":
            self.norm = eqx.nn.LayerNorm(d_model, dtype=dtype)
        else:
            raise ValueError(f"`norm` must be 'batch' or 'layer', got {norm!r}.")
        self.core = build_core(core, d_model, d_state, dtype=dtype, key=core_key)
        self.reverse_core = (
            build_core(core, d_model, d_state, dtype=dtype, key=reverse_key)
            if bidirectional
            else None
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
        mask = valid_mask(length, x.shape[0])
        forward = eqx.filter_checkpoint(_forward) if self.remat else _forward
        return forward(self, x, state, mask, key, inference, sequential=self.remat)

    @jaxtyped(typechecker=beartype)
    def scan_body(
        self,
        x: Float[ArrayLike, "length d_model"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, ""] | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "length d_model"], eqx.nn.State]:
        """The block as the body of an enclosing rematerialised scan over blocks — what
        `LRUModel(remat=True)` runs. The same values and gradients as `__call__`, for
        a caller that checkpoints the body itself (with
        `jax.checkpoint_policies.save_only_these_names(RECURRENCE)`):

        - no checkpoint of the block's own, whatever its `remat` (a nested one would hide
            the saved output from the enclosing policy);
        - a bidirectional block's summed recurrence output is named
            `eqx_lru._block.RECURRENCE` (`jax.ad_checkpoint.checkpoint_name`), so the
            enclosing policy can keep it and the recomputation reruns no scan;
        - a bidirectional block's backward pass recomputes and differentiates one
            direction after the other, so one direction's states are live at a time.

        Same arguments and returns as `__call__`.
        """
        x = jnp.asarray(x)
        check_length(x, "x")
        mask = valid_mask(length, x.shape[0])
        return _forward(self, x, state, mask, key, inference, sequential=True)


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

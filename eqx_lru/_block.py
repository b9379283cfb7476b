r"""The residual block of the deep LRU (paper Fig. 1, §D.1) and its pieces.

$$y = x + \operatorname{Dropout}\big(\operatorname{GLU}(\operatorname{GELU}(
\operatorname{Rec}(\operatorname{Norm}(x))))\big)$$

applied to one sequence `x` of shape `(length, d_model)`. Padded positions (those at or
after `length`) are masked so they never change an output at a valid position.
"""

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, PyTree, jaxtyped

from ._init import check_size
from ._lru import AbstractLRU, ComplexLRU, RealLRU

#: `make_core(d_model, d_state, *, key) -> core`, where
#: `core(u: Float[Array, "length d_model"], *, reverse: bool = False)` has the same shape.
CoreFactory = Callable[..., eqx.Module]
Form = Literal["complex", "real"]

_FORMS: dict[str, type[AbstractLRU]] = {"complex": ComplexLRU, "real": RealLRU}


# --- padding ------------------------------------------------------------------------------


def valid_mask(length: Int[ArrayLike, ""] | None, size: int) -> Bool[Array, " size"] | None:
    """`arange(size) < length`, or `None` when `length` is `None` (every position valid).

    Inside `jit` a `length` outside `[1, size]` raises at run time via `eqx.error_if`.
    """
    if length is None:
        return None
    length = jnp.asarray(length)
    if not jnp.issubdtype(length.dtype, jnp.integer) or length.shape != ():
        raise ValueError(
            "`length` must be a scalar integer (the number of valid leading positions of "
            f"one sequence; batch it with `jax.vmap`); got dtype {length.dtype}, shape "
            f"{length.shape}."
        )
    length = eqx.error_if(
        length,
        (length < 1) | (length > size),
        f"`length` must be between 1 and the padded length {size}.",
    )
    return jnp.arange(size) < length


def _where_valid(mask: Bool[Array, " length"] | None, x: Array) -> Array:
    """`x` with the padded positions (leading axis) set to zero; `x` itself if no mask.

    A select, not a product: garbage such as `nan` in the pads cannot leak into values or
    gradients.
    """
    if mask is None:
        return x
    return jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, 0)


# --- normalisation -------------------------------------------------------------------------


class MaskedBatchNorm(eqx.Module):
    r"""Batch normalisation of sequences, with statistics over the batch *and* the valid
    positions only.

    Per channel, in training mode,

    $$\mu = \frac{\sum_{b}\sum_{t < \ell_b} x_{bt}}{\sum_b \ell_b},\qquad
    \sigma^2 = \frac{\sum_{b}\sum_{t < \ell_b} (x_{bt} - \mu)^2}{\sum_b \ell_b},\qquad
    y = \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}}\, w + \beta,$$

    where $\ell_b$ is the valid length of example $b$ and the sums over $b$ are `psum`s
    over the `jax.vmap` axis `axis_name` — so padded positions never affect the statistics,
    and a batch of padded sequences is normalised exactly like the same sequences unpadded.
    The running statistics are exponential moving averages of $(\mu, \sigma^2)$ with
    `momentum`, bias-corrected by $1 - \text{momentum}^{\text{steps}}$ (so they are the
    plain average of the batches seen so far early in training); inference mode uses them
    and leaves the state unchanged.

    Like `eqx.nn.BatchNorm`: create with `eqx.nn.make_with_state`, call inside
    `jax.vmap(..., axis_name=axis_name)` in training mode, pass the returned state on.
    """

    weight: Float[Array, " input_size"]
    bias: Float[Array, " input_size"]
    state_index: eqx.nn.StateIndex
    inference: bool
    input_size: int = eqx.field(static=True)
    axis_name: Hashable | tuple[Hashable, ...] = eqx.field(static=True)
    eps: float = eqx.field(static=True)
    momentum: float = eqx.field(static=True)

    def __init__(
        self,
        input_size: int,
        axis_name: Hashable | Sequence[Hashable] = "batch",
        *,
        eps: float = 1e-5,
        momentum: float = 0.9,
        inference: bool = False,
        dtype=None,
    ):
        """**Arguments:**

        - `input_size`: the number of channels (last axis of the input).
        - `axis_name`: the name (or names) of the `jax.vmap` batch axis to take statistics
            over in training mode.
        - `eps`: added to the variance.
        - `momentum`: decay of the running statistics, in $[0, 1)$.
        - `inference`: default mode; toggle with `eqx.nn.inference_mode` or the call's
            `inference=`.
        - `dtype`: of the weight, bias and running statistics (default: JAX's default float).
        """
        check_size("input_size", input_size)
        if not 0 <= momentum < 1:
            raise ValueError(f"`momentum` must be in [0, 1), got {momentum}.")
        if eps <= 0:
            raise ValueError(f"`eps` must be > 0, got {eps}.")
        dtype = jnp.zeros((), dtype).dtype
        self.weight = jnp.ones(input_size, dtype)
        self.bias = jnp.zeros(input_size, dtype)
        # (steps, EMA of the mean, EMA of the variance), EMAs started at zero and
        # bias-corrected when read.
        self.state_index = eqx.nn.StateIndex(
            (jnp.array(0, jnp.int32), jnp.zeros(input_size, dtype), jnp.zeros(input_size, dtype))
        )
        self.inference = inference
        self.input_size = input_size
        if not isinstance(axis_name, str) and isinstance(axis_name, Sequence):
            axis_name = tuple(axis_name)
        self.axis_name = axis_name
        self.eps = eps
        self.momentum = momentum

    def running_stats(
        self, state: eqx.nn.State
    ) -> tuple[Float[Array, " input_size"], Float[Array, " input_size"]]:
        """The bias-corrected running `(mean, variance)`; `(0, 1)` before any training step."""
        steps, mean_ema, var_ema = state.get(self.state_index)
        dtype = mean_ema.dtype
        seen = steps > 0
        correction = 1 - jnp.asarray(self.momentum, dtype) ** steps.astype(dtype)
        correction = jnp.where(seen, correction, jnp.ones((), dtype))
        mean = jnp.where(seen, mean_ema / correction, jnp.zeros((), dtype))
        var = jnp.where(seen, var_ema / correction, jnp.ones((), dtype))
        return mean, var

    def _psum(self, x: Array) -> Array:
        try:
            return jax.lax.psum(x, self.axis_name)
        except NameError as e:
            raise NameError(
                "Batch norm in training mode takes statistics over the batch: call the "
                "model inside `jax.vmap(..., axis_name=...)` binding the axis name(s) "
                f"{self.axis_name!r} (with `out_axes=(0, None)` for `(output, state)`), or "
                "use inference mode, or `norm='layer'`."
            ) from e

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        x: Float[Array, "length input_size"],
        state: eqx.nn.State,
        *,
        mask: Bool[Array, " length"] | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "length input_size"], eqx.nn.State]:
        """**Arguments:**

        - `x`: one sequence, shape `(length, input_size)`.
        - `state`: the `eqx.nn.State` holding the running statistics.
        - `mask`: `True` at valid positions; `None` means all valid. Only valid positions
            enter the statistics. Outputs at masked positions are computed but meaningless.
        - `key`: ignored.
        - `inference`: overrides `self.inference` if not `None`.

        **Returns:** `(y, new_state)`; in inference mode `new_state` is `state`.
        """
        del key
        if inference is None:
            inference = self.inference
        if inference:
            mean, var = self.running_stats(state)
        else:
            if mask is None:
                count = jnp.asarray(x.shape[0], x.dtype)
            else:
                count = jnp.sum(mask, dtype=x.dtype)
            count = self._psum(count)
            mean = self._psum(jnp.sum(_where_valid(mask, x), axis=0)) / count
            var = self._psum(jnp.sum(_where_valid(mask, (x - mean) ** 2), axis=0)) / count
            steps, mean_ema, var_ema = state.get(self.state_index)
            m = jnp.asarray(self.momentum, mean_ema.dtype)
            new = (
                steps + 1,
                m * mean_ema + (1 - m) * jax.lax.stop_gradient(mean).astype(mean_ema.dtype),
                m * var_ema + (1 - m) * jax.lax.stop_gradient(var).astype(var_ema.dtype),
            )
            state = state.set(self.state_index, new)
        scale = self.weight * jax.lax.rsqrt(var.astype(x.dtype) + self.eps)
        return (x - mean.astype(x.dtype)) * scale + self.bias, state


# --- gated linear unit ---------------------------------------------------------------------


class GLU(eqx.Module):
    r"""Gated linear unit over features (Dauphin et al. 2017), as the mixing layer of §D.1.

    - `variant="full"`: $\operatorname{GLU}(y) = (W_1 y + b_1) \odot \sigma(W_2 y + b_2)$
        (all LRA tasks but PathX);
    - `variant="half"`: $\operatorname{GLU}(y) = y \odot \sigma(W y + b)$, "without one
        additional linear transform" (PathX; S5's `half_glu1`).
    """

    linear: eqx.nn.Linear
    variant: Literal["full", "half"] = eqx.field(static=True)

    def __init__(
        self,
        d_model: int,
        variant: Literal["full", "half"] = "full",
        dtype=None,
        *,
        key: PRNGKeyArray,
    ):
        """**Arguments:** `d_model` features in and out; `variant` `"full"` or `"half"`;
        `dtype` of the weights; `key`."""
        check_size("d_model", d_model)
        if variant not in ("full", "half"):
            raise ValueError(f"`glu` must be 'full' or 'half', got {variant!r}.")
        out = 2 * d_model if variant == "full" else d_model
        self.linear = eqx.nn.Linear(d_model, out, dtype=dtype, key=key)
        self.variant = variant

    @jaxtyped(typechecker=beartype)
    def __call__(
        self, y: Float[Array, " d_model"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, " d_model"]:
        """One position, shape `(d_model,)`; batch over positions with `jax.vmap`."""
        del key
        z = self.linear(y)
        if self.variant == "full":
            value, gate = jnp.split(z, 2)
            return value * jax.nn.sigmoid(gate)
        return y * jax.nn.sigmoid(z)


# --- the block -----------------------------------------------------------------------------


def _core_factory(
    form: Form | CoreFactory,
    r_min: float | None,
    r_max: float | None,
    max_phase: float | None,
    dtype,
) -> CoreFactory:
    ring = dict(r_min=r_min, r_max=r_max, max_phase=max_phase)
    if isinstance(form, str):
        if form not in _FORMS:
            raise ValueError(
                f"`form` must be 'complex', 'real' or a callable "
                f"`make_core(d_model, d_state, *, key)`; got {form!r}."
            )
        cls = _FORMS[form]
        defaults = dict(r_min=0.0, r_max=1.0, max_phase=2 * math.pi)
        ring = {k: defaults[k] if v is None else v for k, v in ring.items()}

        def make_lru(d_model: int, d_state: int, *, key: PRNGKeyArray) -> AbstractLRU:
            return cls(d_model, d_state, **ring, dtype=dtype, key=key)

        return make_lru
    if not callable(form):
        raise TypeError(
            "`form` must be 'complex', 'real' or a callable `make_core(d_model, d_state, *, "
            f"key)` returning a recurrent core; got {type(form).__name__}."
        )
    given = [k for k, v in ring.items() if v is not None]
    if given:
        raise ValueError(
            f"{', '.join(f'`{k}`' for k in given)} configure the built-in LRU forms only. "
            "With a callable `form`, set them inside `make_core` instead, e.g. "
            "`form=lambda h, n, *, key: eqx_lru.ComplexLRU(h, n, r_min=0.9, key=key)`."
        )
    return form


def _make_core(make_core: CoreFactory, d_model: int, d_state: int, key: PRNGKeyArray):
    core = make_core(d_model, d_state, key=key)
    if not isinstance(core, eqx.Module):
        raise TypeError(
            f"`make_core` must return an `eqx.Module`; got {type(core).__name__}."
        )
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

    **Recurrent cores.** Any `eqx.Module` called as
    `core(u: Float[Array, "length d_model"], *, reverse: bool = False)` and returning
    `Float[Array, "length d_model"]` plugs in through `form=make_core`, a callable
    `make_core(d_model, d_state, *, key)` returning one. For the padding guarantee a core
    must be causal in its direction (a forward core's output at `t` depends on `u[:t+1]`
    only, a reverse core's on `u[t:]`) and keep a zero state on zero input (any linear
    recurrence without bias does; so do $\tanh$/ReLU RNNs without bias). A core opts in
    to the optimiser's recurrent group with a class attribute `recurrent_fields` (see
    `lru_param_labels`). `eqx_lru.to_real` / `eqx_lru.to_complex` convert the LRU cores of
    a block (or any pytree) between forms.
    """

    norm: MaskedBatchNorm | eqx.nn.LayerNorm
    core: eqx.Module
    reverse_core: eqx.Module | None
    glu: GLU
    dropout: eqx.nn.Dropout

    def __init__(
        self,
        d_model: int,
        d_state: int,
        *,
        form: Form | CoreFactory = "complex",
        norm: Literal["batch", "layer"] = "batch",
        bidirectional: bool = False,
        dropout: float = 0.0,
        glu: Literal["full", "half"] = "full",
        r_min: float | None = None,
        r_max: float | None = None,
        max_phase: float | None = None,
        axis_name: Hashable | Sequence[Hashable] = "batch",
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `d_model`: $H$, the features of the residual stream.
        - `d_state`: $N$, the state size passed to the core (LRU: complex modes).
        - `form`: `"complex"` (`ComplexLRU`), `"real"` (`RealLRU`; same parameters, same
            function, real arithmetic only) or a callable `make_core(d_model, d_state, *, key)`.
        - `norm`: `"batch"` (`MaskedBatchNorm`, what the paper used) or `"layer"`
            (`eqx.nn.LayerNorm`, per position; no batch axis needed). With layer norm the
            block still takes and returns a state, unchanged, so model code is uniform.
        - `bidirectional`: add a reverse core (own parameters) and sum the two outputs.
        - `dropout`: dropout rate after the GLU (active in training mode only).
        - `glu`: `"full"` or `"half"` (see `GLU`).
        - `r_min`, `r_max`, `max_phase`: the LRU ring initialisation (defaults 0, 1, 2π);
            only for `form="complex"`/`"real"` — a callable `form` sets its own.
        - `axis_name`: the `jax.vmap` axis name batch norm reduces over in training.
        - `dtype`: parameter dtype (default: JAX's default float). Not passed to a
            callable `form`.
        - `key`: a `jax.random.PRNGKey`. The same key gives the same parameters for
            `form="complex"` and `form="real"`.
        """
        check_size("d_model", d_model)
        check_size("d_state", d_state)
        if not 0 <= dropout < 1:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout}.")
        make_core = _core_factory(form, r_min, r_max, max_phase, dtype)
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

    @property
    def bidirectional(self) -> bool:
        return self.reverse_core is not None

    def _forward(
        self,
        x: Array,
        state: eqx.nn.State,
        mask: Array | None,
        key: PRNGKeyArray | None,
        inference: bool | None,
    ) -> tuple[Array, eqx.nn.State]:
        x = _where_valid(mask, x)
        if isinstance(self.norm, MaskedBatchNorm):
            z, state = self.norm(x, state, mask=mask, inference=inference)
        else:
            z = jax.vmap(self.norm)(x)
        # Zero pads before the recurrence: the norm's shift makes them non-zero, and a
        # reverse scan starting at the padded end would carry them into valid positions.
        z = _where_valid(mask, z)
        h = self.core(z)
        if self.reverse_core is not None:
            h = h + self.reverse_core(z, reverse=True)
        h = jax.vmap(self.glu)(jax.nn.gelu(h))
        h = self.dropout(h, key=key, inference=inference)
        return _where_valid(mask, x + h), state

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        x: Float[Array, "length d_model"],
        state: eqx.nn.State,
        *,
        length: Int[ArrayLike, ""] | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "length d_model"], eqx.nn.State]:
        """Run the block on one sequence; batch with `jax.vmap(..., axis_name=...)`.

        **Arguments:**

        - `x`: shape `(length, d_model)`.
        - `state`: the `eqx.nn.State` from `eqx.nn.make_with_state(LRUBlock)(...)`.
        - `length`: number of valid leading positions (the rest is padding, with any
            content); `None` means all valid.
        - `key`: for dropout; needed in training mode when `dropout > 0`.
        - `inference`: overrides the `inference` flags of the norm and dropout (as set by
            `eqx.nn.inference_mode`) if not `None`. Inference mode: batch norm uses running
            statistics and leaves the state unchanged; no dropout.

        **Returns:** `(y, new_state)`, `y` of shape `(length, d_model)`, zero at padded
        positions.
        """
        mask = valid_mask(length, x.shape[0])
        return self._forward(x, state, mask, key, inference)


# --- form conversion -----------------------------------------------------------------------


def _is_lru(x) -> bool:
    return isinstance(x, AbstractLRU)


def to_real(tree: PyTree) -> PyTree:
    """`tree` with every `ComplexLRU` replaced by `RealLRU.from_complex` of it.

    Works on any pytree (a layer, `LRUBlock`, `LRUModel`, gradients, …); exact, the
    parameters are shared, so the outputs are equal up to float rounding.
    """
    return jax.tree_util.tree_map(
        lambda x: RealLRU.from_complex(x) if isinstance(x, ComplexLRU) else x,
        tree,
        is_leaf=_is_lru,
    )


def to_complex(tree: PyTree) -> PyTree:
    """`tree` with every `RealLRU` replaced by `ComplexLRU.from_real` of it (see `to_real`)."""
    return jax.tree_util.tree_map(
        lambda x: ComplexLRU.from_real(x) if isinstance(x, RealLRU) else x,
        tree,
        is_leaf=_is_lru,
    )

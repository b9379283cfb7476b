r"""Conversion between recurrentgemma's recurrent-block parameters and `RGLRU`/`HawkBlock`.

recurrentgemma (Google DeepMind's JAX/Flax RecurrentGemma, Botev et al. 2024) stores a
residual block with a recurrent temporal block as nested dictionaries (its Flax `params`
collection). Its layouts, and what each becomes here ($H$ = width, $N$ = `lru_width`,
$E$ = the MLP's width, $K$ = the convolution's taps):

- `temporal_pre_norm/scale`, `channel_pre_norm/scale` `(H,)` (the norm multiplies by
    `1 + scale`): `norm.weight`, `mlp_norm.weight` $= 1 + $ `scale`.
- `recurrent_block/linear_x`, `linear_y` (`kernel` `(H, N)`, `bias`), `linear_out`
    (`kernel` `(N, H)`) and `mlp_block/ffw_down` (`kernel` `(E, H)`): the `eqx.nn.Linear`
    of the same name (`mlp.down`) with `weight` $=$ `kernel`ᵀ.
- `recurrent_block/conv_1d/w` `(K, N)` (`w[K-1]` multiplies the current input), `b`:
    `conv.weight` $=$ `w[::-1]` (row $k$ reads $k$ positions back), `conv.bias`.
- `recurrent_block/rg_lru` (`a_param`, `a_imag_param`, `a_gate`/`input_gate` `w`
    `(heads, N/heads, modes/heads)` and `b`): `core`, an `eqx_lru.RGLRU` with
    $\Lambda = -$`a_param`, $\theta$ = `a_imag_param`, `W_a`, `b_a`, `W_x`, `b_x`.
- `mlp_block/ffw_up/w` `(2, H, E)` (gate branch, then value branch) and `b`
    `(2, 1, 1, E)`: `mlp.up.weight` $= [w_0^\top; w_1^\top]$ `(2E, H)`, its bias flattened.

Every leaf converts exactly (transposes, reversals, reshapes, a negation) except the norms'
$1 + \text{scale}$: one rounding in the parameters' dtype, the same rounding recurrentgemma
does when it applies the norm, so the converted block multiplies by the same numbers;
converting back returns a `scale` whose $1 + \text{scale}$ is the same.
"""

import functools
from collections.abc import Mapping
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from ._blocks._hawk import HawkBlock
from ._cores._rglru import RGLRU, DocumentStart
from ._scan._recurrence import ScanMethod

Params = Mapping[str, Any]


def _unwrap(params: Params, what: str) -> Params:
    """`params`, or `params["params"]` when the tree is a Flax variables dict."""
    if not isinstance(params, Mapping):
        raise TypeError(
            f"{what}: expected recurrentgemma's parameters as nested dicts; got "
            f"{type(params).__name__}."
        )
    if set(params) == {"params"}:
        return params["params"]
    return params


def _leaf(params: Params, path: str, shape: tuple[int, ...] | None = None) -> Array:
    """The array at `path` ("a/b/c"), with a `ValueError` naming the path when it is
    missing or (with `shape`) of another shape."""
    node: Any = params
    for name in path.split("/"):
        if not isinstance(node, Mapping) or name not in node:
            raise ValueError(
                f"recurrentgemma's parameters have no `{path}` (missing `{name}`); "
                "expected the `params` of a recurrent `ResidualBlock` (or of an `RGLRU`)."
            )
        node = node[name]
    leaf = jnp.asarray(node)
    if shape is not None and leaf.shape != shape:
        raise ValueError(f"recurrentgemma's `{path}` must have shape {shape}; got {leaf.shape}.")
    return leaf


def rglru_from_recurrentgemma(
    params: Params,
    *,
    document_start: DocumentStart = "unnormalised",
    form: Literal["complex", "real"] | None = None,
    method: ScanMethod = "auto",
    precision: Any = None,
) -> RGLRU:
    r"""An `eqx_lru.RGLRU` holding the parameters of recurrentgemma's `RGLRU` layer.

    **Arguments:**

    - `params`: its parameters, `{"a_param", "input_gate": {"w", "b"}, "a_gate": {"w",
        "b"}}`, with `"a_imag_param"` for its complex variant (`only_real=False`, here
        `phase=True`). The heads, widths and dtype come from the shapes.
    - `document_start`: default `"unnormalised"`, recurrentgemma's semantics (see
        `eqx_lru.RGLRU`); `"normalised"` for eqx_lru's.
    - `form`, `method`, `precision`: as `eqx_lru.RGLRU`.

    **Returns:** the core: $\Lambda = -$`a_param`, $\theta$ = `a_imag_param`, the gates'
    `w`, `b` as `W_x`, `b_x` (input gate) and `W_a`, `b_a`, $c = 8$.
    """
    params = _unwrap(params, "rglru_from_recurrentgemma")
    w_x = _leaf(params, "input_gate/w")
    if w_x.ndim != 3:
        raise ValueError(
            "recurrentgemma's `input_gate/w` must have shape (heads, width/heads, "
            f"modes/heads); got {w_x.shape}."
        )
    heads, block_in, block_out = w_x.shape
    phase = "a_imag_param" in params
    d_model = heads * block_in
    make = functools.partial(
        RGLRU, d_model, heads=heads, phase=phase, form=form, document_start=document_start,
        method=method, precision=precision, dtype=w_x.dtype, key=jax.random.PRNGKey(0),
    )  # fmt: skip
    if heads * block_out != (d_model // 2 if phase else d_model):
        raise ValueError(
            f"recurrentgemma's `input_gate/w` {w_x.shape} maps a width of {d_model} to "
            f"{heads * block_out} modes; its {'complex' if phase else 'real'} RG-LRU has "
            f"{d_model // 2 if phase else d_model}."
        )
    skeleton = eqx.filter_eval_shape(make)
    modes = heads * block_out
    gates = ("W_a", "b_a", "W_x", "b_x")
    new = [-_leaf(params, "a_param", (modes,))]
    new += [_leaf(params, f"{gate}/{name}", getattr(skeleton, field).shape) for gate, name, field
            in (("a_gate", "w", "W_a"), ("a_gate", "b", "b_a"), ("input_gate", "w", "W_x"),
                ("input_gate", "b", "b_x"))]  # fmt: skip
    fields = ("Lambda",) + gates
    if phase:
        new.append(_leaf(params, "a_imag_param", (modes,)))
        fields += ("theta",)
    return eqx.tree_at(lambda m: [getattr(m, f) for f in fields], skeleton, new)


def rglru_to_recurrentgemma(core: RGLRU) -> dict[str, Any]:
    """recurrentgemma's `RGLRU` parameters for an `eqx_lru.RGLRU` (the inverse of
    `rglru_from_recurrentgemma`, exact). recurrentgemma's gate exponent is 8: a core with
    another `c` is refused."""
    if not isinstance(core, RGLRU):
        raise TypeError(f"expected an eqx_lru.RGLRU; got {type(core).__name__}.")
    if core.c != 8.0:
        raise ValueError(
            f"recurrentgemma's RG-LRU fixes the gate's exponent scale at 8; this core has "
            f"c={core.c}."
        )
    out: dict[str, Any] = {
        "a_param": -core.Lambda,
        "input_gate": {"w": core.W_x, "b": core.b_x},
        "a_gate": {"w": core.W_a, "b": core.b_a},
    }
    if core.theta is not None:
        out["a_imag_param"] = core.theta
    return out


def hawk_block_from_recurrentgemma(
    params: Params,
    *,
    document_start: DocumentStart = "unnormalised",
    form: Literal["complex", "real"] | None = None,
    method: ScanMethod = "auto",
    precision: Any = None,
    dropout: float = 0.0,
) -> HawkBlock:
    r"""An `eqx_lru.HawkBlock` holding the parameters of recurrentgemma's `ResidualBlock`
    with a recurrent temporal block (the layouts in the module docstring).

    **Arguments:**

    - `params`: the block's `params` collection (`{"temporal_pre_norm",
        "recurrent_block", "channel_pre_norm", "mlp_block"}`; a `{"params": ...}`
        variables dict is unwrapped). Widths, heads, taps, the RG-LRU's variant and the
        dtype come from the shapes. An attention block, or one without its MLP, is refused.
    - `document_start`, `form`, `method`, `precision`: the core's (`eqx_lru.RGLRU`);
        default `"unnormalised"`, recurrentgemma's semantics, so that the block computes
        what `ResidualBlock` computes (its `segment_pos == 0` where `segment_ids` start a
        segment).
    - `dropout`: the block's (recurrentgemma has none).
    """
    params = _unwrap(params, "hawk_block_from_recurrentgemma")
    if "attention_block" in params:
        raise ValueError(
            "recurrentgemma's parameters hold an attention block (`attention_block`); only "
            "recurrent residual blocks convert to HawkBlock."
        )
    if "mlp_block" not in params:
        raise ValueError(
            "recurrentgemma's parameters have no `mlp_block` (a block built with "
            "use_mlp=False); HawkBlock always has its MLP."
        )
    core = rglru_from_recurrentgemma(
        _leaf_tree(params, "recurrent_block/rg_lru"), document_start=document_start,
        form=form, method=method, precision=precision,
    )  # fmt: skip
    d_model = _leaf(params, "temporal_pre_norm/scale").shape[0]
    d_state = core.d_model
    taps = _leaf(params, "recurrent_block/conv_1d/w").shape[0]
    mlp_width = _leaf(params, "mlp_block/ffw_down/kernel").shape[0]
    skeleton = eqx.filter_eval_shape(
        lambda: HawkBlock(
            d_model,
            d_state,
            core=lambda *a, **k: core,
            conv_width=taps,
            mlp_width=mlp_width,
            dropout=dropout,
            dtype=core.W_x.dtype,
            key=jax.random.PRNGKey(0),
        )
    )
    H, N, E, K = d_model, d_state, mlp_width, taps

    def dense(path: str, d_in: int, d_out: int) -> tuple[Array, Array]:
        kernel = _leaf(params, f"{path}/kernel", (d_in, d_out))
        return kernel.T, _leaf(params, f"{path}/bias", (d_out,))

    up = _leaf(params, "mlp_block/ffw_up/w", (2, H, E))
    leaves = [
        1 + _leaf(params, "temporal_pre_norm/scale", (H,)),
        *dense("recurrent_block/linear_x", H, N),
        *dense("recurrent_block/linear_y", H, N),
        _leaf(params, "recurrent_block/conv_1d/w", (K, N))[::-1],
        _leaf(params, "recurrent_block/conv_1d/b", (N,)),
        *dense("recurrent_block/linear_out", N, H),
        1 + _leaf(params, "channel_pre_norm/scale", (H,)),
        jnp.concatenate([up[0].T, up[1].T]),
        _leaf(params, "mlp_block/ffw_up/b", (2, 1, 1, E)).reshape(2 * E),
        *dense("mlp_block/ffw_down", E, H),
        core,
    ]
    return eqx.tree_at(_hawk_leaves, skeleton, leaves)


def _leaf_tree(params: Params, path: str) -> Params:
    node: Any = params
    for name in path.split("/"):
        if not isinstance(node, Mapping) or name not in node:
            raise ValueError(
                f"recurrentgemma's parameters have no `{path}`; expected the `params` of a "
                "recurrent `ResidualBlock`."
            )
        node = node[name]
    return node


def _hawk_leaves(b: HawkBlock) -> list:
    return [
        b.norm.weight, b.linear_x.weight, b.linear_x.bias, b.linear_y.weight, b.linear_y.bias,
        b.conv.weight, b.conv.bias, b.linear_out.weight, b.linear_out.bias, b.mlp_norm.weight,
        b.mlp.up.weight, b.mlp.up.bias, b.mlp.down.weight, b.mlp.down.bias, b.core,
    ]  # fmt: skip


def hawk_block_to_recurrentgemma(block: HawkBlock) -> dict[str, Any]:
    """recurrentgemma's `ResidualBlock` parameters (a recurrent temporal block) for an
    `eqx_lru.HawkBlock` whose core is an `eqx_lru.RGLRU` with $c = 8$: the inverse of
    `hawk_block_from_recurrentgemma` (exact, but for the norms' `scale` = weight − 1, exact
    for weights in $[1/2, 2]$). recurrentgemma always applies its document-start semantics:
    the two compute the same function when the core's `document_start` is
    `"unnormalised"`."""
    if not isinstance(block, HawkBlock):
        raise TypeError(f"expected an eqx_lru.HawkBlock; got {type(block).__name__}.")
    if not isinstance(block.core, RGLRU):
        raise TypeError(
            f"recurrentgemma's recurrent block runs an RG-LRU; this HawkBlock's core is "
            f"{type(block.core).__name__}."
        )
    E = block.mlp.down.weight.shape[1]
    up_w, up_b = block.mlp.up.weight, _present(block.mlp.up.bias)

    def dense(linear: eqx.nn.Linear) -> dict[str, Array]:
        return {"kernel": linear.weight.T, "bias": _present(linear.bias)}

    return {
        "temporal_pre_norm": {"scale": _present(block.norm.weight) - 1},
        "recurrent_block": {
            "linear_x": dense(block.linear_x),
            "linear_y": dense(block.linear_y),
            "conv_1d": {"w": block.conv.weight[::-1], "b": block.conv.bias},
            "rg_lru": rglru_to_recurrentgemma(block.core),
            "linear_out": dense(block.linear_out),
        },
        "channel_pre_norm": {"scale": _present(block.mlp_norm.weight) - 1},
        "mlp_block": {
            "ffw_up": {
                "w": jnp.stack([up_w[:E].T, up_w[E:].T]),
                "b": up_b.reshape(2, 1, 1, E),
            },
            "ffw_down": dense(block.mlp.down),
        },
    }


def _present(leaf: Array | None) -> Array:
    """A parameter every `HawkBlock` has (its norms' weights, its layers' biases)."""
    assert leaf is not None
    return leaf

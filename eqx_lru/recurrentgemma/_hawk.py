"""recurrentgemma's recurrent `ResidualBlock` parameters ↔ `eqx_lru.HawkBlock`."""

from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._blocks._hawk import HawkBlock
from .._cores._rglru import RGLRU, DocumentStart
from .._scan._recurrence import ScanMethod
from ._params import Params, leaf, subtree, unwrap
from ._rglru import check_exact, rglru_from_params, rglru_to_recurrentgemma


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
    with a recurrent temporal block (the layouts in `eqx_lru.recurrentgemma`).

    **Arguments:**

    - `params`: the block's `params` collection (`{"temporal_pre_norm",
        "recurrent_block", "channel_pre_norm", "mlp_block"}`; a `{"params": ...}`
        variables dict is unwrapped). Widths, heads, taps, the RG-LRU's variant and the
        dtype come from the shapes. Every leaf must be an array of floating-point numbers
        of one dtype and of its layout's shape; a bad one is refused by its path. An
        attention block, or one without its MLP, is refused.
    - `document_start`, `form`, `method`, `precision`: the core's (`eqx_lru.RGLRU`);
        default `"unnormalised"`, recurrentgemma's semantics, so that the block computes
        what `ResidualBlock` computes (its `segment_pos == 0` where `segment_ids` start a
        segment); `"normalised"`: eqx_lru's, another function at document starts.
    - `dropout`: the block's (recurrentgemma has none).
    """
    params = unwrap(params, "hawk_block_from_recurrentgemma")
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
    core = rglru_from_params(
        subtree(params, "recurrent_block/rg_lru"), prefix="recurrent_block/rg_lru/",
        document_start=document_start, form=form, method=method, precision=precision,
    )  # fmt: skip
    d_model = leaf(params, "temporal_pre_norm/scale", ndim=1).shape[0]
    d_state = core.d_model
    taps = leaf(params, "recurrent_block/conv_1d/w", ndim=2).shape[0]
    mlp_width = leaf(params, "mlp_block/ffw_down/kernel", ndim=2).shape[0]
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
        kernel = leaf(params, f"{path}/kernel", (d_in, d_out))
        return kernel.T, leaf(params, f"{path}/bias", (d_out,))

    up = leaf(params, "mlp_block/ffw_up/w", (2, H, E))
    leaves = [
        1 + leaf(params, "temporal_pre_norm/scale", (H,)),
        *dense("recurrent_block/linear_x", H, N),
        *dense("recurrent_block/linear_y", H, N),
        leaf(params, "recurrent_block/conv_1d/w", (K, N))[::-1],
        leaf(params, "recurrent_block/conv_1d/b", (N,)),
        *dense("recurrent_block/linear_out", N, H),
        1 + leaf(params, "channel_pre_norm/scale", (H,)),
        jnp.concatenate([up[0].T, up[1].T]),
        leaf(params, "mlp_block/ffw_up/b", (2, 1, 1, E)).reshape(2 * E),
        *dense("mlp_block/ffw_down", E, H),
        core,
    ]
    return eqx.tree_at(_hawk_leaves, skeleton, leaves)


def _hawk_leaves(b: HawkBlock) -> list:
    return [
        b.norm.weight, b.linear_x.weight, b.linear_x.bias, b.linear_y.weight, b.linear_y.bias,
        b.conv.weight, b.conv.bias, b.linear_out.weight, b.linear_out.bias, b.mlp_norm.weight,
        b.mlp.up.weight, b.mlp.up.bias, b.mlp.down.weight, b.mlp.down.bias, b.core,
    ]  # fmt: skip


def hawk_block_to_recurrentgemma(block: HawkBlock, *, exact: bool = True) -> dict[str, Any]:
    """recurrentgemma's `ResidualBlock` parameters (a recurrent temporal block) for an
    `eqx_lru.HawkBlock` whose core is an `eqx_lru.RGLRU`: the inverse of
    `hawk_block_from_recurrentgemma` (exact, but for the norms' `scale` = weight − 1,
    exact for weights in $[1/2, 2]$), on which `ResidualBlock` computes this block's
    function (in inference mode: recurrentgemma has no dropout).

    The core is refused as by `rglru_to_recurrentgemma` ($c \\ne 8$,
    `eigenvalues="signed"`, and `document_start="normalised"` unless `exact=False`)."""
    if not isinstance(block, HawkBlock):
        raise TypeError(f"expected an eqx_lru.HawkBlock; got {type(block).__name__}.")
    if not isinstance(block.core, RGLRU):
        raise TypeError(
            f"recurrentgemma's recurrent block runs an RG-LRU; this HawkBlock's core is "
            f"{type(block.core).__name__}."
        )
    if block.bidirectional:
        raise ValueError(
            "hawk_block_to_recurrentgemma: recurrentgemma's recurrent block is causal, and "
            "this HawkBlock is bidirectional (`bidirectional=True`): its reverse "
            "convolution and core have no place there. Convert a block built with "
            "`bidirectional=False`."
        )
    check_exact(block.core, exact, "hawk_block_to_recurrentgemma")
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
            "rg_lru": rglru_to_recurrentgemma(block.core, exact=exact),
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

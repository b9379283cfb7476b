r"""Conversion between recurrentgemma's recurrent-block parameters and `eqx_lru.RGLRU` /
`eqx_lru.HawkBlock`.

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

Every converter checks every leaf of a tree it is given (an array of floating-point
numbers, one dtype for the tree, its layout's shape) and names the path of a bad one. The
converters to recurrentgemma refuse what recurrentgemma cannot compute: $c \ne 8$, signed
eigenvalues, and eqx_lru's normalised document starts (unless `exact=False`).
"""

from ._hawk import hawk_block_from_recurrentgemma as hawk_block_from_recurrentgemma
from ._hawk import hawk_block_to_recurrentgemma as hawk_block_to_recurrentgemma
from ._rglru import rglru_from_recurrentgemma as rglru_from_recurrentgemma
from ._rglru import rglru_to_recurrentgemma as rglru_to_recurrentgemma

__all__ = [
    "hawk_block_from_recurrentgemma",
    "hawk_block_to_recurrentgemma",
    "rglru_from_recurrentgemma",
    "rglru_to_recurrentgemma",
]

r"""`dot_general` as ONNX `MatMul` where one operand is a constant (the translator `_onnx.py`).

A layer's projection is a `dot_general` of a weight (a constant of the export) with a
variable; `jax.vmap` puts the batch axis where the weight's free axes are not, e.g.
`W @ x.T` (`ab,cb->ac`) followed by a transpose. onnxruntime runs `Einsum` through
generic reshapes and copies, several times slower than its `MatMul` on the CPU; so with
one contracted axis and no batch axes the product is written as
$x' W'$ — the variable with its contracted axis last, the weight transposed and reshaped
at export time to $(K, \prod \text{free})$ — one `MatMul` (which onnxruntime fuses with a
following bias `Add` into a `Gemm`), and the result transposed back into JAX's axis order
only where needed (`Graph.transpose` cancels it against the transpose that follows).
Other products, and integer ones (ONNX's `MatMul` is floating point), return `None`: the
translator writes them as `Einsum`.
"""

from typing import Any

import numpy as np

from ._onnx_graph import Graph

_FLOATS = (np.float16, np.float32, np.float64)


def dot_as_matmul(g: Graph, eqn, vals: list[Any]) -> str | None:
    """The name of `dot_general`'s result (before any cast of the output dtype), or `None`
    where it is not a product of a variable and a constant with one contracted axis."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    const = [not isinstance(v, str) for v in vals]
    if lb or rb or len(lc) != 1 or const[0] == const[1]:
        return None
    if any(np.dtype(v.aval.dtype) not in [np.dtype(t) for t in _FLOATS] for v in eqn.invars):
        return None
    var_side = 0 if const[1] else 1
    var, weight = vals[var_side], np.asarray(vals[1 - var_side])
    var_axis, weight_axis = (lc[0], rc[0]) if var_side == 0 else (rc[0], lc[0])
    var_shape = eqn.invars[var_side].aval.shape
    if weight.dtype != np.dtype(eqn.invars[var_side].aval.dtype):
        return None
    # The variable with its contracted axis last; the weight as (K, product of its free axes).
    rank = len(var_shape)
    free_var = [i for i in range(rank) if i != var_axis]
    x = g.transpose(var, [*free_var, var_axis])
    w = np.moveaxis(weight, weight_axis, 0)
    free_w = w.shape[1:]
    out = g.op1("MatMul", [x, g.const(np.ascontiguousarray(w.reshape(w.shape[0], -1)), "w")])
    kept = [var_shape[i] for i in free_var]
    if len(free_w) != 1:  # the weight's free axes back (none: drop the size-1 axis)
        if free_w:
            out = g.op1("Reshape", [out, g.shape([*kept, *free_w], infer_one=True)])
        else:
            out = g.squeeze(out, [len(kept)])
    if var_side == 0 or not free_w:  # JAX's order: lhs free axes, then rhs free axes
        return out
    n_var, n_w = len(kept), len(free_w)
    return g.transpose(out, [*range(n_var, n_var + n_w), *range(n_var)])

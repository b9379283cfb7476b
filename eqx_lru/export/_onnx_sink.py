r"""Layout changes moved past elementwise operators (the translator `_onnx.py`).

`jax.vmap` moves the batch axis around: a vmapped projection, or a stack of the real and
imaginary parts, comes out of the jaxpr as `transpose`s and size-1 axes around every
elementwise operation. onnxruntime runs each of them as a copy. An elementwise operator
whose variable operands are all the same `Transpose` (or the same `Unsqueeze`) of other
values computes on those values instead, and the layout change is applied to its result:
$f(x^{\top_p}, y^{\top_p}) = f(x, y)^{\top_p}$. The change then meets the next one, where
`Graph.transpose` composes (often cancels) it and `Graph.squeeze` undoes an unsqueeze,
and the nodes no longer read are pruned. Constant operands are permuted (or squeezed) at
export time.
"""

from typing import Any

import numpy as np

from ._onnx_graph import Graph


def sink(g: Graph, op_type: str, names: list[str], vals: list[Any]) -> str | None:
    """`op_type` of `names` (`vals`: the same operands, NumPy arrays where constant) with
    a common layout change of its variable operands moved to the result; `None` where
    they have none in common."""
    variables = [n for n, v in zip(names, vals, strict=True) if isinstance(v, str)]
    if not variables:
        return None
    if all(n in g.transposes for n in variables):
        perms = {g.transposes[n][1] for n in variables}
        if len(perms) == 1:
            return _through_transpose(g, op_type, names, vals, perms.pop())
    if all(n in g.unsqueezes for n in variables):
        axes = {tuple(sorted(g.unsqueezes[n][1])) for n in variables}
        if len(axes) == 1:
            return _through_unsqueeze(g, op_type, names, vals, axes.pop())
    return None


def _through_transpose(g, op_type, names, vals, perm) -> str | None:
    inverse = np.argsort(perm)
    inputs = []
    for name, val in zip(names, vals, strict=True):
        if isinstance(val, str):
            inputs.append(g.transposes[name][0])
        elif np.ndim(val) == 0 or np.size(val) == 1 and np.ndim(val) <= len(perm):
            inputs.append(name)  # one value: the same under any permutation
        elif np.ndim(val) == len(perm):
            inputs.append(g.const(np.ascontiguousarray(np.transpose(val, inverse))))
        else:
            return None
    return g.transpose(g.op1(op_type, inputs), perm)


def _through_unsqueeze(g, op_type, names, vals, axes) -> str | None:
    inputs = []
    for name, val in zip(names, vals, strict=True):
        if isinstance(val, str):
            inputs.append(g.unsqueezes[name][0])
        elif np.ndim(val) == 0:
            inputs.append(name)
        elif all(np.shape(val)[a] == 1 for a in axes if a < np.ndim(val)):
            if np.ndim(val) <= max(axes):
                return None
            inputs.append(g.const(np.squeeze(np.asarray(val), axis=axes)))
        else:
            return None
    return g.unsqueeze(g.op1(op_type, inputs), axes)

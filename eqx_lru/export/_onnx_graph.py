"""The ONNX side of the translator (`_onnx.py`): dtypes, and one graph being built.

`Graph` collects the nodes, initializers and fresh names of one ONNX graph (the main
graph or a `Loop` body), and writes shape tensors for shapes whose one symbolic dimension
is the batch.
"""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper


def onnx_dtype(dtype) -> int:
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        raise TypeError(
            "ONNX export computes in real arithmetic only, and this program has a complex "
            f"value ({dtype}). Convert the model with `eqx_lru.to_real` first; cores without a "
            "real form (e.g. S5's complex state) export as StableHLO only."
        )
    return helper.np_dtype_to_tensor_dtype(dtype)


class Graph:
    """Nodes, initializers and names of one ONNX graph (the main graph or a Loop body)."""

    def __init__(self, namer: Callable[[str], str], batch: Any, batch_value: str | None):
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.fresh = namer
        self.batch = batch  # the symbolic batch dimension (a jax.export dim), or None
        self.batch_value = batch_value  # the name of an int64 [1] tensor holding it

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], n_out: int = 1, **attrs) -> list[str]:
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs

    def op1(self, op_type: str, inputs: Sequence[str], **attrs) -> str:
        return self.op(op_type, inputs, **attrs)[0]

    def shape(self, dims: Sequence[Any], *, infer_one: bool = False) -> str:
        """An int64 shape tensor for `dims` (ints and the symbolic batch). `infer_one`:
        a lone symbolic dimension becomes -1 (for Reshape)."""
        symbolic = [i for i, d in enumerate(dims) if not isinstance(d, int | np.integer)]
        if not symbolic:
            return self.const(np.asarray(dims, np.int64), "shape")
        if infer_one and len(symbolic) == 1:
            return self.const(
                np.asarray([-1 if i in symbolic else d for i, d in enumerate(dims)], np.int64),
                "shape",
            )
        parts = []
        for d in dims:
            if isinstance(d, int | np.integer):
                parts.append(self.const(np.asarray([d], np.int64), "dim"))
            elif self.batch is not None and self.batch_value is not None and d == self.batch:
                parts.append(self.batch_value)
            else:
                raise NotImplementedError(
                    f"ONNX export: a dimension {d} that is not the batch size."
                )
        return self.op1("Concat", parts, axis=0)


def same_dim(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # an inconclusive symbolic comparison
        return False


def onnx_dims(shape) -> list:
    return [int(d) if isinstance(d, int | np.integer) else str(d) for d in shape]


def value_info(name: str, aval) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, onnx_dtype(aval.dtype), onnx_dims(aval.shape))


#: The ONNX operator of each elementwise JAX primitive that maps one to one.
ELEMENTWISE = {
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "div": "Div",
    "neg": "Neg",
    "exp": "Exp",
    "log": "Log",
    "cos": "Cos",
    "sin": "Sin",
    "tanh": "Tanh",
    "logistic": "Sigmoid",
    "sqrt": "Sqrt",
    "abs": "Abs",
    "sign": "Sign",
    "max": "Max",
    "min": "Min",
    "pow": "Pow",
    "erf": "Erf",
    "floor": "Floor",
    "ceil": "Ceil",
    "lt": "Less",
    "gt": "Greater",
    "le": "LessOrEqual",
    "ge": "GreaterOrEqual",
    "eq": "Equal",
    "and": "And",
    "or": "Or",
    "not": "Not",
    "rem": "Mod",
    "stop_gradient": "Identity",
}

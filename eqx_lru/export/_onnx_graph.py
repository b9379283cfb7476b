"""The ONNX side of the translator (`_onnx.py`): dtypes, and one graph being built.

`Graph` collects the nodes, initializers and fresh names of one ONNX graph (the main
graph or a `Loop` body), and writes shape tensors for shapes whose one symbolic dimension
is the batch. It also keeps what onnxruntime would otherwise execute op by op (it fuses
no elementwise chains on the CPU): a transpose of a transpose is one (or none), a squeeze
of the unsqueeze it undoes is its input, an operand broadcast only to meet an elementwise
operation is left to the operation's own broadcasting (`unbroadcast`), and `prune` drops
the nodes whose outputs nothing reads.
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

    def __init__(self, namer: Callable[[str], str], dims: list[tuple[Any, str]]):
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.fresh = namer
        #: `(dim, name)`: each symbolic dimension (a `jax.export` dim) and the name of an
        #: int64 `[1]` tensor holding its value (shared with the graphs inside this one).
        self.dims = dims
        #: `name -> (input, perm)` of every Transpose written, to compose the next one.
        self.transposes: dict[str, tuple[str, tuple[int, ...]]] = {}
        #: `name -> (input, axes)` of every Unsqueeze written, for the Squeeze undoing it.
        self.unsqueezes: dict[str, tuple[str, tuple[int, ...]]] = {}
        #: `name -> (input, shape)` of every Expand of a broadcast: `input` has the rank of
        #: the result and `shape` (ints and symbolic dims) with 1 where it was broadcast.
        self.broadcasts: dict[str, tuple[str, tuple[Any, ...]]] = {}

    def dim(self, d: Any) -> str:
        """The name of an int64 `[1]` tensor holding the symbolic dimension `d`."""
        for known, name in self.dims:
            if same_dim(known, d):
                return name
        raise NotImplementedError(f"ONNX export: a dimension {d} that no input of the program has.")

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

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        """`x` transposed by `perm`; composed with the Transpose that made `x`, if one did
        (no node at all when the two undo each other)."""
        perm = tuple(int(p) for p in perm)
        if x in self.transposes:
            x, first = self.transposes[x]
            perm = tuple(first[p] for p in perm)
        if perm == tuple(range(len(perm))):
            return x
        out = self.op1("Transpose", [x], perm=list(perm))
        self.transposes[out] = (x, perm)
        return out

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        axes = tuple(int(a) for a in axes)
        out = self.op1("Unsqueeze", [x, self.const(np.asarray(axes, np.int64), "axes")])
        self.unsqueezes[out] = (x, axes)
        return out

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        """`x` without the size-1 `axes`: the input of the Unsqueeze that added them."""
        axes = tuple(int(a) for a in axes)
        if x in self.unsqueezes and tuple(sorted(self.unsqueezes[x][1])) == tuple(sorted(axes)):
            return self.unsqueezes[x][0]
        if x in self.transposes:  # squeeze the input, then transpose the other axes
            source, perm = self.transposes[x]
            gone = sorted(perm[a] for a in axes)
            rest = [p for i, p in enumerate(perm) if i not in axes]
            squeezed = self.squeeze(source, gone)
            return self.transpose(squeezed, [p - sum(g < p for g in gone) for p in rest])
        return self.op1("Squeeze", [x, self.const(np.asarray(axes, np.int64), "axes")])

    def unbroadcast(self, names: list[str], shapes: list[tuple], out_shape: tuple) -> list[str]:
        """`names` (operands of one broadcasting elementwise node, of `shapes`) with each
        Expand of a broadcast replaced by its input while the node's result keeps
        `out_shape`: a broadcast operand is then not materialised."""
        names, shapes = list(names), [tuple(s) for s in shapes]
        for i, name in enumerate(names):
            if name not in self.broadcasts:
                continue
            source, shape = self.broadcasts[name]
            trial = [*shapes[:i], shape, *shapes[i + 1 :]]
            if _broadcasts_to(trial, out_shape):
                names[i], shapes[i] = source, shape
        return names

    def shape(self, dims: Sequence[Any], *, infer_one: bool = False) -> str:
        """An int64 shape tensor for `dims` (ints and symbolic dimensions of the inputs).
        `infer_one`: a lone symbolic dimension becomes -1 (for Reshape)."""
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
            else:
                parts.append(self.dim(d))
        return self.op1("Concat", parts, axis=0)


def _broadcasts_to(shapes: list[tuple], out_shape: tuple) -> bool:
    """Whether ONNX's multidirectional broadcast of `shapes` (one rank) is `out_shape`."""
    if any(len(s) != len(out_shape) for s in shapes):
        return False
    for axis, d in enumerate(out_shape):
        sizes = [s[axis] for s in shapes]
        if not all(same_dim(n, d) or same_dim(n, 1) for n in sizes):
            return False
        if not same_dim(d, 1) and not any(same_dim(n, d) for n in sizes):
            return False
    return True


def prune(g: Graph, outputs: Sequence[str]) -> tuple[list, list]:
    """The nodes and initializers of `g` that `outputs` depend on (a kept node's
    subgraphs, e.g. a Loop body, read names of the graph too): dead-code elimination of
    what the translation wrote and no longer reads."""
    needed, kept = set(outputs), []
    for node in reversed(g.nodes):
        if not any(o in needed for o in node.output):
            continue
        kept.append(node)
        needed.update(node.input)
        needed.update(_subgraph_inputs(node))
    return kept[::-1], [t for t in g.initializers if t.name in needed]


def _subgraph_inputs(node: onnx.NodeProto) -> set[str]:
    names = set()
    for attr in node.attribute:
        for graph in [attr.g] if attr.HasField("g") else list(attr.graphs):
            for inner in graph.node:
                names.update(inner.input)
                names.update(_subgraph_inputs(inner))
    return names


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

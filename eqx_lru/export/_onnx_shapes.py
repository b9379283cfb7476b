"""The shape and indexing primitives of the jaxpr → ONNX translator (`_onnx.py`).

`ShapeOps` holds their translations as `_p_<primitive>` methods, which the translator
inherits: broadcasts, reshapes, slices, the gather of an embedding lookup, and the iota
and dimension values of a symbolic size (read from the program's inputs, `Graph.dim`).
"""

import numpy as np
from onnx import TensorProto

from ._onnx_graph import onnx_dtype, same_dim


class ShapeOps:
    """The translations of the shape and indexing primitives (see the module docstring)."""

    def _p_broadcast_in_dim(self, g, x, params, eqn):
        shape, dims = params["shape"], params["broadcast_dimensions"]
        in_shape = eqn.invars[0].aval.shape
        if list(dims) != sorted(dims):
            raise NotImplementedError("ONNX export: broadcast_in_dim with permuted dimensions.")
        value = x[0]
        missing = [i for i in range(len(shape)) if i not in dims]
        if missing:
            value = g.unsqueeze(value, missing)
        # The operand, rank-matched: its own sizes, 1 where the broadcast adds an axis.
        ranked = tuple(in_shape[dims.index(i)] if i in dims else 1 for i in range(len(shape)))
        if all(same_dim(a, b) for a, b in zip(ranked, shape, strict=True)):
            return [value]  # only axes of size 1 added: no copy
        # Expand broadcasts both ways: dims the operand has keep size 1 in the target.
        target = [
            1 if (i in dims and same_dim(in_shape[dims.index(i)], shape[i])) else shape[i]
            for i in range(len(shape))
        ]
        out = g.op1("Expand", [value, g.shape(target)])
        g.broadcasts[out] = (value, ranked)
        return [out]

    def _p_reshape(self, g, x, params, eqn):
        return [g.op1("Reshape", [x[0], g.shape(params["new_sizes"], infer_one=True)])]

    def _p_squeeze(self, g, x, params, eqn):
        return [g.squeeze(x[0], params["dimensions"])]

    def _p_expand_dims(self, g, x, params, eqn):
        return [g.unsqueeze(x[0], params["dimensions"])]

    def _p_transpose(self, g, x, params, eqn):
        return [g.transpose(x[0], params["permutation"])]

    def _p_concatenate(self, g, x, params, eqn):
        axis = int(params["dimension"])
        perms = {g.transposes[v][1] if v in g.transposes else None for v in x}
        perm = perms.pop() if len(perms) == 1 else None
        if perm is None:
            return [g.op1("Concat", x, axis=axis)]
        # The same transpose of every operand: concatenate the inputs, transpose once.
        inputs = [g.transposes[v][0] for v in x]
        return [g.transpose(g.op1("Concat", inputs, axis=perm[axis]), perm)]

    def _p_stack(self, g, x, params, eqn):
        axis = g.const(np.asarray([params["axis"]], np.int64), "axes")
        return [
            g.op1("Concat", [g.op1("Unsqueeze", [v, axis]) for v in x], axis=int(params["axis"]))
        ]

    def _p_split(self, g, x, params, eqn):
        sizes = g.const(np.asarray(params["sizes"], np.int64), "sizes")
        return g.op("Split", [x[0], sizes], n_out=len(params["sizes"]), axis=int(params["axis"]))

    def _p_slice(self, g, x, params, eqn):
        starts, limits = params["start_indices"], params["limit_indices"]
        strides = params["strides"] or (1,) * len(starts)
        axes = [
            i
            for i, (s, e, d) in enumerate(
                zip(starts, limits, eqn.invars[0].aval.shape, strict=True)
            )
            if not (s == 0 and same_dim(e, d))
        ]
        if not axes:
            return [g.op1("Identity", x)]
        if any(not isinstance(limits[i], int | np.integer) for i in axes):
            raise NotImplementedError("ONNX export: a slice with a symbolic bound.")
        consts = [np.asarray([v[i] for i in axes], np.int64) for v in (starts, limits)]
        strides = np.asarray([strides[i] for i in axes], np.int64)
        value, perm = g.transposes.get(x[0], (x[0], None))
        if perm is not None:  # slice the transpose's input: the transpose moves to the slice
            axes = [perm[i] for i in axes]
        consts += [np.asarray(axes, np.int64), strides]
        out = g.op1("Slice", [value, *(g.const(c, "slice") for c in consts)])
        return [out if perm is None else g.transpose(out, perm)]

    def _p_gather(self, g, x, params, eqn):
        """The gathers of an embedding lookup (`weight[ids]`): whole slices along the
        trailing operand dimensions, the indexed (leading) dimensions clamped as JAX's
        default `mode=clip`/`promise_in_bounds` would."""
        dn, sizes = params["dimension_numbers"], params["slice_sizes"]
        operand_shape = eqn.invars[0].aval.shape
        index_map = tuple(dn.start_index_map)
        kept = [k for k, d in enumerate(index_map) if sizes[d] != operand_shape[d]]
        dims = [index_map[k] for k in kept]
        whole = [d for d in range(len(operand_shape)) if d not in dims]
        out_rank = len(eqn.outvars[0].aval.shape)
        offset = tuple(dn.offset_dims)
        if (
            dims != list(range(len(dims)))
            or any(sizes[d] != 1 for d in dims)
            or any(sizes[d] != operand_shape[d] for d in whole)
            or dn.operand_batching_dims
            or offset != tuple(range(out_rank - len(offset), out_rank))
        ):
            raise NotImplementedError(f"ONNX export: a gather other than a table lookup ({dn}).")
        operand, indices = x
        idx = g.op1("Gather", [indices, g.const(np.asarray(kept, np.int64), "kept")], axis=-1)
        idx = g.op1("Cast", [idx], to=TensorProto.INT64)
        limit = np.asarray([operand_shape[d] - 1 for d in dims], np.int64)
        idx = g.op1(
            "Max", [g.op1("Min", [idx, g.const(limit, "hi")]), g.const(np.zeros_like(limit), "lo")]
        )
        rows = g.op1("GatherND", [operand, idx])
        return [g.op1("Reshape", [rows, g.shape(eqn.outvars[0].aval.shape, infer_one=True)])]

    def _p_iota(self, g, x, params, eqn):
        """`0, 1, ..., n - 1` along one axis of a symbolic size `n` (a `Range`, broadcast)."""
        shape, axis = params["shape"], params["dimension"]
        dtype = np.dtype(params["dtype"])
        size = g.op1("Reshape", [g.dim(shape[axis]), g.const(np.asarray([], np.int64), "scalar")])
        size = g.op1("Cast", [size], to=onnx_dtype(dtype))
        zero, one = g.const(np.asarray(0, dtype)), g.const(np.asarray(1, dtype))
        value = g.op1("Range", [zero, size, one])
        if len(shape) == 1:
            return [value]
        others = [i for i in range(len(shape)) if i != axis]
        value = g.op1("Unsqueeze", [value, g.const(np.asarray(others, np.int64), "axes")])
        return [
            g.op1("Expand", [value, g.shape([1 if i == axis else d for i, d in enumerate(shape)])])
        ]

    def _p_dim_as_value(self, g, x, params, eqn):
        """A symbolic dimension as a scalar (e.g. `x.shape[1]` in arithmetic)."""
        scalar = g.op1(
            "Reshape", [g.dim(params["dim"]), g.const(np.asarray([], np.int64), "scalar")]
        )
        return [g.op1("Cast", [scalar], to=onnx_dtype(eqn.outvars[0].aval.dtype))]

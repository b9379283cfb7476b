"""A jaxpr → ONNX translator for the programs `eqx_lru.export` writes.

Why not a converter from the package index: jax2onnx (0.17) converts these programs
(a `jax.vmap` over `LRUModel.step`, or a `lax.scan` of it) into graphs that onnxruntime
rejects (shape mismatches in its Reshape/Add lowerings, no batching rule for its own
`fori_loop`), and tf2onnx needs TensorFlow. The programs are small and their primitives
few, so this module writes the ONNX graph with the `onnx` package directly:

- the jaxpr is traced by JAX itself (`jax.make_jaxpr`, `jax.vmap` included), with one
  symbolic batch dimension and, for whole sequences, one symbolic length;
- every equation whose inputs are all constants (the model's parameters, literals) is
  evaluated at export time, so the graph holds the *folded* values: batch norm in
  inference mode becomes one scale and one shift, the LRU's transition
  $\\lambda = e^{-e^{\\nu} + i e^{\\theta}}$ and $\\gamma B$ are stored, not recomputed;
- equations whose outputs are never used are dropped; the library's run-time checks
  (`runtime_check`) pass their value through, unchecked, and their predicates are dropped;
- `jit`, `custom_jvp_call` and `custom_vjp_call` are inlined, `scan` becomes an ONNX
  `Loop`; any other primitive outside the table below raises `NotImplementedError`
  naming it;
- the graph is written for onnxruntime, which runs every node as its own kernel: a
  product with a constant is one `MatMul` (`_onnx_dot.py`), the transposes and size-1
  axes that `jax.vmap` leaves are moved past elementwise operators and cancelled
  (`_onnx_sink.py`, `Graph.transpose`), broadcasts are left to the operators that
  broadcast anyway (`Graph.unbroadcast`), and nodes nothing reads are pruned.

Real dtypes only: a complex value anywhere raises (convert with `eqx_lru.to_real`).
"""

import itertools
from collections.abc import Sequence
from typing import Any

import jax
import jax.extend as jex
import numpy as np
import onnx
from onnx import TensorProto, helper

from .._runtime_check import is_runtime_check
from ._onnx_dot import dot_as_matmul
from ._onnx_graph import ELEMENTWISE, Graph, onnx_dtype, prune, same_dim, value_info
from ._onnx_shapes import ShapeOps
from ._onnx_sink import sink

OPSET = 17


class _Translator(ShapeOps):
    """Translate closed jaxprs into ONNX graphs (see the module docstring)."""

    def __init__(self, batch=None):
        self.counter = itertools.count()
        self.batch = batch

    def fresh(self, hint: str) -> str:
        return f"{hint}_{next(self.counter)}"

    # ------------------------------------------------------------------ environment

    def run(self, g: Graph, jaxpr, consts: Sequence[Any], inputs: Sequence[Any]) -> list[Any]:
        """Translate `jaxpr` into `g`. `consts`/`inputs` are NumPy arrays (constants) or
        ONNX names (strings); returns the outputs the same way."""
        env: dict[Any, Any] = {}
        for var, val in zip(jaxpr.constvars, consts, strict=True):
            env[var] = val
        for var, val in zip(jaxpr.invars, inputs, strict=True):
            env[var] = val

        def read(atom):
            if isinstance(atom, jex.core.Literal):
                # JAX types `aval` as the abstract base; a literal's has a dtype.
                dtype = atom.aval.dtype  # pyright: ignore[reportAttributeAccessIssue]
                return np.asarray(atom.val, dtype=dtype)
            return env[atom]

        needed = _needed(jaxpr)
        for eqn in jaxpr.eqns:
            if not any(v in needed for v in eqn.outvars if not _dropped(v)):
                continue
            if is_runtime_check(eqn):  # the value, unchecked: an ONNX model cannot raise
                env[eqn.outvars[0]] = read(eqn.invars[0])
                continue
            vals = [read(v) for v in eqn.invars]
            concrete = all(
                isinstance(d, int | np.integer) for v in eqn.outvars for d in v.aval.shape
            )
            if (
                concrete
                and all(not isinstance(v, str) for v in vals)
                and eqn.primitive.name not in ("scan", "dim_as_value")
            ):
                outs = eqn.primitive.bind(*[jax.numpy.asarray(v) for v in vals], **eqn.params)
                outs = outs if eqn.primitive.multiple_results else [outs]
                outs = [np.asarray(o) for o in outs]
            else:
                outs = self.translate(g, eqn, vals)
            for var, val in zip(eqn.outvars, outs, strict=True):
                if not _dropped(var):
                    env[var] = val
        return [read(v) for v in jaxpr.outvars]

    def name(self, g: Graph, value: Any) -> str:
        """`value` as an ONNX name (constants become initializers)."""
        if isinstance(value, str):
            return value
        value = np.asarray(value)
        onnx_dtype(value.dtype)
        return g.const(value)

    # ------------------------------------------------------------------ primitives

    def translate(self, g: Graph, eqn, vals: list[Any]) -> list[Any]:
        prim, params = eqn.primitive.name, eqn.params
        out_avals = [v.aval for v in eqn.outvars]
        for aval in out_avals:
            onnx_dtype(aval.dtype)
        if prim in ("jit", "pjit", "closed_call", "core_call", "remat", "checkpoint"):
            sub = params.get("jaxpr") or params.get("call_jaxpr")
            return self._inline(g, sub, vals)
        if prim in ("custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"):
            sub = params.get("call_jaxpr") or params.get("fun_jaxpr")
            return self._inline(g, sub, vals)
        if prim == "scan":
            return self._scan(g, eqn, vals)
        if prim == "dot_general":
            product = dot_as_matmul(g, eqn, vals)
            if product is not None:
                return [self._cast_output(g, product, eqn)]
        names = [self.name(g, v) for v in vals]
        if prim in ELEMENTWISE or prim in _BROADCASTING:
            shapes = [v.aval.shape for v in eqn.invars]
            names = g.unbroadcast(names, shapes, out_avals[0].shape)
        handler = getattr(self, f"_p_{prim}", None)
        if handler is not None:
            return handler(g, names, params, eqn)
        if prim in ELEMENTWISE:
            sunk = sink(g, ELEMENTWISE[prim], names, vals)
            return [sunk if sunk is not None else g.op1(ELEMENTWISE[prim], names)]
        raise NotImplementedError(
            f"ONNX export: no translation for the JAX primitive {prim!r} (in {eqn}). Export "
            "as StableHLO, or add it to eqx_lru/export/_onnx.py."
        )

    def _inline(self, g, sub, vals):
        if isinstance(sub, jex.core.ClosedJaxpr):
            return self.run(g, sub.jaxpr, sub.consts, vals)
        return self.run(g, sub, [], vals)

    def _p_integer_pow(self, g, x, params, eqn):
        (x,), y = x, params["y"]
        if y == 2:
            return [g.op1("Mul", [x, x])]
        if y == 3:
            return [g.op1("Mul", [g.op1("Mul", [x, x]), x])]
        exponent = g.const(np.asarray(y, eqn.outvars[0].aval.dtype))
        return [g.op1("Pow", [x, exponent])]

    def _p_rsqrt(self, g, x, params, eqn):
        return [g.op1("Reciprocal", [g.op1("Sqrt", x)])]

    def _p_expm1(self, g, x, params, eqn):
        r"""$e^x - 1 = \tanh(x/2)\,(e^x + 1)$: no cancellation near 0 (ONNX has no Expm1)."""
        dtype = eqn.outvars[0].aval.dtype
        half, one = g.const(np.asarray(0.5, dtype)), g.const(np.asarray(1, dtype))
        tanh = g.op1("Tanh", [g.op1("Mul", [x[0], half])])
        return [g.op1("Mul", [tanh, g.op1("Add", [g.op1("Exp", x), one])])]

    def _p_log1p(self, g, x, params, eqn):
        r"""$\log(1 + x)$ as $\log(u)\, x / (u - 1)$ with $u = 1 + x$ ($x$ where $u = 1$):
        the rounding of $u$ cancels (Goldberg); ONNX has no Log1p."""
        dtype = eqn.outvars[0].aval.dtype
        one = g.const(np.asarray(1, dtype))
        u = g.op1("Add", [x[0], one])
        shifted = g.op1("Sub", [u, one])
        exact = g.op1("Equal", [shifted, g.const(np.asarray(0, dtype))])
        safe = g.op1("Where", [exact, one, shifted])
        ratio = g.op1("Div", [g.op1("Mul", [g.op1("Log", [u]), x[0]]), safe])
        return [g.op1("Where", [exact, x[0], ratio])]

    def _p_ne(self, g, x, params, eqn):
        return [g.op1("Not", [g.op1("Equal", x)])]

    def _p_is_finite(self, g, x, params, eqn):
        # Neither NaN nor ±inf (ONNX has IsNaN and IsInf, no IsFinite).
        return [g.op1("Not", [g.op1("Or", [g.op1("IsNaN", x), g.op1("IsInf", x)])])]

    def _p_square(self, g, x, params, eqn):
        return [g.op1("Mul", [x[0], x[0]])]

    def _p_clamp(self, g, x, params, eqn):
        lo, v, hi = x
        return [g.op1("Max", [g.op1("Min", [v, hi]), lo])]

    def _p_convert_element_type(self, g, x, params, eqn):
        return [g.op1("Cast", x, to=onnx_dtype(params["new_dtype"]))]

    def _p_copy(self, g, x, params, eqn):
        return [g.op1("Identity", x)]

    _p_copy_p = _p_copy

    def _p_select_n(self, g, x, params, eqn):
        pred, *cases = x
        if len(cases) == 1:
            return [cases[0]]
        if eqn.invars[0].aval.dtype == np.bool_:
            return [g.op1("Where", [pred, cases[1], cases[0]])]
        out = cases[0]
        for i, case in enumerate(cases[1:], start=1):
            index = g.const(np.asarray(i, eqn.invars[0].aval.dtype))
            out = g.op1("Where", [g.op1("Equal", [pred, index]), case, out])
        return [out]

    def _p_reduce_sum(self, g, x, params, eqn):
        return self._reduce(g, "ReduceSum", x, params)

    def _p_reduce_max(self, g, x, params, eqn):
        return self._reduce(g, "ReduceMax", x, params)

    def _p_reduce_min(self, g, x, params, eqn):
        return self._reduce(g, "ReduceMin", x, params)

    def _reduce(self, g, op, x, params):
        if op == "ReduceSum":
            axes = g.const(np.asarray(params["axes"], np.int64), "axes")
            return [g.op1(op, [x[0], axes], keepdims=0)]
        return [g.op1(op, [x[0]], axes=list(params["axes"]), keepdims=0)]  # opset 17

    def _p_dot_general(self, g, x, params, eqn):
        (lc, rc), (lb, rb) = params["dimension_numbers"]
        lhs_rank, rhs_rank = (len(v.aval.shape) for v in eqn.invars)
        letters = iter("abcdefghijklmnopqrstuvwxyz")
        lhs = [next(letters) for _ in range(lhs_rank)]
        rhs = [None] * rhs_rank
        for i, j in zip(lc, rc, strict=True):
            rhs[j] = lhs[i]
        for i, j in zip(lb, rb, strict=True):
            rhs[j] = lhs[i]
        rhs = [r or next(letters) for r in rhs]
        batch = [lhs[i] for i in lb]
        out = batch + [lhs[i] for i in range(lhs_rank) if i not in lc and i not in lb]
        out += [rhs[j] for j in range(rhs_rank) if j not in rc and j not in rb]
        equation = f"{''.join(lhs)},{''.join(rhs)}->{''.join(out)}"
        return [self._cast_output(g, g.op1("Einsum", x, equation=equation), eqn)]

    def _cast_output(self, g, result, eqn):
        """`result` in the dtype of `eqn`'s output (a product's `preferred_element_type`)."""
        out_dtype = eqn.outvars[0].aval.dtype
        if out_dtype != eqn.invars[0].aval.dtype:
            result = g.op1("Cast", [result], to=onnx_dtype(out_dtype))
        return result

    def _p_unvmap_any(self, g, x, params, eqn):
        """Equinox's "any element, over the batch too" (its `error_if` predicate)."""
        as_int = g.op1("Cast", x, to=TensorProto.INT32)
        return [g.op1("Cast", [g.op1("ReduceMax", [as_int], keepdims=0)], to=TensorProto.BOOL)]

    def _p_unvmap_max(self, g, x, params, eqn):
        return [g.op1("ReduceMax", x, keepdims=0)]

    def _p_reduce_or(self, g, x, params, eqn):
        as_int = g.op1("Cast", x, to=TensorProto.INT32)
        return [g.op1("Cast", self._reduce(g, "ReduceMax", [as_int], params), to=TensorProto.BOOL)]

    def _p_reduce_and(self, g, x, params, eqn):
        as_int = g.op1("Cast", x, to=TensorProto.INT32)
        return [g.op1("Cast", self._reduce(g, "ReduceMin", [as_int], params), to=TensorProto.BOOL)]

    # ------------------------------------------------------------------ scan → Loop

    def _scan(self, g: Graph, eqn, vals):
        p = eqn.params
        n_consts, n_carry = p["num_consts"], p["num_carry"]
        body: jex.core.ClosedJaxpr = p["jaxpr"]
        consts, carry, xs = (
            vals[:n_consts],
            vals[n_consts : n_consts + n_carry],
            vals[n_consts + n_carry :],
        )
        if p.get("_split_transpose"):
            raise NotImplementedError("ONNX export: a transposed scan.")
        if p["reverse"]:
            raise NotImplementedError("ONNX export: a reverse scan.")
        xs = [self.name(g, v) for v in xs]
        carry_names = [self.name(g, v) for v in carry]
        if not xs:
            raise NotImplementedError("ONNX export: a scan without inputs.")
        trip = g.op1("Shape", [xs[0]], start=0, end=1)
        trip = g.op1("Reshape", [trip, g.const(np.asarray([], np.int64), "scalar")])
        # The body graph: (iteration, condition, *carry) -> (condition, *carry, *ys).
        b = Graph(self.fresh, g.dims)
        i_name, cond_in = self.fresh("iter"), self.fresh("cond")
        body_carry = [self.fresh("carry") for _ in carry]
        x_t = [b.op1("Gather", [x, i_name], axis=0) for x in xs]
        outs = self.run(b, body.jaxpr, [*body.consts], [*consts, *body_carry, *x_t])
        outs = [self.name(b, o) for o in outs]
        new_carry, ys = outs[:n_carry], outs[n_carry:]
        cond_out = b.op1("Identity", [cond_in])
        body_outs = (
            [cond_out]
            + [b.op1("Identity", [c]) for c in new_carry]
            + [b.op1("Identity", [y]) for y in ys]
        )
        avals = [v.aval for v in body.jaxpr.outvars]
        nodes, initializers = prune(b, body_outs)
        graph = helper.make_graph(
            nodes,
            self.fresh("scan_body"),
            [
                helper.make_tensor_value_info(i_name, TensorProto.INT64, []),
                helper.make_tensor_value_info(cond_in, TensorProto.BOOL, []),
            ]
            + [
                value_info(n, v.aval)
                for n, v in zip(
                    body_carry, body.jaxpr.invars[n_consts : n_consts + n_carry], strict=True
                )
            ],
            [helper.make_tensor_value_info(cond_out, TensorProto.BOOL, [])]
            + [value_info(n, a) for n, a in zip(body_outs[1:], avals, strict=True)],
            initializer=initializers,
        )
        true = g.const(np.asarray(True), "true")
        loop_outs = g.op("Loop", [trip, true, *carry_names], n_out=n_carry + len(ys), body=graph)
        return loop_outs


#: Primitives with handlers whose ONNX operators broadcast their operands like `Add`.
_BROADCASTING = frozenset({"select_n", "clamp", "ne"})


def _dropped(var) -> bool:
    return type(var).__name__ == "DropVar"


def _needed(jaxpr) -> set:
    """The variables the outputs of `jaxpr` depend on (dead-code elimination)."""
    needed = {v for v in jaxpr.outvars if not isinstance(v, jex.core.Literal)}
    for eqn in reversed(jaxpr.eqns):
        if any(v in needed for v in eqn.outvars if not _dropped(v)):
            # A run-time check needs only its value: the predicate is not computed.
            invars = eqn.invars[:1] if is_runtime_check(eqn) else eqn.invars
            needed.update(v for v in invars if not isinstance(v, jex.core.Literal))
    return needed


def to_onnx(
    closed: "jex.core.ClosedJaxpr",
    input_names: Sequence[str],
    output_names: Sequence[str],
    *,
    batch=None,
    name: str = "eqx_lru",
    doc: str = "",
) -> onnx.ModelProto:
    """The ONNX model of `closed` (from `jax.make_jaxpr`), whose inputs and outputs get
    `input_names`/`output_names`. `batch`: the symbolic batch dimension of the inputs
    (a `jax.export.symbolic_shape` dimension), `None` if the shapes are concrete. The
    first input must have the batch as its leading dimension."""
    jaxpr = closed.jaxpr
    if len(input_names) != len(jaxpr.invars) or len(output_names) != len(jaxpr.outvars):
        raise ValueError("to_onnx: one name per input and per output.")
    translator = _Translator(batch)
    g = Graph(translator.fresh, [])
    for name, var in zip(input_names, jaxpr.invars, strict=True):
        for axis, d in enumerate(var.aval.shape):
            if not isinstance(d, int | np.integer) and not any(same_dim(d, k) for k, _ in g.dims):
                g.dims.append((d, g.op1("Shape", [name], start=axis, end=axis + 1)))
    outs = translator.run(g, jaxpr, list(closed.consts), list(input_names))
    for out_name, value in zip(output_names, outs, strict=True):
        g.nodes.append(helper.make_node("Identity", [translator.name(g, value)], [out_name]))
    nodes, initializers = prune(g, output_names)
    graph = helper.make_graph(
        nodes,
        name,
        [value_info(n, v.aval) for n, v in zip(input_names, jaxpr.invars, strict=True)],
        [value_info(n, v.aval) for n, v in zip(output_names, jaxpr.outvars, strict=True)],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="eqx_lru",
        doc_string=doc,
    )
    model.ir_version = 8  # onnxruntime >= 1.15 reads it
    onnx.checker.check_model(model)
    return model

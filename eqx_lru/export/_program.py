r"""The programs an export writes: batched functions of named inputs, in inference mode.

A model (or block) is exported through the contract every model and block of the library
follows: the call `model(x, state, *, length=, inference=True) -> (out, state)` on one
sequence, and for streaming `model.init_carry()` and `model.step(carry, x_t, state) ->
(carry, y_t)`. Each program is that contract `jax.vmap`ped over a symbolic `batch`, with a
symbolic `length` where it reads whole sequences:

- `sequence_program`: the parallel call, `(x, length) -> (out,)`;
- `step_program`: one position of `batch` streams, `(x_t, *carry) -> (y_t, *carry)`, the
  carry a flat list of arrays, zeros at the start of a stream;
- `loop_program`: the whole sequence as the step in a loop from a carry, `(x, length,
  *carry) -> (out, *carry)`, `out` the output at position `length - 1` (every valid
  position's, zero at pads, for a model with per-position outputs) and the carry after
  it — for formats that cannot express the parallel scan (ONNX).

With `dt=True` each program also reads time steps (irregular sampling; every core of the
model must take them): `dt` `(batch, length)` after `length`, or `dt_t` `(batch,)` after
`x_t` in the step.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._blocks._block import LRUBlock
from .._cores._core import AbstractRecurrentCore
from .._models._model import LRUModel
from .._models._retrieval import LRURetrievalModel


class ExportError(ValueError):
    """A model, program or format that cannot be exported; the message says what to do."""


def _check_size(record: str, field: str, value: Any) -> None:
    """A positive integer that an int32 holds (token ids and sizes are int32)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not 1 <= value <= np.iinfo(np.int32).max
    ):
        raise ValueError(
            f"{record}: `{field}` must be a positive integer up to 2**31 - 1; got {value!r}."
        )


@dataclasses.dataclass(frozen=True)
class Tokens:
    """Inputs that are token ids: int32, one id per position, in `[0, vocab_size)`."""

    vocab_size: int

    def __post_init__(self):
        _check_size("Tokens", "vocab_size", self.vocab_size)

    def position(self) -> tuple[tuple[int, ...], Any]:
        return (), jnp.int32


@dataclasses.dataclass(frozen=True)
class Features:
    """Inputs that are feature vectors: `(size,)` per position, of `dtype`."""

    size: int
    dtype: Any = jnp.float32

    def __post_init__(self):
        _check_size("Features", "size", self.size)
        try:
            dtype = None if self.dtype is None else jnp.dtype(self.dtype)
        except TypeError:
            dtype = None
        if dtype is None or not (
            jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)
        ):
            raise ValueError(
                f"Features: `dtype` must be a real or integer dtype; got {self.dtype!r}."
            )

    def position(self) -> tuple[tuple[int, ...], Any]:
        return (self.size,), jnp.dtype(self.dtype)


Reads = Tokens | Features


def reads_of(model: eqx.Module) -> Reads:
    """What one position of `model`'s input is: the vocabulary of an `LRUModel` with an
    embedding, the features of one with a linear encoder, `d_model` features for an
    `LRUBlock`. Any other module: an `ExportError` asking for `reads=`."""
    if isinstance(model, LRURetrievalModel):
        model = model.encoder
    if isinstance(model, LRUModel):
        if isinstance(model.encoder, eqx.nn.Embedding):
            return Tokens(int(model.encoder.num_embeddings))
        return Features(int(model.encoder.in_features), model.encoder.weight.dtype)
    if isinstance(model, LRUBlock):
        linear = model.glu.linear
        return Features(int(linear.in_features), linear.weight.dtype)
    raise ExportError(
        f"cannot tell what {type(model).__name__} reads: pass "
        "`reads=eqx_lru.export.Tokens(vocab_size)` (token ids) or "
        "`reads=eqx_lru.export.Features(size, dtype)` (a feature vector per position)."
    )


@dataclasses.dataclass
class Program:
    """A batched function ready for export: `fn(*inputs) -> tuple(outputs)`.

    `inputs`: `(name, shape, dtype)` per input, `"batch"` and `"length"` standing for the
    symbolic dimensions; `outputs`: the output names; `carry`: the carry's layout (name,
    shape, dtype, `"init": "zeros"` per array) where the program takes one; `kind`: the
    program's name in the manifest (`"sequence"`, `"step"`, `"pair"`)."""

    kind: str
    fn: Callable
    inputs: list[tuple[str, tuple, Any]]
    outputs: list[str]
    carry: list[dict[str, Any]] | None = None


def symbolic_specs(program: Program) -> list[jax.ShapeDtypeStruct]:
    """`jax.ShapeDtypeStruct`s of the inputs, `batch` and `length` symbolic (one scope)."""
    batch, length = jax.export.symbolic_shape("batch, length")
    named = {"batch": batch, "length": length}
    return [
        jax.ShapeDtypeStruct(tuple(named.get(d, d) for d in shape), dtype)
        for _, shape, dtype in program.inputs
    ]


def _x_input(reads: Reads, *leading: Any) -> tuple[tuple, Any]:
    shape, dtype = reads.position()
    return (*leading, *shape), dtype


def check_takes_dt(model) -> None:
    """An `ExportError` naming the first core of `model` that takes no time steps."""
    is_core = lambda x: isinstance(x, AbstractRecurrentCore)  # noqa: E731
    for core in (c for c in jax.tree_util.tree_leaves(model, is_leaf=is_core) if is_core(c)):
        if not core.takes_dt:
            raise ExportError(
                f"`dt=True` exports time steps as an input, and {type(core).__name__} takes "
                "none (`takes_dt` is False). Export without `dt`, or use cores that take "
                "them (ComplexLRU, RealLRU, RGLRU, baselines.S5)."
            )


def _steps(dt: bool, *leading: Any) -> list[tuple[str, tuple, Any]]:
    """The time steps' input (none without `dt`)."""
    if not dt:
        return []
    return [("dt" if "length" in leading else "dt_t", leading, jnp.float32)]


def sequence_program(model, state, reads: Reads, *, dt: bool = False) -> Program:
    """The whole-sequence call in inference mode, batched: `(x, length) -> (out,)`; with
    `dt`, `(x, length, dt) -> (out,)`."""
    if dt:
        check_takes_dt(model)

    def fn(x, length, *steps):
        def one(x, length, *steps):
            timed = {"dt": steps[0]} if steps else {}
            out, _ = returned(model(x, state, length=length, inference=True, **timed), "call")
            return out

        return (jax.vmap(one)(x, length, *steps),)

    x_shape, x_dtype = _x_input(reads, "batch", "length")
    inputs = [("x", x_shape, x_dtype), ("length", ("batch",), jnp.int32)]
    return Program("sequence", fn, inputs + _steps(dt, "batch", "length"), ["out"])


def _kind(value) -> str:
    shape = getattr(value, "shape", None)
    return type(value).__name__ + ("" if shape is None else f" of shape {tuple(shape)}")


def returned(result, what: str) -> tuple[Any, Any]:
    """The two values the model's `what` (`"call"`: `(out, state)`, `"step"`: `(carry,
    y_t)`) returns, its output one array; an `ExportError` naming what it returned
    otherwise (indexing an output array for its first value was silently wrong)."""
    names = "(out, state)" if what == "call" else "(carry, y_t)"
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise ExportError(
            f"the model's {what} must return the pair {names} (the model contract of the "
            f"export guide); got {_kind(result)}."
        )
    out = result[0] if what == "call" else result[1]
    if not isinstance(out, jax.Array):
        label = "out" if what == "call" else "y_t"
        raise ExportError(
            f"the model's {what} must return {names} with `{label}` one array; got {_kind(out)}."
        )
    return result[0], result[1]


def _check_carry(carry, treedef, leaves: list) -> None:
    """An `ExportError` unless `carry` has the structure, shapes and dtypes of `leaves`
    (`init_carry()`'s, flattened to `treedef`)."""
    got = jax.tree_util.tree_leaves(carry)
    if jax.tree_util.tree_structure(carry) != treedef or any(
        jnp.shape(a) != jnp.shape(b) or jnp.result_type(a) != jnp.result_type(b)
        for a, b in zip(got, leaves, strict=True)
    ):
        mine = [f"{jnp.result_type(a)}{list(jnp.shape(a))}" for a in got]
        own = [f"{jnp.result_type(b)}{list(jnp.shape(b))}" for b in leaves]
        raise ExportError(
            f"the model's step must return a carry like init_carry()'s ({', '.join(own)}); "
            f"got {', '.join(mine)}."
        )


def _carry_names(tree) -> list[str]:
    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]:
        parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
        names.append(".".join(["carry", *parts]))
    return names


def check_causal(model, what: str) -> None:
    """An `ExportError` if a block of `model` is bidirectional (`what` runs it as a
    recurrence, which needs every output to depend on earlier positions only)."""
    is_block = lambda x: isinstance(x, LRUBlock)  # noqa: E731
    blocks = [b for b in jax.tree_util.tree_leaves(model, is_leaf=is_block) if is_block(b)]
    if any(b.reverse_core is not None for b in blocks):
        raise ExportError(
            f"{what} needs a causal model, and this model's blocks are bidirectional (each "
            "output depends on later positions). Export the whole sequence as StableHLO "
            "instead."
        )


def step_program(model, state, reads: Reads, *, dt: bool = False) -> Program:
    """One position of a batch of streams: `(x_t, *carry) -> (y_t, *carry)`; with `dt`,
    `(x_t, dt_t, *carry) -> (y_t, *carry)`."""
    if isinstance(model, LRURetrievalModel):
        raise ExportError(
            "a two-tower LRURetrievalModel has no streaming step (its head needs both "
            "documents whole); export its whole-pair program (program='pair')."
        )
    check_causal(model, "the step program (streaming)")
    if not (hasattr(model, "init_carry") and hasattr(model, "step")):
        raise ExportError(
            f"{type(model).__name__} has no `init_carry()` and `step(carry, x_t, state)`: "
            "the step program (and ONNX's whole sequence, a loop over the step) needs "
            "both. Export the whole sequence as StableHLO, or add them."
        )
    if dt:
        check_takes_dt(model)
    try:
        init = model.init_carry()
    except (TypeError, ValueError) as e:
        raise ExportError(f"the step program: {e}") from None
    leaves, treedef = jax.tree_util.tree_flatten(init)
    names = _carry_names(init)
    for name, leaf in zip(names, leaves, strict=True):
        if np.any(np.asarray(leaf) != 0):
            raise ExportError(
                f"the step program: the initial carry {name} is not zero; the manifest "
                "describes a carry that starts at zeros only."
            )

    def fn(x_t, *rest):
        def one(x_t, *rest):
            timed = {"dt": rest[0]} if dt else {}
            carry = jax.tree_util.tree_unflatten(treedef, rest[1:] if dt else rest)
            carry, y_t = returned(model.step(carry, x_t, state, **timed), "step")
            _check_carry(carry, treedef, leaves)
            return (y_t, *jax.tree_util.tree_leaves(carry))

        return jax.vmap(one)(x_t, *rest)

    x_shape, x_dtype = _x_input(reads, "batch")
    carry = [(n, ("batch", *leaf.shape), leaf.dtype) for n, leaf in zip(names, leaves, strict=True)]
    info = [
        {"name": n, "shape": list(s), "dtype": str(np.dtype(d)), "init": "zeros"}
        for n, s, d in carry
    ]
    inputs = [("x_t", x_shape, x_dtype), *_steps(dt, "batch"), *carry]
    return Program("step", fn, inputs, ["y_t", *_next(names)], info)


def _next(names: list[str]) -> list[str]:
    return ["next_" + n for n in names]


def per_position(model, state, reads: Reads) -> bool:
    """Whether `model`'s call returns one output per position (a leading `length` axis)
    rather than one for the sequence: read off its output shape, the call made as
    `sequence_program` makes it (a symbolic length, `length=` an int32 scalar), so that a
    model takes the same contract in every format."""
    (length,) = jax.export.symbolic_shape("length")
    shape, dtype = _x_input(reads, length)

    def call(x, n):
        return returned(model(x, state, length=n, inference=True), "call")[0]

    n = jax.ShapeDtypeStruct((), jnp.int32)
    out = jax.eval_shape(call, jax.ShapeDtypeStruct(shape, dtype), n)
    return out.ndim >= 1 and not isinstance(out.shape[0], int) and out.shape[0] == length


def loop_program(model, state, reads: Reads, *, dt: bool = False) -> Program:
    """The whole sequence as the step in a loop, from a carry: `(x, length, *carry) ->
    (out, *carry)`, with `dt` `(x, length, dt, *carry) -> (out, *carry)` (see the module
    docstring)."""
    step = step_program(model, state, reads, dt=dt)
    each = per_position(model, state, reads)

    def fn(x, length, *rest):
        steps, carry = (rest[0], rest[1:]) if dt else (None, rest)

        def body(loop, xs):
            t, last, carry = loop
            x_t, dt_t = xs
            y_t, *new = step.fn(x_t, *([] if dt_t is None else [dt_t]), *carry)
            valid, final = t < length, t == length - 1

            def pick(mask, a, b):
                return jnp.where(mask.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)

            carry = [pick(valid, a, b) for a, b in zip(new, carry, strict=True)]
            last = pick(final, y_t, last)
            return (t + 1, last, carry), (pick(valid, y_t, jnp.zeros_like(y_t)) if each else None)

        first = [] if steps is None else [steps[:, 0]]
        y0 = jax.eval_shape(step.fn, x[:, 0], *first, *carry)[0]
        start = (jnp.zeros((), jnp.int32), jnp.zeros(y0.shape, y0.dtype), list(carry))
        xs = (jnp.swapaxes(x, 0, 1), None if steps is None else jnp.swapaxes(steps, 0, 1))
        (_, last, carry), ys = jax.lax.scan(body, start, xs)
        return (last if ys is None else jnp.swapaxes(ys, 0, 1), *carry)  # ys: None unless each

    x_shape, x_dtype = _x_input(reads, "batch", "length")
    inputs = [("x", x_shape, x_dtype), ("length", ("batch",), jnp.int32)]
    inputs += [*_steps(dt, "batch", "length"), *step.inputs[2 if dt else 1 :]]
    assert step.carry is not None  # for the type checker: a step program has its carry
    n = len(step.carry)
    return Program("sequence", fn, inputs, ["out", *step.outputs[1 : 1 + n]], step.carry)

r"""What an exported program checks: a row with an invalid input gives NaN, in every format.

Called from JAX, the library raises on a `length` outside $[1, L]$ ($L$ the padded length)
and on a token id outside $[0, V)$ at a valid position. A serialised program cannot raise
(`_runtime_check.py`), and without a check the formats disagreed: a `length` of 0 gave
all-zero logits from ONNX (class 0, which looks like an answer) and NaN from StableHLO.
`guarded(program, reads)` wraps every program that `eqx_lru.export.export` builds, before
it is serialised, so every format computes the same check:

- `invalid` per row: $\text{length} < 1$ or $\text{length} > L$ (for a pair, either
  document's), or, for token ids, $x_t \notin [0, V)$ at a position $t < \text{length}$ (the
  step program: $x_t \notin [0, V)$); with time steps, a $\Delta t$ that is not positive,
  normal (at least the dtype's smallest normal number, as in JAX) and finite at a position
  $t < \text{length}$ (the step program: $\Delta t_t$);
- the program runs on the row with its length clamped into $[1, L]$ (ids are clamped by
  the lookup, as in JAX), and then **every floating-point output of an invalid row is
  NaN**: the output and, for a step or loop program, the next carry (a stream fed an
  invalid token stays NaN until its carry is reset to zeros). Integer outputs are kept.

Why NaN and not a separate "valid" output: the program's signature stays the one the
manifest has always described (callers that unpack `y_t, *carry` are unchanged), and NaN
does not stay in one place: any arithmetic on it (a softmax, a loss, an average over a
batch, the next step) is NaN too, where a flag is easy to drop. Note that an `argmax` of a
NaN row is 0 in NumPy: test `isfinite` before reading a class.
"""

from typing import Any

import jax.numpy as jnp
from jax import lax

from ._program import Program, Reads, Tokens

ON_FAILURE = "every floating-point output of the row (the carry included) is NaN"


def checks_of(program: Program, reads: Reads) -> list[dict[str, str]]:
    """The checks `guarded(program, reads)` performs, as the manifest lists them."""
    names = [name for name, _, _ in program.inputs]
    shapes = {name: shape for name, shape, _ in program.inputs}
    dtypes = {name: dtype for name, _, dtype in program.inputs}
    out = []
    if "length" in names:
        axis = len(shapes["length"])  # x: (batch, [2,] length, ...)
        bound = f"1 <= length <= x.shape[{axis}] (the padded length)"
        out.append({"check": "length", "rule": bound, "on_failure": ON_FAILURE})
    if isinstance(reads, Tokens):
        where = " at every position before length" if "length" in names else ""
        rule = f"0 <= {names[0]} < {reads.vocab_size}{where}"
        out.append({"check": "token_ids", "rule": rule, "on_failure": ON_FAILURE})
    steps = _steps_name(names)
    if steps is not None:
        where = " at every position before length" if "length" in names else ""
        tiny = float(jnp.finfo(dtypes[steps]).tiny)
        rule = f"{steps} >= {tiny:.9g} (a normal number) and finite{where}"
        out.append({"check": "dt", "rule": rule, "on_failure": ON_FAILURE})
    return out


def _steps_name(names: list[str]) -> str | None:
    """The program's time-step input (`dt` per position, `dt_t` for a step), if any."""
    return next((n for n in ("dt", "dt_t") if n in names), None)


def _bad_steps(dt, length):
    """Per row: a time step that is not positive, normal and finite (before `length`, if
    given): the JAX model refuses a subnormal step (`_cores._dt.check_dt`; XLA flushes it
    to zero), so the exported programs do too, in every format's runtime."""
    bad = ~((dt >= jnp.finfo(dt.dtype).tiny) & jnp.isfinite(dt))
    if length is None:
        return bad if bad.ndim == 1 else jnp.any(bad, axis=1)
    position = lax.broadcasted_iota(length.dtype, dt.shape, 1)
    return jnp.any(bad & (position < length[:, None]), axis=1)


def _invalid(x, length, reads: Reads):
    """Per row: whether its inputs break a check; and `length` clamped into range."""
    tokens = isinstance(reads, Tokens)
    outside = (x < 0) | (x >= reads.vocab_size) if tokens else None
    if length is None:
        return outside, None
    axis = length.ndim  # x: (batch, [2,] length, ...), length: (batch, [2])
    size = x.shape[axis]
    bad = (length < 1) | (length > size)
    if tokens:
        position = lax.broadcasted_iota(length.dtype, x.shape[: axis + 1], axis)
        bad = bad | jnp.any(outside & (position < length[..., None]), axis=axis)
    if bad.ndim > 1:  # a pair: either document
        bad = jnp.any(bad, axis=tuple(range(1, bad.ndim)))
    return bad, jnp.clip(length, 1, size)


def _poison(value, bad):
    if not jnp.issubdtype(value.dtype, jnp.inexact):
        return value
    mask = jnp.expand_dims(bad, tuple(range(1, value.ndim)))
    return jnp.where(mask, jnp.asarray(jnp.nan, value.dtype), value)


def guarded(program: Program, reads: Reads) -> Program:
    """`program` computing its checks (`checks_of`): the row of an invalid input gets NaN
    in every floating-point output (see the module docstring). A program that reads
    feature vectors and no length checks nothing and is returned as it is."""
    names = [name for name, _, _ in program.inputs]
    has_length = "length" in names
    steps = _steps_name(names)
    if not has_length and steps is None and not isinstance(reads, Tokens):
        return program
    if has_length and names.index("length") != 1:
        raise ValueError(f"guarded: `length` must be the second input, got {names}.")

    def fn(x, *rest: Any):
        length = rest[0] if has_length else None
        bad, clamped = _invalid(x, length, reads)
        if steps is not None:
            bad_steps = _bad_steps(rest[names.index(steps) - 1], length)
            bad = bad_steps if bad is None else bad | bad_steps
        if has_length:
            rest = (clamped, *rest[1:])
        return tuple(_poison(out, bad) for out in program.fn(x, *rest))

    return Program(program.kind, fn, program.inputs, program.outputs, program.carry)

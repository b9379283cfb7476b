r"""The whole-pair program of a two-tower `LRURetrievalModel`.

`(x, length) -> (out,)`: `x` `(batch, 2, length, ...)` both documents of each pair, each
padded to the common `length`; `length` `(batch, 2)` their valid lengths; `out` the class
logits `(batch, classes)`. There is no step program: the head needs both documents whole.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._models._retrieval import LRURetrievalModel
from ._program import ExportError, Program, Reads, loop_program, sequence_program


def _check_pair(model) -> None:
    if not isinstance(model, LRURetrievalModel):
        raise ExportError(
            f"program='pair' exports a two-tower LRURetrievalModel, not a "
            f"{type(model).__name__}: use program='sequence' (or 'step')."
        )


def _paired(program: Program) -> Program:
    """`program` (the call over a batch of pairs) with the pair's input shapes."""
    x_name, x_shape, x_dtype = program.inputs[0]
    inputs = [(x_name, ("batch", 2, *x_shape[1:]), x_dtype), ("length", ("batch", 2), jnp.int32)]
    return Program("pair", program.fn, inputs, program.outputs)


def pair_program(model, state, reads: Reads) -> Program:
    """The two-tower model's call in inference mode over a batch of pairs."""
    _check_pair(model)
    return _paired(sequence_program(model, state, reads))


class _Streamed(eqx.Module):
    """A Retrieval model's encoder as a recurrence: one document, the step in a loop over
    its positions from a zero carry (`loop`, the `fn` of `loop_program`; `carry` the
    shapes and dtypes of its carry for one stream), called as `LRURetrievalModel` calls
    its encoder: `(x, state, length=) -> (pooled, state)`."""

    loop: Callable
    carry: tuple[tuple[tuple[int, ...], Any], ...] = eqx.field(static=True)

    def __call__(self, x, state, *, length, dt=None, key=None, inference=None):
        # `LRURetrievalModel` passes its (absent) time steps on; a pair with steps is
        # refused before any program is built (`export`).
        assert dt is None, "pairs are exported without time steps"
        del key, inference
        carry = [jnp.zeros((1, *shape), dtype) for shape, dtype in self.carry]
        return self.loop(x[None], length[None], *carry)[0][0], state


def pair_loop_program(model, state, reads: Reads) -> Program:
    """The whole pair with each document's encoder run as a recurrence (`_Streamed`), for
    formats that cannot express the parallel scan (ONNX)."""
    _check_pair(model)
    loop = loop_program(model.encoder, state, reads)
    carry = tuple((tuple(shape[1:]), np.dtype(dtype)) for _, shape, dtype in loop.inputs[2:])
    streamed = eqx.tree_at(lambda m: m.encoder, model, _Streamed(loop.fn, carry))
    return _paired(sequence_program(streamed, state, reads))

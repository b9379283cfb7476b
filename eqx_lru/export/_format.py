r"""Export formats: each one record, so a new format is one record plus its translator.

A `Format` says everything the export needs to know about a format: its `name`, the file
`suffix`, whether it needs the `real` form (no complex number), which `programs` it takes
and how each is built for it (a builder `(model, state, reads) -> Program`), and how a
built program becomes bytes (`serialise(program, description) -> bytes`). Nothing in
`eqx_lru.export` branches on a format's name: `export(model, state, format=MY_FORMAT)`
takes any record.
"""

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType

import jax

from ._pair import pair_loop_program, pair_program
from ._program import (
    ExportError,
    Program,
    loop_program,
    sequence_program,
    step_program,
    symbolic_specs,
)

Builder = Callable[..., Program]


@dataclasses.dataclass(frozen=True)
class Format:
    """One export format.

    **Fields:**

    - `name`: how users and manifests name it (`"stablehlo"`, `"onnx"`).
    - `suffix`: the artifact's file suffix (`".stablehlo"`).
    - `real`: `True` if the format computes in real arithmetic only: the model is converted
        to its real form first (`eqx_lru.to_real`), and a core without one is refused.
    - `programs`: the programs it takes, each name (`"sequence"`, `"step"`, `"pair"`)
        mapped to the builder `(model, state, reads) -> Program` of that program for this
        format (e.g. ONNX's `"sequence"` is `loop_program`, a loop over the step).
    - `serialise`: `(program, description) -> bytes`, the artifact of a built program.
    """

    name: str
    suffix: str
    real: bool
    programs: Mapping[str, Builder]
    serialise: Callable[[Program, str], bytes]


def _stablehlo(program: Program, description: str) -> bytes:
    """`jax.export` of `program` (symbolic `batch` and `length`), serialised."""
    del description  # a serialised `Exported` has no field for it
    exported = jax.export.export(jax.jit(program.fn))(*symbolic_specs(program))
    return bytes(exported.serialize())


def _onnx(program: Program, description: str) -> bytes:
    """The ONNX model of `program` (`_onnx.py`, a jaxpr → ONNX translator), serialised."""
    try:
        from . import _onnx
    except ImportError as e:
        raise ExportError(
            f"ONNX export needs the `onnx` package ({e}): pip install 'eqx_lru[export]'."
        ) from None
    specs = symbolic_specs(program)
    closed = jax.make_jaxpr(program.fn)(*specs)
    names = [name for name, _, _ in program.inputs]
    try:
        model = _onnx.to_onnx(
            closed, names, program.outputs, batch=specs[0].shape[0], doc=description
        )
    except (TypeError, NotImplementedError) as e:
        raise ExportError(str(e)) from None
    return model.SerializeToString()


#: `jax.export`'s serialised StableHLO, read back with `jax.export.deserialize` in any
#: Python with JAX (no eqx_lru needed); keeps the model's form (complex states stay
#: complex) and runs the whole sequence in parallel.
STABLEHLO = Format(
    name="stablehlo",
    suffix=".stablehlo",
    real=False,
    programs=MappingProxyType(
        {"sequence": sequence_program, "step": step_program, "pair": pair_program}
    ),
    serialise=_stablehlo,
)

#: An ONNX model (opset 17) run by onnxruntime: the real form, constants folded, the whole
#: sequence as an ONNX `Loop` over the step (from a carry, returning the carry after the
#: last valid position). Needs the `export` extra (`onnx`).
ONNX = Format(
    name="onnx",
    suffix=".onnx",
    real=True,
    programs=MappingProxyType(
        {"sequence": loop_program, "step": step_program, "pair": pair_loop_program}
    ),
    serialise=_onnx,
)

#: The formats `eqx_lru.export.export(format="...")` knows by name.
FORMATS: Mapping[str, Format] = MappingProxyType({f.name: f for f in (STABLEHLO, ONNX)})

"""Export a model or block of the library out of JAX: StableHLO (`jax.export`) and ONNX
(the `export` extra), the whole-sequence and the step program, with a manifest.

    exported = eqx_lru.export.export(model, state, format="onnx", program="step")
    eqx_lru.export.write(exported, "model.onnx")  # and model.onnx.json, the manifest

See the export guide of the documentation.
"""

from ._export import Exported as Exported
from ._export import export as export
from ._export import write as write
from ._format import FORMATS as FORMATS
from ._format import ONNX as ONNX
from ._format import STABLEHLO as STABLEHLO
from ._format import Format as Format
from ._pair import pair_loop_program as pair_loop_program
from ._pair import pair_program as pair_program
from ._prepare import prepare as prepare
from ._program import ExportError as ExportError
from ._program import Features as Features
from ._program import Program as Program
from ._program import Tokens as Tokens
from ._program import loop_program as loop_program
from ._program import sequence_program as sequence_program
from ._program import step_program as step_program
from ._program import symbolic_specs as symbolic_specs

__all__ = [
    "FORMATS",
    "ONNX",
    "STABLEHLO",
    "ExportError",
    "Exported",
    "Features",
    "Format",
    "Program",
    "Tokens",
    "export",
    "loop_program",
    "pair_loop_program",
    "pair_program",
    "prepare",
    "sequence_program",
    "step_program",
    "symbolic_specs",
    "write",
]

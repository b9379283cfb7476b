"""Export a trained LRA run out of JAX: a serialized StableHLO program or an ONNX model.

    python -m experiments.export --run OUT --format stablehlo|onnx [--step] [--dest DIR]

reads the best weights of a `python -m experiments.lra.train` run that the trainer trusts
(`_run.py`) and writes them with the library's `eqx_lru.export` (`_command.py`), an
artifact and its JSON manifest, into `DIR` (default `OUT/export/`); `_cli.py` is the
command line. Which weights, the programs, the formats and what an exported program
checks: [exporting a model](../../docs/guides/export.md).

The names below are imported when first used, so that the command line answers `--help`
and a bad flag before JAX is imported.
"""

from typing import TYPE_CHECKING

from experiments.runs.lazy import lazy

if TYPE_CHECKING:
    from eqx_lru.export import ExportError as ExportError
    from eqx_lru.export import prepare as prepare

    from ._cli import main as main
    from ._command import FORMATS as FORMATS
    from ._command import export_run as export_run
    from ._run import Run as Run
    from ._run import load_run as load_run

__all__ = [
    "ExportError",
    "FORMATS",
    "Run",
    "load_run",
    "prepare",
    "export_run",
    "main",
]

#: Where each public name lives (relative to this package, or absolute).
_HOMES = {
    "ExportError": "eqx_lru.export",
    "prepare": "eqx_lru.export",
    "main": "._cli",
    "FORMATS": "._command",
    "export_run": "._command",
    "Run": "._run",
    "load_run": "._run",
}


__getattr__, __dir__ = lazy(globals(), _HOMES)

"""The command line of `python -m experiments.export` (see the export guide). It is parsed
before JAX is imported: `--help` and a bad flag answer at once."""

import argparse
import sys
from collections.abc import Sequence

from ..runs.flags import output_folder, report_os_errors

__all__ = ["main"]

#: The choices of `--format`: `eqx_lru.export.FORMATS` (a test checks they agree), named
#: here so that the parser does not import the library.
FORMATS = ("stablehlo", "onnx")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.export",
        description="Export the best weights of an LRA trainer run to StableHLO or ONNX.",
    )
    parser.add_argument("--run", required=True, help="the run folder (the trainer's --out)")
    parser.add_argument("--format", required=True, choices=FORMATS, help="stablehlo or onnx")
    parser.add_argument(
        "--step",
        action="store_true",
        help="export one streaming step (state in, state out) instead of the whole sequence [off]",
    )
    parser.add_argument(
        "--dest", type=output_folder, default=None, help="output folder [RUN/export]"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files at the artifact's or manifest's name that export did not write "
        "(without it they are kept and the export refused) [off]",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; returns the exit status (user errors: one `error:` line, status 2)."""
    return report_os_errors(_main)(argv)


def _main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    from eqx_lru.export import ExportError

    from ._command import export_run

    try:
        artifact = export_run(
            args.run, args.format, step=args.step, dest=args.dest, overwrite=args.overwrite
        )
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {artifact} and {artifact.name}.json", file=sys.stderr)
    return 0

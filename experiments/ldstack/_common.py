"""The command line and output helpers of `experiments/paper`, writing to
`experiments/ldstack/figures/` by default."""

import argparse
from pathlib import Path

from experiments.paper.common import parse_args as _parse_args
from experiments.paper.common import plt, save_figure, save_json

DEFAULT_OUT = Path(__file__).resolve().parent / "figures"

__all__ = ["DEFAULT_OUT", "parse_args", "plt", "save_figure", "save_json"]


def parse_args(argv: list[str] | None, doc: str | None) -> argparse.Namespace:
    """`--fast`, `--out DIR` (default `experiments/ldstack/figures/`), `--seed N`."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--out" or a.startswith("--out=") for a in argv):
        argv += ["--out", str(DEFAULT_OUT)]
    return _parse_args(argv, doc)

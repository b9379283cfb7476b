"""The command line every figure script of `experiments/paper` and `experiments/ldstack`
shares: `--fast`, `--out DIR`, `--seed N`, `--overwrite`.

Argparse only (no JAX, NumPy or Matplotlib here): a script calls `parse_early` before its
heavy imports, so that `python -m experiments.paper.NAME --help` and a bad flag are
answered at once; `parse_args` is the same parse for `main(argv)`. A script writes
`NAME.png` and `NAME.json` under `--out`, and refuses to replace them without
`--overwrite`.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from experiments.runs.flags import NATURAL, add_overwrite, output_folder, refuse_existing

__all__ = ["LDSTACK_FIGURES", "PAPER_FIGURES", "parse_args", "parse_early"]

_REPO = Path(__file__).resolve().parents[2]
#: Where the scripts of `experiments/paper` and of `experiments/ldstack` write by default.
PAPER_FIGURES = _REPO / "experiments" / "paper" / "figures"
LDSTACK_FIGURES = _REPO / "experiments" / "ldstack" / "figures"


def _prog() -> str | None:
    """`python -m experiments.paper.NAME` when run so (argparse's default otherwise)."""
    script = Path(sys.argv[0]).resolve()
    if script.suffix == ".py" and script.is_relative_to(_REPO / "experiments"):
        return "python -m " + ".".join(script.relative_to(_REPO).with_suffix("").parts)
    return None


def _parser(doc: str | None, default_out: Path) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=_prog(), description=(doc or "").strip().split("\n")[0])
    parser.add_argument(
        "--fast", action="store_true", help="tiny sizes (seconds; used by the test suite) [off]"
    )
    shown = default_out.relative_to(_REPO) if default_out.is_relative_to(_REPO) else default_out
    parser.add_argument(
        "--out", type=output_folder, default=default_out, help=f"output folder [{shown}]"
    )
    parser.add_argument("--seed", type=NATURAL, default=0, help="PRNG seed [0]")
    add_overwrite(parser)
    return parser


def parse_args(
    argv: Sequence[str] | None,
    doc: str | None,
    name: str,
    *,
    default_out: Path = PAPER_FIGURES,
) -> argparse.Namespace:
    """The flags, checked: a bad value, an unwritable `--out`, or `NAME.png`/`NAME.json`
    there already without `--overwrite`, is one `error:` line (status 2). `doc`: the
    script's docstring, whose first line describes it in `--help`."""
    parser = _parser(doc, default_out)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    outputs = [args.out / f"{name}.{suffix}" for suffix in ("png", "json")]
    refuse_existing(parser, outputs, overwrite=args.overwrite)
    return args


def parse_early(
    module: str, doc: str | None, name: str, *, default_out: Path = PAPER_FIGURES
) -> None:
    """Under `python -m` (`module == "__main__"`): parse `sys.argv` now, which answers
    `--help` and refuses a bad flag before the script's heavy imports; `main` parses
    again (the same checks, instantly)."""
    if module == "__main__":
        parse_args(sys.argv[1:], doc, name, default_out=default_out)

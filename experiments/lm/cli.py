"""The command line of `python -m experiments.lm`: `train`, `sample` and `export`, parsed
before anything imports JAX (`--help` and a bad flag answer at once; `train.main` runs
the command).

`train`'s settings flags are generated from `LMConfig`'s fields (help line, check, choices,
and the default of each preset); the flags of the invocation (`--out`, `--resume`,
`--stop-at`, `--time-limit`, `--no-progress`) are not settings of the run; both are made
as the LRA trainer's are (`runs.cli`). A bad value is refused when the command line is
parsed, as one `error: argument --flag: ...` line.
"""

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ..runs import cli as run_cli
from ..runs.flags import NONNEGATIVE_FLOAT32, POSITIVE_INT, SEED, number, output_folder
from ..runs.numbers import FLOAT32_TINY
from ..runs.settings import typed
from .config import PRESETS, LMConfig, utf8_text

__all__ = ["parser", "parse_args", "given", "text_flag", "utf8_path"]


#: An argparse `type` for text flags: UTF-8 only (`config.utf8_text`).
text_flag = typed(utf8_text)


def utf8_path(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """The argparse `type` `kind` (a path) for UTF-8 text only."""

    def parse(value: str):
        return kind(text_flag(value))

    parse.__name__ = getattr(kind, "__name__", "value")
    return parse


def _temperature(value: str) -> float:
    """0 (the likeliest byte), or a normal float32 (the logits are divided by it)."""
    t = NONNEGATIVE_FLOAT32(value)
    if 0 < t < FLOAT32_TINY:
        raise argparse.ArgumentTypeError(
            f"expected 0 or a number >= {FLOAT32_TINY:g} (a normal float32: the logits are "
            f"divided by it), got {value!r}"
        )
    return t


_temperature.__name__ = "a finite number: 0, or a normal float32"


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _default_text(field: dataclasses.Field) -> str:
    """The default of `field` in words: the standard library (the corpus), else each
    preset's value."""
    if field.name == "corpus":
        return "standard library"
    values = {p: getattr(LMConfig(**over), field.name) for p, over in PRESETS.items()}
    if len(set(map(repr, values.values()))) == 1:
        return _shown(next(iter(values.values())))
    return ", ".join(f"{p} {_shown(v)}" for p, v in values.items())


def _settings(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("settings (defaults: the preset's; with --resume the run's)")
    run_cli.add_settings(LMConfig, lambda record: group, _default_text)


def _train(p: argparse.ArgumentParser) -> None:
    run_cli.add_run_folder(p, text=text_flag)
    run_cli.add_stopping(p)
    run_cli.add_no_progress(p)
    _settings(p)


def _sample(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=text_flag, help="a run folder written by `train`")
    p.add_argument(
        "--prompt", default="", type=text_flag, help="the text to continue ['': a file's start]"
    )
    p.add_argument("--length", type=POSITIVE_INT, default=400, help="bytes to write [400]")
    p.add_argument(
        "--temperature",
        type=_temperature,
        default=0.8,
        help="divide the logits by this; 0 picks the likeliest byte [0.8]",
    )
    p.add_argument(
        "--top-k",
        type=number(int, low=1, high=256, open_high=False),
        default=40,
        help="sample among the K likeliest bytes (256: all) [40]",
    )
    p.add_argument("--seed", type=SEED, default=0, help="the sampling key [0]")
    p.add_argument(
        "--form",
        choices=("complex", "real"),
        help="run the trained weights in this form (eqx_lru.to_real/to_complex) [the run's]",
    )
    p.add_argument("--samples", type=POSITIVE_INT, default=1, help="how many samples [1]")
    p.add_argument(
        "--raw",
        action="store_true",
        help="write the bytes as they are; by default a byte that is not printable text "
        "(a control byte but tab and newline, NUL: the start of a file, or invalid UTF-8) is "
        "written as \\xNN [off]",
    )


def _export(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, type=text_flag, help="a run folder written by `train`")
    p.add_argument("--format", required=True, choices=("stablehlo", "onnx"), help="the format")
    p.add_argument(
        "--step",
        action="store_true",
        help="export one streaming step (carry in, carry out) instead of the whole sequence [off]",
    )
    p.add_argument("--dest", type=utf8_path(output_folder), help="output folder [RUN/export]")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace files at the artifact's or manifest's name that export did not write "
        "(by default they are kept and the export refused) [off]",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.lm",
        description="A byte-level LRU language model of the Python standard library's "
        "source: train it (truncated BPTT over long streams), sample from it, export it.",
    )
    commands = p.add_subparsers(dest="command", required=True, metavar="{train,sample,export}")
    _train(commands.add_parser("train", help="train (or --resume) a run"))
    _sample(commands.add_parser("sample", help="write text from a run's weights"))
    _export(commands.add_parser("export", help="export a run's model (eqx_lru.export)"))
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line `argv` (default `sys.argv[1:]`) parsed; a bad flag, or `train
    --resume` with `--overwrite`, is argparse's one `error:` line and `SystemExit(2)`."""
    p = parser()
    args = p.parse_args(argv)
    if args.command == "train":
        run_cli.refuse_resume_and_overwrite(p, args)
    return args


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line sets (the unset flags are None)."""
    return run_cli.given(args, LMConfig)

"""The command line of `python -m experiments.lm`: `train`, `sample` and `export`.

`train`'s settings flags are generated from `LMConfig`'s fields (help line, check, choices,
and the default of each preset); the flags of the invocation (`--out`, `--resume`,
`--stop-at`, `--time-limit`, `--no-progress`) are not settings of the run. A bad value is
refused when the command line is parsed, as one `error: argument --flag: ...` line.
"""

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from ..runs.flags import POSITIVE_INT, flag, number, output_folder
from .config import PRESETS, LMConfig

__all__ = ["parser", "parse_args", "given"]


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _default_text(name: str) -> str:
    values = {p: getattr(LMConfig(**over), name) for p, over in PRESETS.items()}
    if len(set(map(repr, values.values()))) == 1:
        return _shown(next(iter(values.values())))
    return ", ".join(f"{p} {_shown(v)}" for p, v in values.items())


def _settings(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("settings (defaults: the preset's; with --resume the run's)")
    for field in dataclasses.fields(LMConfig):
        meta = field.metadata
        if meta["role"] == "record":
            continue
        kwargs: dict[str, Any] = dict(dest=field.name, default=None)
        if meta["choices"] is not None:
            kwargs["choices"] = meta["choices"]
        elif meta["check"] is not None:
            kwargs["type"] = meta["check"]
        default = "standard library" if field.name == "corpus" else _default_text(field.name)
        group.add_argument(flag(field.name), help=f"{meta['help']} [{default}]", **kwargs)


def _train(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="run folder: metrics, curve, checkpoints")
    p.add_argument("--resume", action="store_true", help="continue the run in OUT exactly")
    p.add_argument("--stop-at", type=POSITIVE_INT, help="checkpoint and exit after this step")
    p.add_argument(
        "--time-limit",
        type=number(float, low=0, open_low=True),
        metavar="MINUTES",
        help="checkpoint and exit (status 0, resumable) before MINUTES have passed since the "
        "process started",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _settings(p)


def _sample(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="a run folder written by `train`")
    p.add_argument("--prompt", default="", help="the text to continue ['': a file's start]")
    p.add_argument("--length", type=POSITIVE_INT, default=400, help="bytes to write [400]")
    p.add_argument(
        "--temperature",
        type=number(float, low=0),
        default=0.8,
        help="divide the logits by this; 0 picks the likeliest byte [0.8]",
    )
    p.add_argument(
        "--top-k",
        type=number(int, low=1, high=256, open_high=False),
        default=40,
        help="sample among the K likeliest bytes (256: all) [40]",
    )
    p.add_argument("--seed", type=number(int, low=0), default=0, help="the sampling key [0]")
    p.add_argument(
        "--form",
        choices=("complex", "real"),
        help="run the trained weights in this form (eqx_lru.to_real/to_complex) [the run's]",
    )
    p.add_argument("--samples", type=POSITIVE_INT, default=1, help="how many samples [1]")


def _export(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="a run folder written by `train`")
    p.add_argument("--format", required=True, choices=("stablehlo", "onnx"), help="the format")
    p.add_argument(
        "--step",
        action="store_true",
        help="export one streaming step (carry in, carry out) instead of the whole sequence",
    )
    p.add_argument("--dest", type=output_folder, help="output folder [RUN/export]")


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
    return parser().parse_args(argv)


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line sets (the unset flags are None)."""
    names = [f.name for f in dataclasses.fields(LMConfig) if f.metadata["role"] != "record"]
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}

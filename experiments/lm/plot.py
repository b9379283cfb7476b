"""The learning curve of a language-model run: bits per byte against step, train and
validation, with the unigram and bigram baselines as horizontal lines.

    python -m experiments.lm.plot --run runs/lm --out curve.png

The trainer draws `OUT/curve.png` itself at the end of each invocation; this command
redraws it (e.g. for the docs page, `experiments/lm/figures/curve.png`).
"""

import argparse
import io
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from ..runs.atomic import write_atomic
from ..runs.flags import output_file, report_os_errors

__all__ = ["plot_run", "main"]

#: (key, label, line style, where the label goes: (x in axes fraction, alignments)).
_BASELINES = (
    ("unigram", "unigram (add-one)", ":", (0.99, "right", "bottom")),
    ("bigram_add_one", "bigram (add-one)", "-.", (0.01, "left", "top")),
    ("bigram_kneser_ney", "bigram (Kneser-Ney)", "--", (0.99, "right", "bottom")),
)


def _series(records: Sequence[Mapping[str, Any]], split: str) -> tuple[list, list]:
    xs, ys = [], []
    for r in records:  # a record that is not the trainer's (edited) is left out
        if not isinstance(r, dict) or r.get("split") != split:
            continue
        value, step = r.get("bits_per_byte"), r.get("step")
        if _number(value) and _number(step) and math.isfinite(value):
            xs.append(step)
            ys.append(value)
    return xs, ys


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def plot_run(
    records: Sequence[Mapping[str, Any]],
    baselines: Mapping[str, float],
    path: str | os.PathLike,
    *,
    title: str = "byte-level LRU language model",
) -> None:
    """Draw `records` (a run's metrics) and the validation `baselines` to a PNG at `path`
    (matplotlib's object API: headless, no global state)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    styles: dict[str, dict[str, Any]] = {
        "train": dict(lw=1, alpha=0.7),
        "val": dict(marker="o", ms=3),
    }
    for split, style in styles.items():
        xs, ys = _series(records, split)
        if xs:
            ax.plot(xs, ys, label=split, **style)
    for key, label, line, (x, ha, va) in _BASELINES:
        if key in baselines:
            ax.axhline(baselines[key], ls=line, color="gray", lw=1)
            ax.annotate(
                f"{label} {baselines[key]:.3f}",
                (x, baselines[key]),
                xycoords=("axes fraction", "data"),
                ha=ha,
                va=va,
                fontsize=8,
                color="dimgray",
            )
    test_x, test_y = _series(records, "test")
    if test_x:
        ax.scatter(test_x[-1:], test_y[-1:], marker="*", s=120, color="k", zorder=3)
        ax.plot([], [], "k*", label=f"test {test_y[-1]:.3f}")
    # "$" literal: a title is text, not matplotlib's mathtext.
    ax.set(xlabel="step", ylabel="bits per byte", title=title.replace("$", r"\$"))
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    write_atomic(path, buffer.getvalue())


def _parser() -> argparse.ArgumentParser:
    from .cli import text_flag, utf8_path

    p = argparse.ArgumentParser(prog="python -m experiments.lm.plot", description=__doc__)
    p.add_argument(
        "--run", required=True, type=text_flag, help="a run folder written by the trainer"
    )
    p.add_argument("--out", required=True, type=utf8_path(output_file), help="the PNG to write")
    p.add_argument(
        "--title",
        type=text_flag,
        default="byte-level LRU language model",
        help="the plot's title [byte-level LRU language model]",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the file at --out if there is one (by default it is kept and the "
        "command refused) [off]",
    )
    return p


@report_os_errors
def main(argv: Sequence[str] | None = None) -> int:
    """`python -m experiments.lm.plot`: a user's error as one `error:` line, status 2."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    if args.out.exists() and not args.overwrite:
        print(
            f"error: --out {str(args.out)!r} exists; pass --overwrite to replace it, or choose "
            "another --out.",
            file=sys.stderr,
        )
        return 2
    from ..runs.metrics import read_records

    run = Path(args.run)
    try:
        recorded = json.loads((run / "corpus.json").read_text())
        baselines = recorded["baselines_bits_per_byte"]["val"]
        if not isinstance(baselines, dict) or not all(map(_number, baselines.values())):
            raise ValueError("its validation baselines are not numbers")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: --run {args.run!r}: cannot read its corpus.json ({e}).", file=sys.stderr)
        return 2
    plot_run(read_records(run / "metrics.jsonl"), baselines, args.out, title=args.title)
    return 0


if __name__ == "__main__":
    from experiments.runs.signals import exit_on_signal

    with exit_on_signal("run the same command again"):  # a signal: one line, status 130
        code = main()
    raise SystemExit(code)

"""The command line of `python -m experiments.gpu_check` (`./dev.sh gpu-check`).

This process never imports JAX (so `--help` answers at once, and it never holds the GPU):
every part runs in child processes, and the backend is asked for in one of them.
"""

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import _plan
from ._machine import REPO, child_env, no_cuda_reason, probe

__all__ = ["parser", "main"]

_NAMES = tuple(p.name for p in _plan.PARTS)


def _part_list(text: str) -> tuple[str, ...]:
    names = tuple(n for n in text.split(",") if n)
    unknown = sorted(set(names) - set(_NAMES))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated names among {', '.join(_NAMES)}, got {text!r}"
        )
    return names


def parser() -> argparse.ArgumentParser:
    """Every flag with its help line and default (the flags only: no checks of the
    machine here)."""
    from experiments.runs.flags import add_overwrite, number, text

    p = argparse.ArgumentParser(
        prog="python -m experiments.gpu_check",
        description="Check eqx_lru on a CUDA GPU within a time budget: (a) the GPU-sensitive "
        "tests, (b) the layer at the benchmark's shapes against the card's bandwidth, (c) the "
        "PathX step's peak memory, (d) ListOps for the time left beside the earlier H100 "
        "run. A Markdown and a JSON report under --out, rewritten after every part.",
    )
    p.add_argument(
        "--budget",
        type=number(float, low=10, high=86400),
        default=_plan.DEFAULT_BUDGET_S,
        metavar="SECONDS",
        help="wall-clock seconds for the whole check, start-up and compiles included; each "
        "part gets its share (docs/guides/gpu.md) [480: 8 minutes on one H100]",
    )
    p.add_argument(
        "--out",
        type=lambda value: Path(text(value)),
        default=None,
        metavar="FOLDER",
        help="folder for report.md, report.json, the parts' records and logs "
        "[runs/gpu-check in the repository; with --dry-run, runs/gpu-check-dry-run: a "
        "rehearsal never stands in the way of the real check]",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="run the same check end to end on the CPU at tiny sizes (no GPU needed), to "
        "test the script [off]",
    )
    p.add_argument(
        "--parts",
        type=_part_list,
        default=_NAMES,
        metavar="LIST",
        help=f"comma-separated parts to run, always in this order: {','.join(_NAMES)} [all]",
    )
    add_overwrite(p)
    return p


def default_out(*, dry: bool) -> Path:
    """`--out`'s default: the real check's, or the dry run's own."""
    return REPO / "runs" / ("gpu-check-dry-run" if dry else "gpu-check")


def _check_out(p: argparse.ArgumentParser, out: Path) -> None:
    """`--out` must be a folder this user can create or write (nothing is created yet)."""
    probe_path = out
    while not probe_path.exists():
        if probe_path.parent == probe_path:
            break
        probe_path = probe_path.parent
    if out.exists() and not out.is_dir():
        p.error(f"argument --out: {str(out)!r} is a file; give a folder")
    if not probe_path.is_dir() or not os.access(probe_path, os.W_OK | os.X_OK):
        p.error(f"argument --out: {str(out)!r} cannot be created or written (permissions)")


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic(), time.time()  # the budget counts the JAX start-up too
    p = parser()
    args = p.parse_args(argv)
    if args.out is None:
        args.out = default_out(dry=args.dry_run)
    _check_out(p, args.out)
    from experiments.runs.flags import refuse_existing

    reports = [args.out / "report.json", args.out / "report.md"]
    refuse_existing(p, reports, overwrite=args.overwrite)
    info = probe(child_env(dry=args.dry_run))
    if not args.dry_run and (reason := no_cuda_reason(info)) is not None:
        print(f"gpu-check: {reason}", file=sys.stderr)
        return 2
    from ._main import run

    return run(
        args.out, budget=args.budget, dry=args.dry_run, parts=args.parts, info=info, started=started
    )

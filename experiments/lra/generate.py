"""The command line of the offline ListOps and Pathfinder generators
(`experiments/lra/synthetic/`), writing the official LRA file formats.

    python -m experiments.lra.generate --task listops --out DIR [--size N] [--seed S]
        [--min-length 500] [--max-length 2000] [--max-depth 10] [--max-args 10]
        [--split-sizes TRAIN VAL TEST] [--overwrite]
    python -m experiments.lra.generate --task pathfinder --out DIR [--size N] [--seed S]
        [--resolution 32] [--images-per-batch 1000] [--workers 1] [--overwrite]

What each generator draws: `synthetic/listops.py` and `synthetic/pathfinder.py`.
"""

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import tasks
from .synthetic import listops_split_sizes, write_listops, write_pathfinder

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line as one `error: ...` line, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _int_at_least(low: int) -> Callable[[str], float]:
    """An integer >= `low` and a 32-bit one (`experiments.runs.flags.number`)."""
    from ..runs.flags import INT32_MAX, number

    return number(int, low=low, high=INT32_MAX, open_high=False, why="a 32-bit integer")


def _parser() -> argparse.ArgumentParser:
    from ..runs.flags import add_overwrite, output_folder

    positive, natural = _int_at_least(1), _int_at_least(0)
    parser = _Parser(
        prog="python -m experiments.lra.generate",
        description="Generate ListOps or Pathfinder data in the official LRA file formats.",
    )
    parser.add_argument(
        "--task", required=True, choices=(tasks.LISTOPS, tasks.PATHFINDER), help="what to draw"
    )
    parser.add_argument(
        "--out", required=True, type=output_folder, help="output folder (the data root)"
    )
    parser.add_argument(
        "--size", type=positive, help="total examples [the official: 100000 / 200000]"
    )
    parser.add_argument("--seed", type=natural, default=0, help="the generator's seed [0]")
    listops = parser.add_argument_group(tasks.LISTOPS)
    listops.add_argument("--min-length", type=natural, default=500, help="keep length > this [500]")
    listops.add_argument(
        "--max-length", type=positive, default=2000, help="keep length < this [2000]"
    )
    listops.add_argument(
        "--max-depth", type=positive, default=10, help="deepest nesting of operators [10]"
    )
    listops.add_argument(
        "--max-args", type=_int_at_least(2), default=10, help="most arguments of an operator [10]"
    )
    listops.add_argument(
        "--split-sizes",
        type=positive,
        nargs=3,
        metavar=("TRAIN", "VAL", "TEST"),
        help="explicit split sizes instead of --size's: val and test 2,000 each, or 10%% "
        "each where that is fewer, never below 2%% (96/2/2 at 100,000) [none]",
    )
    pathfinder = parser.add_argument_group(tasks.PATHFINDER)
    pathfinder.add_argument(
        "--resolution",
        type=_int_at_least(16),
        default=32,
        help="image side: 32 (Pathfinder) or 128 (Path-X) [32]",
    )
    pathfinder.add_argument(
        "--images-per-batch", type=positive, default=1000, help="images drawn per batch [1000]"
    )
    pathfinder.add_argument(
        "--workers", type=positive, default=1, help="processes (same output) [1]"
    )
    add_overwrite(parser)
    return parser


def _listops_sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[int, ...]:
    if args.split_sizes is not None and args.size is not None:
        parser.error("give either --size or --split-sizes, not both")
    if args.split_sizes:
        return tuple(args.split_sizes)
    if args.size is not None and args.size < 3:
        parser.error(
            f"argument --size: ListOps needs at least 3 examples (one per split), got {args.size}"
        )
    return listops_split_sizes(args.size or 100_000)


def _generate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, Path]:
    if args.task == tasks.LISTOPS:
        sizes = _listops_sizes(parser, args)
        folder = Path(args.out) / "listops-1000"
        existing = [folder / f"basic_{s}.tsv" for s in ("train", "val", "test")]
        existing = [p.name for p in existing if p.exists() or p.is_symlink()]
        if existing and not args.overwrite:
            raise FileExistsError(
                f"{folder} already holds {', '.join(existing)}; pass --overwrite to replace them, "
                "or choose another --out."
            )
        folder = write_listops(
            args.out,
            sizes,
            seed=args.seed,
            min_length=args.min_length,
            max_length=args.max_length,
            max_depth=args.max_depth,
            max_args=args.max_args,
        )
        return f"{sum(sizes)} ListOps examples (train/val/test {'/'.join(map(str, sizes))})", folder
    n = args.size or 200_000
    folder = write_pathfinder(
        args.out,
        n,
        seed=args.seed,
        resolution=args.resolution,
        images_per_batch=args.images_per_batch,
        workers=args.workers,
        overwrite=args.overwrite,
    )
    return f"{n} Pathfinder images ({args.resolution}x{args.resolution})", folder


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Bad flags, impossible settings and unwritable output give one
    `error: ...` line on stderr and status 2."""
    parser = _parser()
    args = parser.parse_args(argv)
    began = time.perf_counter()
    try:
        what, folder = _generate(parser, args)
    except (ValueError, RuntimeError, OSError) as e:
        if (
            isinstance(e, OSError)
            and not isinstance(e, FileExistsError)
            and e.filename is not None
            and e.strerror
        ):
            e = f"--out: cannot write {e.filename} ({e.strerror})"
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"Wrote {what} to {folder} in {time.perf_counter() - began:.1f}s.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from experiments.runs.signals import exit_on_signal

    with exit_on_signal(
        "run the same command again, with --overwrite"
    ):  # a signal: one line, status 130
        code = main()
    raise SystemExit(code)

"""`python -m experiments.bench [--grid full|reduced|quick] [--quick] [--out FILE] [--resume]
[--overwrite]`;
see the package docstring. The grids are `grids.py`, the measurements `runner.py`, the page
`markdown.py`; JAX is imported only after the flags are parsed."""

import argparse
import os

from .grids import GRIDS

HERE = os.path.dirname(os.path.abspath(__file__))


def run(grid, runner, *, quick, backend):
    """The measurements (`runner.run`), under a name of this module that tests replace."""
    from .runner import run as measure

    measure(grid, runner, quick=quick, backend=backend)


def _parser() -> argparse.ArgumentParser:
    from experiments.runs.flags import add_overwrite, output_file

    parser = argparse.ArgumentParser(prog="python -m experiments.bench", description=__doc__)
    parser.add_argument(
        "--grid",
        choices=tuple(GRIDS),
        default="full",
        help="full, reduced (about 25 min on 2 CPU cores) or quick (seconds) [full]",
    )
    parser.add_argument("--quick", action="store_true", help="the same as --grid quick [off]")
    parser.add_argument(
        "--out",
        type=output_file,
        help="Markdown to write [RESULTS-<backend>.md here; quick: stdout]",
    )
    parser.add_argument(
        "--json", type=output_file, help="raw results [results-<backend>.json beside --out]"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the measurements in the JSON file (which may then exist) [off]",
    )
    add_overwrite(parser)
    return parser


def _refuse_existing(parser, args, writes) -> None:
    """Without --overwrite, no file this run writes may exist (but the JSON file that
    --resume continues)."""
    from experiments.runs.flags import refuse_existing

    for what, path in writes:
        if what == "--json" and args.resume:
            continue
        refuse_existing(parser, [path], flag=what, overwrite=args.overwrite)


def _main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)  # paths checked here, not after the measurements

    import jax

    from . import report
    from .markdown import render
    from .runner import Runner, log

    backend = jax.default_backend()
    name = "quick" if args.quick else args.grid
    grid = GRIDS[name]
    out = args.out or (None if name == "quick" else os.path.join(HERE, f"RESULTS-{backend}.md"))
    json_path = args.json or (
        os.path.join(os.path.dirname(os.path.abspath(out)), f"results-{backend}.json")
        if out
        else None
    )
    # Every file this run writes is checked before minutes of measuring: the defaults and
    # the JSON file derived from --out too (argparse checked only the flags given).
    from . import streaming

    writes = [("--out", out), ("--json", json_path)]
    if name != "quick":
        writes.append(("the streaming table", streaming.default_out(backend)))
    report.check_writable(parser, writes)
    _refuse_existing(parser, args, writes)
    info = report.machine_info()
    try:
        runner = Runner(json_path, in_process=name == "quick", resume=args.resume)
    except ValueError as e:  # json.JSONDecodeError: a damaged results file
        parser.error(
            f"--resume: {json_path} is not a valid results file ({e}); delete it or drop --resume"
        )
    log(f"benchmark ({name}) on {backend} -> {out or 'stdout'}")
    run(grid, runner, quick=name == "quick", backend=backend)
    text = render(grid, runner, info, name=name, end_load=os.getloadavg())
    if out:
        from experiments.runs.atomic import write_atomic

        write_atomic(out, text.encode())
        log(f"wrote {out}")
    else:
        print(text)
    streaming.main(["--quick"] if name == "quick" else ["--overwrite"])  # STREAMING-<backend>.md


def main(argv=None) -> int:
    """The command line; a bad flag or path is one `error:` line (status 2)."""
    from experiments.runs.flags import report_os_errors

    return report_os_errors(_main)(argv)


if __name__ == "__main__":
    raise SystemExit(main())

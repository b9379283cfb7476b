"""Flag checks shared by the `experiments/` command lines (`memory`, `demo`, `bench`...).

Each check is an argparse `type`: a bad value is refused when the command line is parsed,
before any work, as one `error: argument --flag: ...` line with status 2 (argparse's own
format, which prefixes the flag). `report_os_errors` turns a file-system error that names a
path (permissions, a missing folder, a full disk...) into one such line too; anything else
keeps its traceback (a bug).
"""

import argparse
import errno
import functools
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .numbers import FLOAT32_MAX, FLOAT32_TINY, INT32_MAX

__all__ = [
    "flag",
    "number",
    "POSITIVE_INT",
    "NATURAL",
    "STEPS",
    "SEED",
    "FRACTION",
    "NONNEGATIVE_FLOAT32",
    "POSITIVE_FLOAT32",
    "text",
    "output_file",
    "output_folder",
    "input_folder",
    "add_overwrite",
    "refuse_existing",
    "report_os_errors",
]


def flag(name: str) -> str:
    """The command-line flag of the setting `name` (`d_model` -> `--d-model`)."""
    return "--" + name.replace("_", "-")


def number(
    kind: type,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
    open_high: bool = True,
    why: str | None = None,
) -> Callable[[str], float]:
    """An argparse `type` for finite numbers of `kind` (int or float) in a range; `why`
    (e.g. "the step counter is int32") is said after the range when a value is refused."""
    bounds = []
    if low is not None:
        bounds.append(f"{'>' if open_low else '>='} {_shown(low)}")
    if high is not None:
        bounds.append(f"{'<' if open_high else '<='} {_shown(high)}")
    what = ("an integer" if kind is int else "a finite number") + (
        f" {' and '.join(bounds)}" if bounds else ""
    )
    reason = f" ({why})" if why else ""

    def parse(text: str):
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        ok = math.isfinite(value)
        ok = ok and (low is None or (value > low if open_low else value >= low))
        ok = ok and (high is None or (value < high if open_high else value <= high))
        if not ok:
            raise argparse.ArgumentTypeError(f"expected {what}{reason}, got {text!r}")
        return value

    parse.__name__ = what
    return parse


def _shown(bound: float) -> str:
    """A bound as the user would type it: integers in full, floats in `%g`."""
    if isinstance(bound, int) or float(bound).is_integer() and abs(bound) < 2**63:
        return str(int(bound))
    return f"{bound:g}"


#: Counts, sizes and steps; seeds and lower bounds: 32-bit integers (a value of 10**30 is
#: a typing slip, and would overflow an array's index or a PRNG seed deep in the run).
POSITIVE_INT = number(int, low=1, high=INT32_MAX, open_high=False, why="a 32-bit integer")
NATURAL = number(int, low=0, high=INT32_MAX, open_high=False, why="a 32-bit integer")

# The trainers' settings: each range is that of the value inside the computation.
#: A step count: the step counter and the optimiser's are int32.
STEPS = number(
    int, low=1, high=INT32_MAX, open_high=False,
    why="the step counter and the optimiser's are int32",
)  # fmt: skip
#: A seed: `jax.random.PRNGKey` keeps 32 bits.
SEED = number(
    int, low=0, high=2**32 - 1, open_high=False, why="jax.random.PRNGKey keeps 32 bits of it"
)
#: A fraction in [0, 1) (a dropout rate, a ring's modulus bound).
FRACTION = number(float, low=0, high=1)
#: A float32 that may be zero (a weight decay, a clipping norm of 0 = off).
NONNEGATIVE_FLOAT32 = number(float, low=0, high=FLOAT32_MAX, open_high=False, why="a float32")
_POSITIVE = number(float, low=0, open_low=True)
_NORMAL_FLOAT32 = number(
    float, low=FLOAT32_TINY, high=FLOAT32_MAX, open_high=False, why="a normal float32"
)


def POSITIVE_FLOAT32(value: str) -> float:
    """A positive number (refused as such at 0 or below) that is a normal float32 (a
    learning rate, a time step)."""
    try:
        below = float(value) <= 0
    except ValueError:
        below = False
    return (_POSITIVE if below else _NORMAL_FLOAT32)(value)


POSITIVE_FLOAT32.__name__ = _NORMAL_FLOAT32.__name__


def text(value: str) -> str:
    """An argparse `type` for text: refuses an argument that is not UTF-8 (Python keeps
    such bytes of `sys.argv` as surrogate escapes, which no file or JSON can hold)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"expected UTF-8 text, got {value!r}") from None
    return value


def output_file(text: str) -> Path:
    """A file the command will write: its folder must exist and be writable, and it must
    not be a folder (checked now, not after a long run)."""
    path = Path(_utf8(text)).expanduser()
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(
            f"the folder {str(folder)!r} does not exist; create it first"
        )
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written (permissions)")
    return path


def output_folder(text: str) -> Path:
    """A folder the command will write into: created now if needed, and tried."""
    path = Path(_utf8(text)).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a writable folder ({e.strerror or e})"
        ) from None
    return path


def input_folder(text: str) -> Path:
    """A folder the command will read: it must exist."""
    path = Path(_utf8(text)).expanduser()
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{text!r} {what}")
    return path


_utf8 = text


def add_overwrite(parser: argparse.ArgumentParser) -> None:
    """The `--overwrite` flag, the same in every command that writes files."""
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the files this command writes where they exist already (without it, "
        "an existing output is refused before any work) [off]",
    )


def refuse_existing(
    parser: argparse.ArgumentParser, paths, *, flag: str = "--out", overwrite: bool
) -> None:
    """Unless `overwrite`: one `error: argument FLAG: ...` line (status 2) when one of
    `paths` (files the command will write; None: none) exists already. `flag` may also
    name a derived file in words ("the streaming table")."""
    existing = [] if overwrite else [Path(p) for p in paths if p is not None]
    existing = [p for p in existing if p.exists() or p.is_symlink()]
    if existing:
        where = f"argument {flag}" if flag.startswith("--") else flag
        choose = f", or choose another {flag}" if flag.startswith("--") else ""
        parser.error(
            f"{where}: {str(existing[0])!r} exists already; pass --overwrite to replace it" + choose
        )


USER_ERRNOS = {
    errno.EACCES,
    errno.EPERM,
    errno.ENOENT,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.ELOOP,
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EROFS,
    errno.ENAMETOOLONG,
    errno.EEXIST,
    errno.EIO,
}


def report_os_errors(main: Callable[..., int | None]) -> Callable[..., int]:
    """Wrap a CLI `main`: a file-system error naming a path becomes one `error:` line and
    status 2; `main`'s own status otherwise (None counts as 0)."""

    @functools.wraps(main)
    def wrapped(*args, **kwargs) -> int:
        try:
            code = main(*args, **kwargs)
        except OSError as e:
            if e.errno not in USER_ERRNOS or e.filename is None:
                raise
            print(
                f"error: {e.filename}: {e.strerror or e}. Fix the path, its permissions or the "
                "free "
                "space, and run again.",
                file=sys.stderr,
            )
            return 2
        return 0 if code is None else code

    return wrapped

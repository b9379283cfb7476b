"""A training run's progress bar (`progress_bar`: on a terminal only, not in log files) and
the lines the run says above it (`say`), the same in every trainer."""

import sys
from typing import Any

__all__ = ["progress_bar", "say"]


def progress_bar(*, total: int, initial: int, desc: str) -> Any:
    """A `tqdm` bar of `total` steps from `initial` on stderr, shown on a terminal only."""
    from tqdm import tqdm  # (imported when a run trains: `--help` stays fast)

    return tqdm(
        total=total,
        initial=initial,
        unit="step",
        dynamic_ncols=True,
        desc=desc,
        file=sys.stderr,
        disable=None,  # a bar on a terminal only, not in log files
    )


def say(msg: str, bar: Any = None) -> None:
    """Print `msg` to stderr, above `bar` (a `progress_bar`, or None) rather than through
    it. A closed terminal (after SIGHUP) is ignored: the run goes on, its files are written."""
    try:
        if bar is not None:
            bar.write(msg, file=sys.stderr)
        else:
            print(msg, file=sys.stderr, flush=True)
    except OSError:
        pass

"""Train a deep LRU, or a baseline core, on one Long Range Arena task (paper §D, Table 9).

    python -m experiments.lra.train --task listops --data-root DATA --out runs/listops
    python -m experiments.lra.train --task listops --data-root DATA --out runs/listops --resume

What it writes, how a run resumes bit for bit, what it trusts and refuses, devices and
exit statuses: [training on LRA](../../docs/guides/lra.md). The stages live beside it:
`_setup.py` (settings, folder, data, model), `_resume.py`, `_training.py` (the loop),
`_evaluation.py`, `_errors.py`; settings in `config.py`, cores in `cores.py`, tasks in
`tasks.py`, the jitted steps in `steps.py`, checkpoints in `_checkpoint/`.
"""

import argparse
import errno
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import _flags
from . import _checkpoint as ckpt
from . import _env
from ._errors import RunError, UsageError
from ._evaluation import outputs
from ._setup import build, load_data, resolve_config, set_up, task_defaults
from ._signals import Abort, Stop
from ._timing import process_age
from ._training import train_until_stop
from .cli import parse_args
from .config import TRAINING_KEYS
from .steps import build_model, compile_train_step, make_steps

__all__ = [
    "UsageError",
    "RunError",
    "Abort",
    "parse_args",
    "task_defaults",
    "resolve_config",
    "build_model",
    "make_steps",
    "compile_train_step",
    "run",
    "main",
    "TRAINING_KEYS",
]


def run(
    args: argparse.Namespace | Sequence[str] | None = None,
    *,
    hook: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    started: float | None = None,
    hard_abort: bool = False,
) -> dict[str, Any]:
    """Train (or continue) one run; the body of the CLI.

    **Arguments:**

    - `args`: parsed arguments or a CLI argument list.
    - `hook`: called as `hook(step)` after each step and its logging, evaluation and
        checkpointing (tests raise `KeyboardInterrupt` or send SIGINT from it).
    - `clock`: seconds, for `--time-limit` (tests inject a fake one).
    - `started`: the `clock` reading `--time-limit` counts from (default: now; the CLI
        passes the process's start).
    - `hard_abort`: a second signal outside a checkpoint write ends the process at once
        (`os._exit(130)`, the CLI) instead of raising `Abort` (see `_signals.Stop`).

    **Returns:** a dict: `status` (`"finished"`, `"stopped"` by `--stop-at` or
    `--time-limit`, or `"interrupted"`), `step`, `steps_per_sec`, `best_val_accuracy`,
    `best_step`, and when finished `test_accuracy`, `test_loss`, `seconds`. Also written
    to `OUT/results.json`.

    **Raises:** `UsageError` for bad settings, data, run folders or checkpoints;
    `RunError` for a non-finite loss or an out-of-memory error.
    """
    started = clock() if started is None else started
    with Stop(hard_abort=hard_abort) as stop:  # signals: flags; before training they end the run
        r = set_up(args)
        r.started, r.stop = started, stop
        try:
            load_data(r)
            carry = build(r)
            carry, status = train_until_stop(r, carry, hook, clock)
            return outputs(r, carry, status)
        except Exception as e:
            if _env.is_out_of_memory(e):
                raise RunError(
                    _env.out_of_memory_message(
                        e,
                        task=r.cfg.task,
                        batch=r.cfg.batch_size,
                        remat=r.cfg.remat,
                        devices=r.mesh.size if r.mesh else None,
                    )
                ) from e
            raise
        finally:
            if r.log is not None:
                r.log.close()
            if r.lock is not None:
                r.lock.release()


#: File-system errors that are the environment's, not the program's: one line, status 2.
_USER_ERRNOS = _flags.USER_ERRNOS | {errno.ENOTEMPTY}


def main(
    argv: Sequence[str] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    started: float | None = None,
    hard_abort: bool = False,
) -> int:
    """The CLI: `run(argv)`, with user errors as one `error:` line; returns the exit status.
    `started`, `hard_abort`: see `run` (`python -m` passes the process's start and True)."""
    try:
        results = run(argv, clock=clock, started=started, hard_abort=hard_abort)
    except OSError as e:  # a file or folder the user can fix; anything else is a bug
        if e.errno not in _USER_ERRNOS or e.filename is None:
            raise
        print(
            f"error: {e.filename}: {e.strerror or e}. Fix the path, its permissions or the free "
            "space, then run again (with --resume if the run had started).",
            file=sys.stderr,
        )
        return 2
    except SystemExit as e:  # argparse: it printed "error: argument --flag: ..."
        return e.code if isinstance(e.code, int) else 2
    except (UsageError, ckpt.CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Abort as e:
        print(f"Aborted ({e}).", file=sys.stderr)
        return 130
    return 130 if results["status"] == "interrupted" else 0


if __name__ == "__main__":
    raise SystemExit(main(started=time.monotonic() - process_age(), hard_abort=True))

"""Train a deep LRU, or a baseline core, on one Long Range Arena task (paper §D, Table 9).

    python -m experiments.lra.train --task listops --data-root DATA --out runs/listops
    python -m experiments.lra.train --task listops --data-root DATA --out runs/listops --resume

What it writes, how a run resumes bit for bit, what it trusts and refuses, devices and
exit statuses: [training on LRA](../../docs/guides/lra.md). The stages live beside it:
`_setup.py` (settings, folder, data, model), `_resume.py`, `_training.py` (the loop),
`_evaluation.py`; settings in `config.py`, cores in `cores.py`, tasks in `tasks.py`, the
jitted steps in `steps.py`. What every trainer shares (checkpoints, signals, errors, the
metrics log, devices and processes) is in `experiments/runs/`.
"""

import argparse
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..runs import env as _env
from ..runs import watchdog as _watchdog
from ..runs.errors import RunError, UsageError, exit_status, run_status
from ..runs.lazy import lazy
from ..runs.signals import Abort, Stop
from ..runs.timing import process_age
from .cli import parse_args
from .config import TRAINING_KEYS

if TYPE_CHECKING:
    from ._setup import resolve_config as resolve_config
    from ._setup import task_defaults as task_defaults
    from .steps import build_model as build_model
    from .steps import compile_train_step as compile_train_step
    from .steps import make_steps as make_steps

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

#: The names above that import JAX, imported when first used (`--help` and a bad flag
#: answer before JAX is imported): name -> its module, relative to this package.
_LAZY = {
    "task_defaults": "._setup",
    "resolve_config": "._setup",
    "build_model": ".steps",
    "make_steps": ".steps",
    "compile_train_step": ".steps",
}


__getattr__, __dir__ = lazy(globals(), _LAZY)


def run(
    args: argparse.Namespace | Sequence[str] | None = None,
    *,
    hook: Callable[[int], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
    started: float | None = None,
    hard_abort: bool = False,
    on_record: Callable[[dict[str, Any]], Any] | None = None,
    hint: str | None = None,
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
        (`os._exit(130)`, the CLI) instead of raising `Abort` (see `runs.signals.Stop`).
    - `on_record`: called with each record of `OUT/metrics.jsonl` as it is written (to
        forward metrics to TensorBoard, W&B...; `runs.metrics.MetricsLog`).
    - `hint`: how to go on after a signal before training (the demo's; `Stop.go_on`).

    **Returns:** a dict: `status` (`"finished"`, `"stopped"` by `--stop-at` or
    `--time-limit`, or `"interrupted"`), `step`, `steps_per_sec`, `best_val_accuracy`,
    `best_step`, and when finished `test_accuracy`, `test_loss`, `seconds`. Also written
    to `OUT/results.json`.

    **Raises:** `UsageError` for bad settings, data, run folders or checkpoints;
    `RunError` for a non-finite loss or an out-of-memory error.
    """
    started = clock() if started is None else started
    if not isinstance(args, argparse.Namespace):
        args = parse_args(args)  # before JAX is imported: --help, a bad flag answer at once
    from ..runs import multiprocess as mp
    from ._evaluation import outputs
    from ._setup import agree_on_data, build, load_data, set_up
    from ._training import train_until_stop

    with Stop(hard_abort=hard_abort) as stop:  # signals: flags; before training they end the run
        stop.go_on(hint, fixed=True) if hint is not None else None
        s = set_up(args, started=started, stop=stop, on_record=on_record)
        stop.watch(s.cfg.save_signals)
        r = None
        try:
            loaded = mp.settle(lambda: load_data(s))
            agree_on_data(loaded)
            r, carry = mp.settle(lambda: build(s, loaded))
            carry, status, speed = train_until_stop(r, carry, hook, clock)
            return outputs(r, carry, status, speed)
        except Exception as e:
            if _env.is_out_of_memory(e):
                raise _out_of_memory(s, e) from e
            raise
        finally:
            if r is not None:
                r.log.close()
            if s.lock is not None:
                s.lock.release()


def _out_of_memory(s: Any, e: BaseException) -> RunError:
    """The one-line error of the run of session `s` that ran out of device memory."""
    c = s.cfg
    return RunError(
        _env.out_of_memory_message(
            e, task=c.task, batch=c.batch_size, remat=c.remat, devices=s.mesh.size
        )
    )


def main(
    argv: Sequence[str] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    started: float | None = None,
    hard_abort: bool = False,
) -> int:
    """The CLI: `run(argv)`, with user errors as one `error:` line; returns the exit status.
    `started`, `hard_abort`: see `run` (`python -m` passes the process's start and True).

    In a multi-process run, a failure that this process alone sees (its own error, a lost
    peer, a bug) ends every process: the line is published to the others
    (`_watchdog.Watchdog.fail`) and the process exits at once."""
    code = exit_status(
        lambda: run_status(run(argv, clock=clock, started=started, hard_abort=hard_abort)),
        failed=_fail_together,
    )
    dog = _watchdog.current()
    if dog is not None:  # (a failure closed it already)
        dog.close()
    return code


def _fail_together(e: BaseException, known: tuple[str, int] | None) -> tuple[str, int] | None:
    """In a multi-process run, end every process with the line of `e` (its `one_line`
    `known`, or `_unexpected`'s), unless it is a failure every process saw (`shared`)."""
    dog = _watchdog.current()
    if dog is not None and not getattr(e, "shared", False):
        if known is None:
            known = _unexpected(e)
        dog.fail(known[0].removeprefix("error: "), known[1])
    if dog is not None:
        dog.close()
    return known


def _unexpected(e: BaseException) -> tuple[str, int]:
    """A failure of a multi-process run that is not the trainer's: a collective that
    failed (a peer is gone), or a bug (its traceback is printed first)."""
    text = str(e)
    first = next((x.strip() for x in text.splitlines() if x.strip()), type(e).__name__)
    if any(word in text for word in ("Gloo", "UNAVAILABLE", "DEADLINE_EXCEEDED", "another task")):
        return (
            f"a collective operation with the other processes failed ({first[:200]}): "
            "another process stopped or was killed (see its output). The last complete "
            "checkpoint is kept: restart every process with --resume.",
            1,
        )
    traceback.print_exception(e)
    return f"{type(e).__name__}: {first[:200]} (a bug: see the traceback above).", 1


if __name__ == "__main__":
    from ..runs.signals import exit_on_signal

    with exit_on_signal("run the same command again"):  # until the trainer's own handlers
        code = main(started=time.monotonic() - process_age(), hard_abort=True)
    raise SystemExit(code)

"""Train a byte-level LRU language model on the Python standard library's source.

    python -m experiments.lm train --out runs/lm
    python -m experiments.lm train --out runs/lm --resume      # after an interrupt

What it writes and how it resumes: [the language-model guide](../../docs/guides/language-model.md).
The stages live beside it: `_setup.py` (settings, folder, corpus, model), `_resume.py`,
`_loop.py` (the loop); the corpus in `corpus.py`, the baselines in `baselines.py`, the
streams in `streams.py`, the model and its programs in `model.py`.
"""

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..runs import env as _env
from ..runs.atomic import write_atomic
from ..runs.errors import RunError, exit_status, run_status
from ..runs.metrics import read_records
from ..runs.signals import Stop
from ._loop import train_until_stop
from ._resume import finished_results
from ._run import Run, TrainState
from ._setup import build, load_corpus, set_up
from .cli import parse_args
from .config import LMConfig
from .model import score_layout
from .plot import plot_run

__all__ = ["run", "main"]


def run(
    args: argparse.Namespace | Sequence[str],
    *,
    hook: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    started: float | None = None,
    hard_abort: bool = False,
) -> dict[str, Any]:
    """Train (or continue) one run; the body of `python -m experiments.lm train`.

    **Arguments:** `args` (parsed, or the arguments after `train`); `hook(step)`, called
    after each step and what fell due after it (tests interrupt from it); `clock` and
    `started`, for `--time-limit`; `hard_abort`: a second signal ends the process at once.

    **Returns:** the results (also in `OUT/results.json`): `status` (`finished`,
    `stopped` or `interrupted`), `step`, validation and (when finished) test bits per
    byte, the baselines', `steps_per_sec`.

    **Raises:** `UsageError` (bad settings, corpus, folder or checkpoint), `RunError`
    (a non-finite loss).
    """
    if not isinstance(args, argparse.Namespace):
        args = parse_args(["train", *args])
    started = clock() if started is None else started
    with Stop(hard_abort=hard_abort) as stop:
        session = set_up(args, started=started, stop=stop)
        stop.watch(session.cfg.save_signals)
        r = None
        try:
            done = finished_results(session)
            if done is not None:
                return done
            loaded = load_corpus(session)
            r, s = build(session, loaded)
            s, status, speed = train_until_stop(r, s, hook, clock)
            return _outputs(r, s, status, speed.rate)
        except Exception as e:
            if _env.is_out_of_memory(e):
                raise RunError(_out_of_memory(session.cfg, e)) from e
            raise
        finally:
            if r is not None:
                r.log.close()
            session.lock.release()


def _out_of_memory(cfg: LMConfig, e: BaseException) -> str:
    """One line: what ran out, and the settings that size the memory."""
    first = next((x.strip() for x in str(e).splitlines() if x.strip()), type(e).__name__)
    return (
        f"out of memory ({first[:300]}) for a model of --depth {cfg.depth}, --d-model "
        f"{cfg.d_model}, --d-state {cfg.d_state} trained on --streams {cfg.streams} x "
        f"--chunk {cfg.chunk} bytes (scored on --eval-streams {cfg.eval_streams} x "
        f"--eval-chunk {cfg.eval_chunk}): start a new run with smaller values (another --out)."
    )


def _outputs(r: Run, s: TrainState, status: str, rate: float | None) -> dict[str, Any]:
    """The test score (when finished), results.json, curve.png and the closing line."""
    cfg = r.cfg
    vals = [x for x in read_records(r.out / "metrics.jsonl") if x.get("split") == "val"]
    results = {
        "status": status,
        "step": s.step,
        "steps": cfg.steps,
        "val_bits_per_byte": vals[-1]["bits_per_byte"] if vals else None,
        "baselines_bits_per_byte": r.baselines,
        "steps_per_sec": rate,
        "out": str(r.out),
    }
    if status == "finished":
        test = score_layout(r.programs, s.params, r.test)
        r.log.write({"split": "test", "step": s.step, **test})
        results["test_bits_per_byte"] = test["bits_per_byte"]
        r.say(
            f"test: {test['bits_per_byte']:.3f} bits/byte (unigram "
            f"{r.baselines['test']['unigram']:.3f}, bigram "
            f"{r.baselines['test']['bigram_kneser_ney']:.3f})"
            f"{'' if rate is None else f'; {rate:.2f} steps/s'}. Sample with: python -m "
            f"experiments.lm sample --run {r.out}"
        )
    else:
        r.say(
            f"Stopped at step {s.step}/{cfg.steps} ({status}); checkpoint "
            f"{r.out / 'last.eqx'} saved. Continue with the same command plus --resume."
        )
    write_atomic(r.out / "results.json", json.dumps(results, indent=1).encode())
    r.log.close()
    plot_run(read_records(r.out / "metrics.jsonl"), r.baselines["val"], r.out / "curve.png")
    return results


def main(
    argv: Sequence[str] | argparse.Namespace | None = None,
    *,
    started: float | None = None,
    hard_abort: bool = False,
) -> int:
    """`python -m experiments.lm train|sample|export ...`: a user's error (a flag, a file,
    a full disk) as one `error:` line and status 2, a failed run status 1, an interrupt
    130. `argv`: the arguments, or parsed ones (`python -m` parses them before importing
    this module); `started`, `hard_abort`: see `run`."""

    def command() -> int:
        args = argv if isinstance(argv, argparse.Namespace) else parse_args(argv)
        if args.command == "sample":
            from .sample import sample_main

            return sample_main(args)
        if args.command == "export":
            from .export import export_main

            return export_main(args)
        return run_status(run(args, started=started, hard_abort=hard_abort))

    return exit_status(command)

"""Resuming a language-model run: the newest complete `last` checkpoint, verified (its
record's fields, its SHA-256, finite values, this run's settings, run id and corpus), or
step 0 if the run stopped before its first checkpoint; or, for a run that finished, its
results (`finished_results`: nothing is redone). The checks are the shared ones
(`experiments/runs/checkpoint`, `experiments/runs/resume`), as in the LRA trainer."""

import json
from typing import Any

from ..runs import checkpoint as ckpt
from ..runs.errors import UsageError
from ..runs.resume import check_bound, load_checkpoint, newest_checkpoint, say_resuming
from ._run import Session, TrainState
from .config import TRAINING_KEYS

__all__ = ["resume", "finished_results"]


def resume(r: Session, s: TrainState) -> TrainState:
    """`s` (a fresh state shaped like the saved one) replaced by the run's checkpoint."""
    fields = ("step", "pending", "config", "run_id")
    pair = newest_checkpoint(r.out, r.say, fields=fields)
    if pair is None:
        return s
    check_bound(r.out, pair, run_id=r.cfg.run_id, settings=r.cfg.to_json(), keys=TRAINING_KEYS)
    _check_corpus(r, pair)
    (params, opt_state, carry, run_key, step), meta = load_checkpoint(
        pair, s.tree(), ("pending",), r.say
    )
    say_resuming(r.say, r.out, int(step), r.cfg.steps)
    pending = _record(meta, pair).pending
    return TrainState(int(step), params, opt_state, carry, run_key, pending)


def _record(meta: Any, pair: ckpt.Pair) -> ckpt.Record:
    """`meta`, the JSON of `pair`, read as a checkpoint's record (one line if malformed)."""
    try:
        return ckpt.Record.from_json(meta, where=pair.json_path)
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None


def _check_corpus(r: Session, pair: ckpt.Pair) -> None:
    """Refuse a checkpoint trained on another corpus than the run's."""
    recorded = _record(pair.meta, pair).corpus_sha256
    if recorded is not None and recorded != r.cfg.corpus_sha256:
        raise UsageError(
            f"--resume: {pair.json_path} was trained on another corpus (SHA-256 "
            f"{recorded[:12]}..., config.json says "
            f"{str(r.cfg.corpus_sha256)[:12]}...). Restore the run's own files, or start a "
            "new run with another --out."
        )


def finished_results(r: Session) -> dict[str, Any] | None:
    """With `--resume`, the results of a run that finished (its `results.json` says so, for
    its last step, and its newest complete checkpoint is of that step), said in one line;
    None otherwise (a run to continue, or one that stopped between its last checkpoint and
    its test score: resuming redoes the score)."""
    if not r.args.resume:
        return None
    try:
        results = json.loads((r.out / "results.json").read_text())
        pair = ckpt.locate(r.out, "last")
    except (OSError, ValueError):  # no results, or unreadable ones: resume and rewrite them
        return None
    steps = r.cfg.steps
    if not (
        isinstance(results, dict)
        and results.get("status") == "finished"
        and results.get("step") == steps
        and pair is not None
        and pair.meta.get("step") == steps
    ):
        return None
    test = results.get("test_bits_per_byte")
    score = f"; test {test:.3f} bits/byte" if isinstance(test, int | float) else ""
    r.say(
        f"The run in {r.out} is finished (step {steps}/{steps}{score}): nothing to resume. Its "
        f"results are in {r.out / 'results.json'}; sample with: python -m experiments.lm "
        f"sample --run {r.out}"
    )
    return results

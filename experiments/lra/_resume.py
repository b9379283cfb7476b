"""Resuming an LRA run (`resume`): the newest complete checkpoint, verified and bound to the
run (its settings, `config.TRAINING_KEYS`, and its data), and its best weights. The parts
every trainer shares (finding, loading and writing a checkpoint, refusing another run's,
the line that says where the run goes on) are `runs.resume`'s."""

from typing import Any

import equinox as eqx

from ..runs import checkpoint as ckpt
from ..runs.errors import UsageError
from ..runs.resume import (
    check_bound,
    load_checkpoint,
    newest_checkpoint,
    not_bound,
    say_resuming,
    write_checkpoint,
)
from ._carry import Carry
from ._run import Run
from .config import TRAINING_KEYS

__all__ = ["resume"]


def resume(r: Run, carry: Carry) -> Carry:
    """The newest complete checkpoint, verified (its JSON's fields, checksum, finiteness,
    this run's, same data, its best weights present), or step 0 if the run stopped before
    its first checkpoint."""
    pair = newest_checkpoint(r.out, r.say)
    if pair is None:
        return carry
    check_bound(r.out, pair, run_id=r.cfg.run_id, settings=r.cfg.to_json(), keys=TRAINING_KEYS)
    (p, s, o, k, step), meta = load_checkpoint(pair, carry.tree(), ("pending", "best"), r.say)
    record = _record(meta, pair)
    if record.seconds_total is not None:  # (absent in a checkpoint of an older trainer)
        r.seconds_before = record.seconds_total
    _check_data(r, record.data)
    best_sha256 = _check_best(r, record, (eqx.combine(carry.params, r.static), carry.bn_state))
    say_resuming(r.say, r.out, int(step), r.cfg.steps)
    return Carry(int(step), p, s, o, k, record.pending, record.best, None, best_sha256)


def _record(meta: Any, pair: ckpt.Pair) -> ckpt.Record:
    """`meta`, the JSON of `pair`, read as a checkpoint's record (one line if malformed)."""
    try:
        return ckpt.Record.from_json(meta, where=pair.json_path)
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None


def _check_data(r: Run, saved: dict | None) -> None:
    """Refuse data other than those the checkpoint was trained on (`saved`, their
    fingerprint; None: not recorded), unless `--allow-data-change`."""
    if saved is None or saved == r.fingerprint:
        return
    changed = [n for n in r.fingerprint if saved.get(n) != r.fingerprint[n]]
    detail = ", ".join(
        f"{n}: {saved.get(n, {}).get('examples')} -> {r.fingerprint[n]['examples']} examples"
        for n in changed
    )
    if not r.args.allow_data_change:
        raise UsageError(
            f"--resume: the data under {r.cfg.data_root} differ from those the checkpoint "
            f"{r.out / 'last.eqx'} was trained on ({detail}; contents compared by SHA-256), so "
            "the run would not continue as it started. Point --data-root at the original data, "
            "or pass --allow-data-change to continue anyway."
        )
    r.say(f"Note: continuing on changed data ({detail}), as --allow-data-change asks.")


def _check_best(r: Run, record: ckpt.Record, like) -> str | None:
    """Verify the `best.eqx` the checkpoint (its `record`) refers to (`ckpt.trusted_best`),
    before training (the test score at the end comes from it); put it back in place if a
    crash left it as `best.prev.*`. Returns its SHA-256."""
    best = record.best
    if best is None:
        return None
    expected = f"the weights of step {best['step']} (val accuracy {best['val_accuracy']})"
    recorded = {"best": best, "best_sha256": record.best_sha256}
    try:
        pair = ckpt.trusted_best(
            r.out, recorded, run_id=r.cfg.run_id, settings=r.cfg.to_json(), keys=TRAINING_KEYS
        )
    except ckpt.NotBound as e:
        raise not_bound(r.out, e) from None
    except ckpt.NoTrustedBest as e:
        raise UsageError(
            f"--resume: the checkpoint's best weights are not in {r.out}: {e.why()}; the "
            f"checkpoint expects {expected}. The test score at the end would come from other "
            "weights. Restore the run's own best.eqx and best.json, or start a new run with "
            "another --out."
        ) from None
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None
    try:
        tree, best_meta = ckpt.load_pair(pair.json_path, pair.eqx_path, like, finite=True)
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None
    held = _record(best_meta, pair)
    if held.step != best["step"]:
        raise UsageError(
            f"--resume: {pair.json_path} holds the weights of step {held.step}, but "
            f"the checkpoint expects {expected}. Restore the run's own best.eqx and best.json, or "
            "start a new run with another --out."
        )
    if r.primary and (pair.json_path.name, pair.eqx_path.name) != ("best.json", "best.eqx"):
        # A crash between writing best.* and last.*: the checkpoint's best is the previous one.
        meta = {k: v for k, v in best_meta.items() if k != "sha256"}
        return write_checkpoint(r, lambda: ckpt.save(r.out, "best", tree, meta))
    return held.sha256

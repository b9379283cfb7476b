"""Resuming an LRA run (`resume`): the newest complete checkpoint, verified and bound to the
run (its settings, `config.TRAINING_KEYS`, and its data), and its best weights. The parts
every trainer shares (finding, loading and writing a checkpoint) are `runs.resume`'s."""

from pathlib import Path
from typing import Any

import equinox as eqx

from ..runs import checkpoint as ckpt
from ..runs.errors import UsageError
from ..runs.resume import load_checkpoint, newest_checkpoint, write_checkpoint
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
    _check_run(r, pair.meta, pair.json_path)
    (p, s, o, k, step), meta = load_checkpoint(pair, carry.tree(), ("pending", "best"), r.say)
    before = meta.get("seconds_total")  # (absent in a checkpoint of an older trainer)
    if isinstance(before, int | float) and not isinstance(before, bool) and before >= 0:
        r.seconds_before = float(before)
    saved = meta.get("data")
    if saved is not None and saved != r.fingerprint:
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
    best_sha256 = _check_best(r, meta, (eqx.combine(carry.params, r.static), carry.bn_state))
    r.say(f"Resuming {r.out} at step {int(step)}/{r.cfg.steps}.")
    return Carry(
        int(step), p, s, o, k, tuple(map(tuple, meta["pending"])), meta["best"], None, best_sha256
    )


def _check_run(r: Run, meta: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint of another run, or one whose settings differ from config.json
    (`ckpt.check_bound`)."""
    try:
        ckpt.check_bound(
            meta, path, run_id=r.cfg.run_id, settings=r.cfg.to_json(), keys=TRAINING_KEYS
        )
    except ckpt.NotBound as e:
        raise _foreign(r, e) from None


def _foreign(r: Run, e: ckpt.NotBound) -> UsageError:
    what = e.what("config.json: another run with the same settings")
    return UsageError(
        f"--resume: {e.path} does not belong to the run in {r.out / 'config.json'} ({what}); it "
        "was copied from another run, or config.json was edited. Restore the run's own files, "
        "or start a new run with another --out."
    )


def _check_best(r: Run, meta: dict[str, Any], like) -> str | None:
    """Verify the `best.eqx` the checkpoint refers to (`ckpt.trusted_best`), before training
    (the test score at the end comes from it); put it back in place if a crash left it as
    `best.prev.*`. Returns its SHA-256."""
    best = meta.get("best")
    if best is None:
        return None
    expected = f"the weights of step {best.get('step')} (val accuracy {best.get('val_accuracy')})"
    try:
        pair = ckpt.trusted_best(
            r.out, meta, run_id=r.cfg.run_id, settings=r.cfg.to_json(), keys=TRAINING_KEYS
        )
    except ckpt.NotBound as e:
        raise _foreign(r, e) from None
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
    if best_meta.get("step") != best.get("step"):
        raise UsageError(
            f"--resume: {pair.json_path} holds the weights of step {best_meta.get('step')}, but "
            f"the checkpoint expects {expected}. Restore the run's own best.eqx and best.json, or "
            "start a new run with another --out."
        )
    if r.primary and (pair.json_path.name, pair.eqx_path.name) != ("best.json", "best.eqx"):
        # A crash between writing best.* and last.*: the checkpoint's best is the previous one.
        meta = {k: v for k, v in best_meta.items() if k != "sha256"}
        return write_checkpoint(r, lambda: ckpt.save(r.out, "best", tree, meta))
    return pair.meta.get("sha256")

"""Resuming a run (`resume`): the newest complete checkpoint, verified and bound to the run,
and its best weights; and writing a checkpoint so that a second signal waits for it and a
file-system error is one line (`write_checkpoint`)."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx

from . import _checkpoint as ckpt
from ._carry import Carry
from ._errors import RunError, UsageError
from ._run import Run

__all__ = ["resume", "write_checkpoint", "newest_checkpoint", "load_checkpoint"]


def resume(r: Run, carry: Carry) -> Carry:
    """The newest complete checkpoint, verified (its JSON's fields, checksum, finiteness,
    this run's, same data, its best weights present), or step 0 if the run stopped before
    its first checkpoint."""
    pair = newest_checkpoint(r.out, r.say)
    if pair is None:
        return carry
    _check_run(r, pair.meta, pair.json_path)
    (p, s, o, k, step), meta = load_checkpoint(pair, carry.tree(), ("pending", "best"), r.say)
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


def newest_checkpoint(out: Path, say: Callable[[str], None], **check: Any) -> ckpt.Pair | None:
    """The newest complete `last` pair in `out`, its record checked (`ckpt.check_last`,
    `check` passed on), or None, said, when the run stopped before its first checkpoint
    (shared with `experiments.lm`). **Raises:** `UsageError`, one line."""
    try:
        pair = ckpt.locate(out, "last")
        if pair is not None:
            ckpt.check_last(pair.meta, pair.json_path, **check)
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None
    if pair is None:
        say(
            f"Note: {out} holds no complete checkpoint (the run stopped before its first one was "
            "written): starting it again from step 0, with its saved settings."
        )
    return pair


def load_checkpoint(
    pair: ckpt.Pair, like: Any, required: tuple[str, ...], say: Callable[[str], None]
) -> tuple[Any, dict[str, Any]]:
    """`pair` loaded into the shapes of `like` (its last leaf the step), verified and finite,
    its record holding `required`; says when it is the previous pair. **Raises:**
    `UsageError`, one line."""
    try:
        tree, meta = ckpt.load_pair(
            pair.json_path,
            pair.eqx_path,
            like,
            step_of=lambda t: t[-1],
            finite=True,
            required=required,
        )
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None
    except FileNotFoundError as e:
        raise UsageError(
            f"--resume: {e} Restore it from a backup, or start a new run with another --out."
        ) from None
    if pair.json_path.name != "last.json":
        say(
            "Note: the newest checkpoint was being written when the run stopped; resuming from "
            f"the previous one ({pair.json_path.name})."
        )
    return tree, meta


def _check_run(r: Run, meta: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint of another run, or one whose settings differ from config.json
    (`ckpt.check_bound`)."""
    try:
        ckpt.check_bound(meta, path, run_id=r.cfg.run_id, settings=r.cfg.to_json())
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
        pair = ckpt.trusted_best(r.out, meta, run_id=r.cfg.run_id, settings=r.cfg.to_json())
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


def write_checkpoint(r: Run, write: Callable[[], Any]):
    """Run `write` (a checkpoint save): a second signal waits for it; file-system errors
    become one line that says the previous checkpoint is kept."""
    try:
        if r.stop is None:
            return write()
        with r.stop.saving():
            return write()
    except OSError as e:
        where = e.filename or r.out
        raise RunError(
            f"could not write a checkpoint in {r.out}: {where}: {e.strerror or e}. The previous "
            "complete checkpoint is kept; free space or make the folder writable, then continue "
            "with --resume."
        ) from None

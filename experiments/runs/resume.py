"""The generic parts of resuming a run, shared by every trainer: the run's saved settings
(`saved_settings`), the newest complete `last` checkpoint (`newest_checkpoint`), loaded and
verified (`load_checkpoint`), refused if it is another run's (`check_bound`, `not_bound`),
the line that says where the run goes on (`say_resuming`), and a checkpoint written so that
a second signal waits for it and a file-system error is one line (`write_checkpoint`).
Which settings bind a run, and what else binds it (data, corpus, best weights), is each
trainer's own resume."""

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from . import checkpoint as ckpt
from .errors import RunError, UsageError
from .signals import Stop

__all__ = [
    "RunFolder",
    "saved_settings",
    "newest_checkpoint",
    "load_checkpoint",
    "check_bound",
    "not_bound",
    "say_resuming",
    "write_checkpoint",
]


class RunFolder(Protocol):
    """What `write_checkpoint` reads of a trainer's run: its folder and signal handler."""

    @property
    def out(self) -> Path: ...

    @property
    def stop(self) -> Stop | None: ...


def saved_settings(out: Path, *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The settings `--resume` continues with: `OUT/config.json`, holding `required`.
    **Raises:** `UsageError`, one line, if it is missing or corrupt."""
    path = out / "config.json"
    if not path.is_file():
        raise UsageError(
            f"--resume: {path} does not exist, so there is no run to continue in {out}. "
            "Drop --resume to start one."
        )
    try:
        return ckpt.read_json(path, required=required)
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None


def newest_checkpoint(out: Path, say: Callable[[str], None], **check: Any) -> ckpt.Pair | None:
    """The newest complete `last` pair in `out`, its record checked (`ckpt.check_last`,
    `check` passed on), or None, said, when the run stopped before its first checkpoint.
    **Raises:** `UsageError`, one line."""
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


def not_bound(out: Path, e: ckpt.NotBound) -> UsageError:
    """`--resume`'s refusal of `e.path`, a checkpoint of another run than the one in
    `OUT/config.json` (`ckpt.check_bound`), in one line."""
    what = e.what("config.json: another run with the same settings")
    return UsageError(
        f"--resume: {e.path} does not belong to the run in {out / 'config.json'} ({what}); it "
        "was copied from another run, or config.json was edited. Restore the run's own files, "
        "or start a new run with another --out."
    )


def check_bound(
    out: Path,
    pair: ckpt.Pair,
    *,
    run_id: str | None,
    settings: Mapping[str, Any] | None,
    keys: Sequence[str],
) -> None:
    """Refuse `pair`, the newest checkpoint in `out`, if it is another run's: a setting of
    `keys` (those that bind the trainer's runs) differs from `settings`, or its run id from
    `run_id` (`ckpt.check_bound`). **Raises:** `UsageError` (`not_bound`)."""
    try:
        ckpt.check_bound(pair.meta, pair.json_path, run_id=run_id, settings=settings, keys=keys)
    except ckpt.NotBound as e:
        raise not_bound(out, e) from None


def say_resuming(say: Callable[[str], None], out: Path, step: int, steps: int) -> None:
    """Say that the run in `out` goes on from `step` of `steps`."""
    say(f"Resuming {out} at step {step}/{steps}.")


def write_checkpoint(r: RunFolder, write: Callable[[], Any]):
    """Run `write` (a checkpoint save in `r.out`): a second signal (`r.stop`) waits for it;
    file-system errors become one line that says the previous checkpoint is kept."""
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

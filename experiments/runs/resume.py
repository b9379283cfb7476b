"""The generic parts of resuming a run, shared by every trainer: the newest complete `last`
checkpoint (`newest_checkpoint`), loaded and verified (`load_checkpoint`), and a checkpoint
written so that a second signal waits for it and a file-system error is one line
(`write_checkpoint`). What binds a checkpoint to a run (settings, data, best weights) is
each trainer's own resume."""

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from . import checkpoint as ckpt
from .errors import RunError, UsageError
from .signals import Stop

__all__ = ["RunFolder", "newest_checkpoint", "load_checkpoint", "write_checkpoint"]


class RunFolder(Protocol):
    """What `write_checkpoint` reads of a trainer's run: its folder and signal handler."""

    @property
    def out(self) -> Path: ...

    @property
    def stop(self) -> Stop | None: ...


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

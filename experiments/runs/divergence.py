"""The divergence check every trainer shares: a logged loss that is not finite stops the run
(`check_losses`), with one message saying at which step and what is kept (`diverged`)."""

from pathlib import Path

import numpy as np

from . import checkpoint as ckpt
from .errors import RunError

__all__ = ["check_losses", "diverged"]


def check_losses(out: Path, values: np.ndarray, step: int, advice: str) -> None:
    """`RunError` if a logged loss (`values[:, 0]`, the steps up to `step`) is not finite,
    naming the first such step and what is kept in `out`."""
    bad = np.flatnonzero(~np.isfinite(values[:, 0]))
    if bad.size:
        first = step - len(values) + int(bad[0]) + 1
        raise RunError(diverged(out, first, f"the training loss ({values[bad[0], 0]})", advice))


def diverged(out: Path, step: int, what: str, advice: str) -> str:
    """The message of a run stopped because `what` became non-finite at `step`: where it
    stopped, the last checkpoint kept in `out` (if any), then `advice`."""
    try:
        pair = ckpt.locate(out, "last")
    except (ckpt.CheckpointError, OSError):
        pair = None
    last = pair.meta.get("step") if pair is not None and pair.intact else None
    kept = (
        f"the last checkpoint {out / 'last.eqx'} (step {last}) is kept"
        if last is not None
        else "no checkpoint was written"
    )
    return (
        f"{what} became non-finite at step {step}: the run diverged and was stopped; {kept}. "
        + advice
    )

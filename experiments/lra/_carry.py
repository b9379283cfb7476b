"""The state of a run between two steps (`Carry`) and the fingerprint of its data."""

import dataclasses
import hashlib
from typing import Any

import numpy as np

__all__ = ["Carry", "data_fingerprint"]


@dataclasses.dataclass(frozen=True)
class Carry:
    """The whole state of a run between two steps; replaced as one object.

    `pending` holds `(loss, accuracy, lr)` of the steps since the last train record; `best`
    the best validation result so far (`{"val_accuracy", "val_loss", "step"}` or None);
    `best_tree` its `(model, bn_state)` on the host while not yet written to `best.eqx`
    (it is written with the next checkpoint, so that `best.*` and `last.*` change together),
    `best_sha256` the digest of the `best.eqx` that holds it once written.
    """

    step: int
    params: Any
    bn_state: Any
    opt_state: Any
    run_key: Any
    pending: tuple = ()
    best: dict | None = None
    best_tree: Any = None
    best_sha256: str | None = None

    def tree(self):
        """What `last.eqx` holds."""
        return (
            self.params,
            self.bn_state,
            self.opt_state,
            self.run_key,
            np.asarray(self.step, np.int64),
        )


def data_fingerprint(splits: dict[str, Any]) -> dict[str, Any]:
    """Sizes and a SHA-256 of every array of every split: what `--resume` compares."""
    out: dict[str, Any] = {}
    for name, split in splits.items():
        digest = hashlib.sha256()
        for field in dataclasses.fields(split):
            x = getattr(split, field.name)
            if x is None:
                continue
            digest.update(f"{field.name}{x.dtype.str}{x.shape}".encode())
            rows = max(1, (64 << 20) // max(1, x[:1].nbytes))  # 64 MB at a time (memmaps)
            for i in range(0, len(x), rows):
                digest.update(np.ascontiguousarray(x[i : i + rows]).data)
        out[name] = {"examples": len(split), "sha256": digest.hexdigest()}
    return out

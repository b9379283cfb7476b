"""Metrics of a training run: a JSON-lines log and a PNG learning curve.

`OUT/metrics.jsonl` holds one JSON object per line, each with a `"split"`:

- `"train"`: `step` (optimiser steps done), `loss` and `accuracy` (means over the steps
  since the previous train record), `lr`, `steps_per_sec` (wall clock over those steps,
  excluding compilation of the first step), `epoch`;
- `"val"` / `"test"`: `step`, `loss`, `accuracy`, `examples`, `seconds`; the test record
  also has `checkpoint` (`"best"`: the best-validation weights) and `checkpoint_step`.

On `--resume`, `truncate` drops every record after the checkpoint's step (a run killed
between checkpoints may have logged steps that will be redone), so the resumed log is the
same as that of an uninterrupted run.

**Forwarding.** `MetricsLog(..., on_record=f)` calls `f(record)` with each record (a new
dict) once it is written: the place to send metrics to TensorBoard, Weights & Biases or a
dashboard, without this package depending on any of them. For example, with
`torch.utils.tensorboard`:

    def on_record(record):
        for name in ("loss", "accuracy"):
            if record.get(name) is not None:
                writer.add_scalar(f"{record['split']}/{name}", record[name], record["step"])
"""

import io
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .atomic import open_append, write_atomic

__all__ = ["MetricsLog", "read_records", "plot_curves"]


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All records of a metrics file (an empty list if it does not exist).

    A torn last line (the process died mid-write) is ignored.
    """
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


class MetricsLog:
    """Append-only JSON-lines writer (a no-op when `enabled` is False, e.g. on hosts > 0).

    `on_record`: called with each record (a new dict) after it is written and flushed, on
    the process that writes (see the module docstring); an exception it raises propagates
    (the record is on disk by then). Records dropped by `truncate` are not sent again.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        enabled: bool = True,
        on_record: Callable[[dict[str, Any]], Any] | None = None,
    ):
        self.path = Path(path)
        self.enabled = enabled
        self.on_record = on_record
        self._file = None

    def truncate(self, step: int) -> None:
        """Keep only the train/val records with `step <= step` (drop any test record)."""
        if not self.enabled:
            return
        kept = [
            r
            for r in read_records(self.path)
            if r.get("split") != "test" and r.get("step", 0) <= step
        ]
        write_atomic(self.path, "".join(_dumps(r) + "\n" for r in kept).encode())

    def write(self, record: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open_append(self.path)  # never through a link
        self._file.write(_dumps(record) + "\n")
        self._file.flush()
        if self.on_record is not None:
            self.on_record(dict(record))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _dumps(record: Mapping[str, Any]) -> str:
    # Python floats round-trip exactly through json (repr); nan/inf stay readable.
    return json.dumps(dict(record), allow_nan=True)


def _series(records: Iterable[Mapping[str, Any]], split: str, field: str):
    xs, ys = [], []
    for r in records:
        if r.get("split") == split and field in r and r[field] is not None:
            value = float(r[field])
            if math.isfinite(value):
                xs.append(r["step"])
                ys.append(value)
    return xs, ys


def plot_curves(
    records: Sequence[Mapping[str, Any]], path: str | os.PathLike, *, title: str
) -> None:
    """Loss and accuracy against step (train and validation; test as a marker) to a PNG.

    Uses matplotlib's object API with the Agg canvas, so it works headless and does not
    touch pyplot's global state.
    """
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state

    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    for split, style in (("train", dict(lw=1, alpha=0.8)), ("val", dict(marker="o", ms=3))):
        for ax, field in ((ax_loss, "loss"), (ax_acc, "accuracy")):
            xs, ys = _series(records, split, field)
            if xs:
                ax.plot(xs, ys, label=split, **style)
    tests = [r for r in records if r.get("split") == "test"]
    if tests:
        t = tests[-1]
        ax_acc.scatter(
            [t.get("checkpoint_step", t["step"])],
            [t["accuracy"]],
            marker="*",
            s=120,
            color="k",
            zorder=3,
            label=(
                f"test {100 * t['accuracy']:.1f}% "
                f"(best val @ {t.get('checkpoint_step', t['step'])})"
            ),
        )
    ax_loss.set(xlabel="step", ylabel="cross-entropy", title="loss")
    ax_acc.set(xlabel="step", ylabel="accuracy", title="accuracy", ylim=(0, 1))
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8)
    fig.suptitle(title, fontsize=10)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    write_atomic(path, buffer.getvalue())

"""Part (d): ListOps at Table 9 size for the time left, its validation curve beside the
earlier H100 run's.

The reference (`REFERENCE`): eqx_lru 0.1 on one H100, complex form, Table 9 settings, the
schedule shortened to 32k steps, 96k/2k/2k examples of the LRA generator; validation every
4000 steps, 36.4% at 4k to 48.5% at 32k (test 48.2%). This run uses the same settings and
schedule (`--steps 32000`: the same learning rate at the same step) and validates every
1000 steps, stopped by `--time-limit` when the part's time is spent.

**Flag.** The curve "falls clearly below" when at some step of both curves it is more than
`MARGIN` (5 points) below the reference: two validation accuracies on 2000 examples at
~40% each have a standard error of ~1.1 points, their difference ~1.5, so 5 points is
beyond seed-to-seed noise of the measurement (the runs' own seeds differ too).
"""

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._jobs import read_records
from ._machine import REPO

__all__ = ["REFERENCE", "MARGIN", "read_reference", "val_curve", "compare", "train_argv"]

REFERENCE = REPO / "experiments" / "bench" / "gpu" / "h100-listops-32k-val.jsonl"
MARGIN = 0.05


def read_reference(path: Path = REFERENCE) -> dict[str, Any]:
    """The reference run's validation curve `{step: accuracy}` and its test accuracy."""
    records = read_records(path)
    test = next((r for r in records if r.get("split") == "test"), {})
    return {"val": val_curve(records), "test": test.get("accuracy"), "source": path.name}


def val_curve(records: Iterable[Mapping[str, Any]]) -> dict[int, float]:
    """`{step: accuracy}` of the validation records of a trainer's metrics log."""
    return {
        int(r["step"]): float(r["accuracy"])
        for r in records
        if r.get("split") == "val" and "step" in r and "accuracy" in r
    }


def compare(now: Mapping[int, float], then: Mapping[int, float], margin: float = MARGIN) -> dict:
    """Rows `(step, now, then, now - then)` over the steps of either curve up to the last
    step of this run (None where a curve has no point), and the steps where this run is
    more than `margin` below the reference."""
    last = max(now, default=0)
    steps = sorted({s for s in now} | {s for s in then if s <= last})
    rows = [
        (s, now.get(s), then.get(s), None if s not in now or s not in then else now[s] - then[s])
        for s in steps
    ]
    below = [s for s, _, _, diff in rows if diff is not None and diff < -margin]
    common = sum(diff is not None for *_, diff in rows)
    return {"rows": rows, "below": below, "common": common, "margin": margin}


def train_argv(
    data_root: Path, out: Path, *, argv: Sequence[str], time_limit_s: float
) -> list[str]:
    """The trainer's command line: ListOps, Table 9 (its defaults), `argv` (the schedule,
    evaluation and, in the dry run, the tiny model), stopped by `--time-limit`."""
    from experiments.lra.tasks import LISTOPS

    minutes = max(time_limit_s, 1.0) / 60
    return [
        "--task",
        LISTOPS,
        "--data-root",
        str(data_root),
        "--out",
        str(out),
        "--checkpoint-every",
        "1000000",
        "--no-progress",
        "--time-limit",
        f"{minutes:.4f}",
        *argv,
    ]


def run_summary(out: Path) -> dict[str, Any]:
    """What the trainer wrote so far: the validation curve, the last train record and
    `results.json` (when it ended)."""
    records = read_records(out / "metrics.jsonl")
    train = [r for r in records if r.get("split") == "train"]
    try:
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        results = {}
    return {
        "val": {str(k): v for k, v in val_curve(records).items()},
        "last_train": train[-1] if train else None,
        "results": {k: results.get(k) for k in ("status", "step", "steps_per_sec") if k in results},
    }

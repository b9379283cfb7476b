"""The budget plan of `./dev.sh gpu-check` and the sizes of its GPU run and of its dry run.

The parts run one after the other, each with the card to itself, in the order of what
they answer. Part `i` may run until

    end_i = min(t_i + share_i * budget, budget - RESERVE - sum_{j > i} floor_j * budget)

seconds after the start (`t_i`: when it starts), so a part that finishes early leaves its
time to the ones after it, one that starts late (a slow start-up) still leaves each later
part its floor, and the last (`learning`, ListOps; no share) takes the time left. A part
stops itself at `end_i` (between two measurements, tests or training steps); its process
is killed `GRACE` seconds later if it has not.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

__all__ = ["Part", "PARTS", "Sizes", "GPU", "DRY", "part_end", "plan_rows"]

#: The default budget: 8 minutes of wall time on one H100, start-up and compiles included.
DEFAULT_BUDGET_S = 480.0
#: The dry run's bound: its parts at tiny sizes end by themselves well before it.
DRY_BUDGET_S = 240.0
#: Kept back at the end for writing the last report.
RESERVE_S = 5.0
#: How long a part's process may run past its end before it is killed.
GRACE_S = 15.0


@dataclasses.dataclass(frozen=True)
class Part:
    """One part of the check: `share` of the budget (None: the time left), and `floor`,
    the fraction of the budget kept for it while the parts before it run."""

    name: str
    title: str
    share: float | None
    floor: float
    why: str


PARTS = (
    Part(
        "tests",
        "(a) GPU-sensitive tests",
        0.25,
        0.0,
        "pytest and JAX start-up (~15 s), then compiles: each test compiles its own small "
        "programs; the selection is ordered so a cut keeps the precision and determinism tests",
    ),
    Part(
        "layer",
        "(b) the layer at the benchmark's shapes",
        0.25,
        0.06,
        "9 variants x 2 modes x 3 lengths = 54 compiles of ~1-2 s each, then 7 timed rounds "
        "(~0.2 s per round at L = 16k, 1.7 s for the sequential method); fwd+bwd first",
    ),
    Part(
        "memory",
        "(c) PathX training step, peak device memory",
        0.17,
        0.06,
        "two processes (one per form, so each peak is its own), each a JAX start-up and one "
        "compile of the depth-6 bidirectional step at L = 16384 (~20-30 s) and two steps",
    ),
    Part(
        "learning",
        "(d) ListOps at Table 9 size",
        None,
        0.2,
        "the time left (about 2-2.5 min): trainer start-up, data and compile (~40 s), then "
        "~55 steps/s (the H100 run of 0.1), so about step 4000, the reference's first point",
    ),
)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """What each part runs: the GPU run's sizes (`GPU`) or the dry run's (`DRY`)."""

    name: str
    tests: str  # "all": the whole selection; "dry": the test_gpu.py part of it
    layer: dict[str, Any]
    memory: dict[str, Any]
    listops: dict[str, Any]


GPU = Sizes(
    name="gpu",
    tests="all",
    layer={"B": 16, "H": 256, "N": 256, "lengths": (16384, 4096, 1024), "rounds": 7},
    memory={
        "task": None,  # the longest task of the registry (PathX)
        "forms": ("complex", "real"),
        "remat": True,
        "overrides": {},
        "length": None,
        "isolate": True,
    },
    listops={
        "counts": (96000, 2000, 2000),
        "argv": ("--steps", "32000", "--eval-every", "1000", "--log-every", "500"),
    },
)
DRY = Sizes(
    name="dry",
    tests="dry",
    layer={"B": 2, "H": 6, "N": 10, "lengths": (24,), "rounds": 2, "dry": True},
    memory={
        "task": None,
        "forms": ("complex", "real"),
        "remat": True,
        "overrides": {"batch_size": 2, "d_model": 8, "d_state": 12, "depth": 1},
        "length": 64,
        "isolate": False,  # the CPU reports no peak memory: one process saves a start-up
    },
    listops={
        "counts": (64, 16, 16),
        "argv": (
            "--steps",
            "30",
            "--eval-every",
            "10",
            "--log-every",
            "10",
            "--depth",
            "1",
            "--d-model",
            "8",
            "--d-state",
            "12",
            "--batch-size",
            "4",
        ),  # fmt: skip
    },
)


def part_end(name: str, *, budget: float, elapsed: float) -> float:
    """Seconds after the start by which part `name`, starting `elapsed` seconds after it,
    must have stopped (the formula of the module docstring)."""
    names = [p.name for p in PARTS]
    i = names.index(name)
    part = PARTS[i]
    later = sum(p.floor for p in PARTS[i + 1 :]) * budget
    last = budget - RESERVE_S - later
    if part.share is None:
        return last
    return min(elapsed + part.share * budget, last)


def plan_rows(budget: float, parts: Sequence[Part] = PARTS) -> list[dict[str, Any]]:
    """Each part's share in seconds of `budget` (the time left for the last), for the
    report."""
    shared = sum(p.share or 0.0 for p in parts) * budget
    return [
        {
            "part": p.title,
            "seconds": round(p.share * budget) if p.share is not None else None,
            "left": p.share is None,
            "about": round(budget - shared - RESERVE_S) if p.share is None else None,
            "why": p.why,
        }
        for p in parts
    ]

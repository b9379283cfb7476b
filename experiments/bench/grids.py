"""The benchmark's grids: what `python -m experiments.bench --grid full|reduced|quick` measures."""

from .extras import DEFAULT_RING, PATHX_RING

__all__ = ["FULL", "REDUCED", "QUICK", "GRIDS", "SECTIONS"]

FULL = {
    "B": 16,
    "N": 256,
    "H": (128, 256),
    "L": (1024, 4096, 16384),
    "rounds": 5,
    "key": (256, 256, 16384),
    "key_rounds": 7,
    "unroll": (1, 2, 4, 8, 16, 32),
    "hugetlb": {
        "cases": [
            ("app_a", 4096),
            ("real-sequential", 4096),
            ("floor", 4096),
            ("complex-sequential", 16384),
            ("real-sequential", 16384),
            ("floor", 16384),
        ],
        "pairs": 3,
        "reps": 3,
    },
    # Paper Table 9: (H, N) of the LRA models (ListOps/Text/Retrieval, Image, Pathfinder, PathX).
    "step": {
        "sizes": [(512, 384), (128, 256), (256, 192), (192, 256)],
        "tokens": 4096,
        "calls": 500,
    },
    "precision": {
        "configs": [
            (256, 256, 1024, DEFAULT_RING),
            (256, 256, 16384, DEFAULT_RING),
            (256, 256, 16384, PATHX_RING),
        ],
        "batch": 2,
    },
    "peak_rss": True,
    "autodiff": True,
    # One training step per LRA task (Table 9 sizes), the registered tasks and cores:
    # `_model_rows` (both forms on every task here).
    "model": {"calls": 2, "real": "all"},
}
# What fits in about 25 minutes on a 2-core CPU: one H, three rounds, no peak-RSS
# processes, no block-size section, one huge-pages case; one timed step per task.
REDUCED = dict(
    FULL,
    H=(256,),
    rounds=3,
    key_rounds=3,
    unroll=(),
    hugetlb={"cases": [("real-sequential", 16384)], "pairs": 2, "reps": 2},
    step={"sizes": [(128, 256), (512, 384)], "tokens": 4096, "calls": 200},
    precision={
        "configs": [(256, 256, 16384, DEFAULT_RING), (256, 256, 16384, PATHX_RING)],
        "batch": 2,
    },
    peak_rss=False,
    autodiff=False,
    model={"calls": 1, "real": "first"},
)
QUICK = {
    "B": 2,
    "N": 16,
    "H": (16,),
    "L": (128,),
    "rounds": 3,
    "key": (16, 16, 128),
    "key_rounds": 3,
    "unroll": (1, 8),
    "hugetlb": {"cases": [], "pairs": 0, "reps": 0},
    "step": {"sizes": [(16, 16)], "tokens": 32, "calls": 20},
    "precision": {"configs": [(16, 16, 128, DEFAULT_RING)], "batch": 2},
    "peak_rss": False,
    "autodiff": True,
    "model": None,
}
GRIDS = {"full": FULL, "reduced": REDUCED, "quick": QUICK}
SECTIONS = ("memory", "grid", "unroll", "hugetlb", "step", "precision", "model")

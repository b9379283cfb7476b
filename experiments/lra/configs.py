"""Per-task LRU settings for the Long Range Arena, from the LRU paper.

Sources (Orvieto et al. 2023, `shared/paper/lru-paper-full.md`):
- Table 9: depth, H (`d_model`), N (`d_state`), iterations (`steps`), batch size, LR factor,
  weight decay, dropout.
- Table 8 (LRU row): the ring `[r_min, r_max]` of the eigenvalue moduli at init; phases in
  `[0, max_phase]` with `max_phase = 2*pi`, except PathX `pi/10`.
- §D.2: AdamW; linear warmup over the first 10% of the steps, then cosine decay; the
  recurrent parameters (nu, theta, gamma, B) get `lr_factor * base_lr` and no weight decay.

Not in the paper: the base learning rate, the norm type and pooling. `base_lr` is S5's global
learning rate for the same task (`shared/LRA.md` §8: S5 `lr_factor * ssm_lr_base`), since the
paper says it followed S5's settings and tuned the base learning rate on a log2 grid; treat it
as the centre of such a sweep. Norm and pooling follow minimal-LRU and S5 (BatchNorm,
mean pooling). PathX uses the GLU without its extra linear transform (`glu="half"`, §D.1),
as S5 did. `bidirectional` is on for the two 2-D path tasks (Pathfinder, PathX), whose
answer depends on both ends of the flattened image; S5 runs every task bidirectionally, so
use `dataclasses.replace(cfg, bidirectional=True)` to match it. `eval_every` is one epoch
of the official train set.
"""

import dataclasses
import math
from typing import Literal


__all__ = ["TaskConfig", "CONFIGS", "get_config"]


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """Model, optimiser and data settings of one LRA task."""

    task: str
    num_classes: int
    seq_len: int  # l_max of the task (token tasks are padded to at most this length)
    input_kind: Literal["tokens", "features"]  # embedding lookup vs linear encoder
    train_size: int  # official number of training examples
    depth: int
    d_model: int  # H
    d_state: int  # N
    steps: int  # training iterations
    batch_size: int
    base_lr: float
    lr_factor: float  # recurrent parameters use lr_factor * base_lr
    weight_decay: float
    dropout: float
    bidirectional: bool
    r_min: float
    r_max: float
    max_phase: float
    pooling: Literal["mean", "last"] = "mean"
    norm: Literal["batch", "layer"] = "batch"
    glu: Literal["full", "half"] = "full"  # "half": no extra linear transform (PathX, §D.1)
    warmup_fraction: float = 0.1
    eval_every: int = 1000

    def __post_init__(self):
        if not 0 <= self.r_min <= self.r_max < 1:
            raise ValueError(
                f"{self.task}: need 0 <= r_min <= r_max < 1, got [{self.r_min}, {self.r_max}]."
            )
        if not 0 < self.max_phase <= 2 * math.pi:
            raise ValueError(f"{self.task}: max_phase must lie in (0, 2*pi], got {self.max_phase}.")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(
                f"{self.task}: warmup_fraction must lie in [0, 1), got {self.warmup_fraction}."
            )

    @property
    def recurrent_lr(self) -> float:
        """Learning rate of nu, theta, gamma and B."""
        return self.lr_factor * self.base_lr

    @property
    def warmup_steps(self) -> int:
        return int(self.warmup_fraction * self.steps)


def _config(task: str, *, train_size: int, batch_size: int, **kwargs) -> TaskConfig:
    return TaskConfig(
        task=task,
        train_size=train_size,
        batch_size=batch_size,
        eval_every=train_size // batch_size,
        depth=6,
        weight_decay=0.05,
        **kwargs,
    )


_TAU = 2 * math.pi

CONFIGS: dict[str, TaskConfig] = {
    "listops": _config(
        "listops", num_classes=10, seq_len=2048, input_kind="tokens", train_size=96_000,
        d_model=128, d_state=256, steps=80_000, batch_size=32, lr_factor=0.5, dropout=0.0,
        base_lr=3e-3,  # S5 ListOps: ssm_lr 1e-3, lr 3e-3
        bidirectional=False, r_min=0.0, r_max=0.99, max_phase=_TAU,
    ),
    "text": _config(
        "text", num_classes=2, seq_len=4096, input_kind="tokens", train_size=25_000,
        d_model=256, d_state=192, steps=50_000, batch_size=32, lr_factor=0.1, dropout=0.1,
        base_lr=4e-3,  # S5 IMDB: ssm_lr 1e-3, lr 4e-3
        bidirectional=False, r_min=0.5, r_max=0.9, max_phase=_TAU,
    ),
    "retrieval": _config(
        "retrieval", num_classes=2, seq_len=4000, input_kind="tokens", train_size=147_086,
        d_model=128, d_state=256, steps=100_000, batch_size=64, lr_factor=0.5, dropout=0.1,
        base_lr=2e-3,  # S5 AAN: ssm_lr 1e-3, lr 2e-3
        bidirectional=False, r_min=0.5, r_max=0.9, max_phase=_TAU,
    ),
    "image": _config(
        "image", num_classes=10, seq_len=1024, input_kind="features", train_size=45_000,
        d_model=512, d_state=384, steps=180_000, batch_size=50, lr_factor=0.25, dropout=0.1,
        base_lr=4.5e-3,  # S5 sCIFAR: ssm_lr 1e-3, lr 4.5e-3
        bidirectional=False, r_min=0.9, r_max=0.999, max_phase=_TAU,
    ),
    "pathfinder": _config(
        "pathfinder", num_classes=2, seq_len=1024, input_kind="features", train_size=160_000,
        d_model=192, d_state=256, steps=500_000, batch_size=64, lr_factor=0.25, dropout=0.0,
        base_lr=4.5e-3,  # S5 Pathfinder: ssm_lr 9e-4, lr 4.5e-3
        bidirectional=True, r_min=0.9, r_max=0.999, max_phase=_TAU,
    ),
    "pathx": _config(
        "pathx", num_classes=2, seq_len=16384, input_kind="features", train_size=160_000,
        d_model=128, d_state=256, steps=250_000, batch_size=32, lr_factor=0.25, dropout=0.0,
        base_lr=1.8e-3,  # S5 Path-X: ssm_lr 6e-4, lr 1.8e-3
        bidirectional=True, r_min=0.999, r_max=0.9999, max_phase=math.pi / 10, glu="half",
    ),
}


def get_config(task: str) -> TaskConfig:
    """The `TaskConfig` of `task`; use `dataclasses.replace` to override fields."""
    try:
        return CONFIGS[task]
    except KeyError:
        raise ValueError(f"Unknown LRA task {task!r}; expected one of {tuple(CONFIGS)}.") from None

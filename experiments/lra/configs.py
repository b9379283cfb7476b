"""Per-task LRU settings for the Long Range Arena, from the LRU paper (Table 9).

The values live in the task registry, `experiments/lra/tasks.py` (each `Task`'s `defaults`,
with the sources of every number); this module defines their record, `TaskConfig`:
`tasks.get_task(name).config` is a task's. Use `dataclasses.replace(cfg,
bidirectional=True)` and the like to override fields.
"""

import dataclasses
import math
from typing import Literal

__all__ = ["TaskConfig"]


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

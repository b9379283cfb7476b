"""The trainer's command line for a tiny ListOps run, shared by the trainer's tests."""

from pathlib import Path


def listops_argv(
    data: Path,
    out: Path | str,
    *extra: str,
    steps: int = 8,
    d_model: int = 8,
    d_state: int = 4,
    depth: int = 1,
    dropout: float = 0.1,
    eval_every: int = 4,
    checkpoint_every: int = 3,
) -> list[str]:
    """`python -m experiments.lra.train` arguments: ListOps from `data` into `out`, batch 8,
    a log line every step, no progress bar, then `extra`."""
    flags = {
        "task": "listops",
        "data-root": data,
        "out": out,
        "steps": steps,
        "batch-size": 8,
        "d-model": d_model,
        "d-state": d_state,
        "depth": depth,
        "dropout": dropout,
        "eval-every": eval_every,
        "log-every": 1,
        "checkpoint-every": checkpoint_every,
    }
    argv = [word for name, value in flags.items() for word in (f"--{name}", str(value))]
    return [*argv, "--no-progress", *extra]

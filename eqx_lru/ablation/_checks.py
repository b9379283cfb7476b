"""Argument checks shared by the ablation cores."""

from jaxtyping import Array


def check_input(u: Array, d_model: int) -> None:
    """Raise a `ValueError` naming `u` unless it is one sequence `(length >= 1, d_model)`."""
    if u.ndim != 2 or u.shape[1] != d_model or u.shape[0] == 0:
        raise ValueError(
            f"`u` must have shape (length, d_model) with length >= 1 and d_model={d_model}; "
            f"got shape {u.shape}. Batch with `jax.vmap`: a core acts on one sequence."
        )

"""The writers the task records name (`Task.synthetic`), one call shape for all:
`writer(root, counts, *, seed, workers) -> folder`, `counts` the (train, val, test)
examples."""

from pathlib import Path

from .documents import write_image_task, write_retrieval_task, write_text_task
from .listops import write_listops
from .pathfinder import write_pathfinder

__all__ = ["listops_data", "text_data", "retrieval_data", "image_data", "pathfinder_data"]


def listops_data(root: Path, counts, *, seed: int, workers: int) -> Path:
    """ListOps by the LRA generator's settings (500 < length < 2000)."""
    del workers
    return write_listops(root, counts, seed=seed)


def text_data(root: Path, counts, *, seed: int, workers: int) -> Path:
    del workers
    return write_text_task(root, counts, seed=seed)


def retrieval_data(root: Path, counts, *, seed: int, workers: int) -> Path:
    del workers
    return write_retrieval_task(root, counts, seed=seed)


def image_data(root: Path, counts, *, seed: int, workers: int) -> Path:
    del workers
    return write_image_task(root, counts, seed=seed)


def pathfinder_data(resolution: int):
    """The writer of Pathfinder images of side `resolution` (32; PathX: 128)."""

    def write(root: Path, counts, *, seed: int, workers: int) -> Path:
        # The loader cuts the images 80/10/10: `counts` gives their total.
        return write_pathfinder(
            root,
            sum(counts),
            seed=seed,
            resolution=resolution,
            images_per_batch=100,
            workers=workers,
            overwrite=True,
        )

    return write

"""The Long Range Arena tasks: one `Task` record per task, in `REGISTRY`.

A `Task` says everything the tools need to know about a task: the folder its files are in,
the loader that reads them, its sizes, the kind of model it trains, its defaults (the
LRU's, paper Table 9) and the writer of synthetic data in its format. The trainer, `load_task`,
`steps`, `config.RunConfig.defaults`, `on_demand` (for `runs.env`), `memory.py`,
`gpu_check.py` and the benchmark all read this registry, so adding a task is one
`register(Task(...))` plus its loader.
How to write one, what a loader returns, and where every number below comes from:
[training on LRA](../../docs/guides/lra.md#adding-a-task-and-running-from-python).
"""

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from . import data, synthetic
from .data import Store, TaskData, _pixels, _tokens

__all__ = [
    "LISTOPS",
    "TEXT",
    "RETRIEVAL",
    "IMAGE",
    "PATHFINDER",
    "PATHX",
    "Loader",
    "Synthetic",
    "Task",
    "SETTINGS",
    "REGISTRY",
    "register",
    "get_task",
    "names",
    "on_demand",
    "load_task",
]


class Synthetic(Protocol):
    """`synthetic(root, counts, *, seed, workers) -> folder`: writes `counts` (train, val,
    test) examples of random data in the task's format under `root`."""

    def __call__(
        self, root: Path, counts: tuple[int, int, int], *, seed: int, workers: int
    ) -> Path: ...


class Loader(Protocol):
    """`loader(task, folder, store, max_examples) -> metadata`: see the module docstring."""

    def __call__(
        self, task: "Task", folder: Path, store: Store, max_examples: int | None
    ) -> dict: ...


def every_file(folder: Path) -> list[Path]:
    """Every file below `folder` (what a cache fingerprint covers unless a task says else)."""
    return [p for p in folder.rglob("*") if p.is_file()]


def _all_splits_from_folder(folder: Path) -> dict[str, str]:
    return dict.fromkeys(("train", "val", "test"), f"the files under {folder}")


#: The settings a task's `defaults` give, named as `config.RunConfig`'s fields, in the order
#: `Task.settings` returns them.
SETTINGS = tuple(
    "depth d_model d_state steps batch_size lr lr_factor weight_decay dropout warmup_fraction "
    "bidirectional r_min r_max max_phase glu norm pooling eval_every".split()
)
#: Settings every task shares unless its `defaults` say otherwise (Table 9, §D.2).
_COMMON_DEFAULTS = dict(
    depth=6, weight_decay=0.05, warmup_fraction=0.1, pooling="mean", norm="batch", glu="full"
)


@dataclasses.dataclass(frozen=True)
class Task:
    """One LRA task: its files, loader, sizes, model kind and default settings.

    **Fields:**
    - `name`: the `--task` name.
    - `folder`: the folder holding the files, relative (e.g. `"listops-1000"`); searched
      up to 4 levels below `--data-root` (`data.find_task_dir`).
    - `loader`: reads the files; see `Loader`.
    - `num_classes`: labels lie in `[0, num_classes)`.
    - `seq_len`: the maximum sequence length `l_max` (token tasks pad to at most this;
      pixel tasks: `H * W`, a square image).
    - `train_size`: the official number of training examples (one epoch: `eval_every`).
    - `defaults`: the task's model and optimiser settings (Table 9), named as the
      trainer's settings (`config.RunConfig`: `lr`, `d_model`...; `SETTINGS` lists them);
      `depth` 6, `weight_decay` 0.05, `warmup_fraction` 0.1, mean pooling, BatchNorm and
      the full GLU unless given, `eval_every` one epoch. `settings` is them, completed.
    - `in_channels`: channels per pixel for pixel tasks (linear encoder); None for token
      tasks (embedding).
    - `vocab_size`: token tasks: the vocabulary size of the official data, specials
      included (`steps.task_spec(name)` builds models without loading data).
    - `model`: `"classifier"` (one sequence per example) or `"retrieval"` (a pair of
      documents, the two-tower `eqx_lru.LRURetrievalModel`).
    - `pixel_mean`, `pixel_std`: pixel tasks, per channel: inputs are
      `(x/255 - pixel_mean)/pixel_std`; None: `x/255`.
    - `source_files`: `folder -> files` whose names, sizes and mtimes fingerprint the
      cache (default: every file below the folder).
    - `split_sources`: `folder -> {split: description}` for error messages.
    - `remat`, `allocate_on_demand`: defaults of the trainer for big tasks (see the guide).
    - `synthetic`: writes random data in the task's format (`Synthetic`; None: none);
      `synthetic_counts`: (train, val, test) examples it writes for a check that the task
      loads and trains (`experiments/gpu_check.py`), enough for a few steps.
    """

    name: str
    folder: str
    loader: Loader
    num_classes: int
    seq_len: int
    train_size: int
    defaults: Mapping[str, Any]
    in_channels: int | None = None
    vocab_size: int | None = None
    model: Literal["classifier", "retrieval"] = "classifier"
    pixel_mean: tuple[float, ...] | None = None
    pixel_std: tuple[float, ...] | None = None
    source_files: Callable[[Path], Iterable[Path]] = every_file
    split_sources: Callable[[Path], Mapping[str, str]] = _all_splits_from_folder
    remat: bool = False
    allocate_on_demand: bool = False
    synthetic: Synthetic | None = None
    synthetic_counts: tuple[int, int, int] = (96, 16, 16)

    def __post_init__(self):
        def need(ok: bool, what: str):
            if not ok:
                raise ValueError(f"Task {self.name!r}: {what}.")

        need(
            isinstance(self.name, str) and self.name.isidentifier(),
            "name must be a word (letters, digits, underscores), as in --task NAME",
        )
        need(self.num_classes >= 2, f"num_classes must be >= 2, got {self.num_classes}")
        need(self.seq_len >= 1 and self.train_size >= 1, "seq_len and train_size must be >= 1")
        need(
            self.model in ("classifier", "retrieval"),
            f"model must be 'classifier' or 'retrieval', got {self.model!r}",
        )
        if self.in_channels is None:
            need(
                self.vocab_size is not None and self.vocab_size >= 4,
                "a token task (in_channels None) needs vocab_size >= 4 (specials included)",
            )
        else:
            need(self.in_channels >= 1, f"in_channels must be >= 1, got {self.in_channels}")
            need(
                math.isqrt(self.seq_len) ** 2 == self.seq_len,
                f"a pixel task's seq_len must be H*W of a square image, got {self.seq_len}",
            )
            need(self.model == "classifier", "a pixel task must use the 'classifier' model")
        for stats in (self.pixel_mean, self.pixel_std):
            need(
                stats is None or len(stats) in (1, self.in_channels or 0),
                "pixel_mean and pixel_std need one value per channel (or one for all)",
            )
        self.settings  # noqa: B018 (checks `defaults` now rather than at the first run)

    @property
    def input_kind(self) -> Literal["tokens", "features"]:
        return "tokens" if self.in_channels is None else "features"

    @property
    def image_side(self) -> int | None:
        """The side of the square image of a pixel task; None for token tasks."""
        return None if self.in_channels is None else math.isqrt(self.seq_len)

    @functools.cached_property
    def settings(self) -> dict[str, Any]:
        """The task's default settings (`defaults` over `_COMMON_DEFAULTS`, `eval_every` one
        epoch unless given), checked: every one of `SETTINGS`, no other, a ring `0 <= r_min
        <= r_max < 1`, `0 < max_phase <= 2*pi`, `0 <= warmup_fraction < 1`."""
        settings = {**_COMMON_DEFAULTS, **self.defaults}
        if "batch_size" not in settings:
            raise ValueError(f"Task {self.name!r}: defaults need a batch_size.")
        settings.setdefault("eval_every", max(1, self.train_size // settings["batch_size"]))
        unknown = sorted(set(settings) - set(SETTINGS))
        missing = [name for name in SETTINGS if name not in settings]
        if unknown or missing:
            what = f"unknown {unknown}" if unknown else f"missing {missing}"
            raise ValueError(f"Task {self.name!r}: bad defaults ({what}).")
        s = settings
        ring, phase, warmup = [s["r_min"], s["r_max"]], s["max_phase"], s["warmup_fraction"]
        if not 0 <= ring[0] <= ring[1] < 1:
            raise ValueError(f"{self.name}: need 0 <= r_min <= r_max < 1, got {ring}.")
        if not 0 < phase <= 2 * math.pi:
            raise ValueError(f"{self.name}: max_phase must lie in (0, 2*pi], got {phase}.")
        if not 0 <= warmup < 1:
            raise ValueError(f"{self.name}: warmup_fraction must lie in [0, 1), got {warmup}.")
        return {name: settings[name] for name in SETTINGS}


#: The registered tasks by name, in `--task` order.
REGISTRY: dict[str, Task] = {}


def register(task: Task, *, replace: bool = False) -> Task:
    """Add `task` to `REGISTRY` (`replace=True` to redefine a name); returns it."""
    if not isinstance(task, Task):
        raise TypeError(f"register expects a Task, got {type(task).__name__}.")
    if task.name in REGISTRY and not replace:
        raise ValueError(
            f"Task {task.name!r} is already registered; pass replace=True to redefine it."
        )
    REGISTRY[task.name] = task
    return task


def get_task(name: str) -> Task:
    """The registered `Task` called `name`."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"Unknown LRA task {name!r}; expected one of {names()}.") from None


def names() -> tuple[str, ...]:
    """The registered task names, in registration order."""
    return tuple(REGISTRY)


def on_demand(name: str) -> bool:
    """Whether the task `name` allocates accelerator memory on demand by default (its
    `allocate_on_demand`; experiments/lra/MEMORY.md): the look-up the trainer passes to
    `runs.env.configure_backend`. False for a name not registered."""
    return name in REGISTRY and REGISTRY[name].allocate_on_demand


def load_task(
    name: str,
    data_root: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
) -> TaskData:
    """Load the registered task `name` from its official files under `data_root`: the
    entry's loader through `data.load` (which documents `cache_dir`, `max_examples` and
    the errors). A `ValueError` names the registered tasks if `name` is not one."""
    if name not in REGISTRY:
        raise ValueError(f"Unknown task {name!r}; expected one of {names()}.")
    return data.load(REGISTRY[name], data_root, cache_dir=cache_dir, max_examples=max_examples)


# --------------------------------------------------------------------------- the six LRA tasks

#: The six LRA tasks' names (what `--task` takes); other tools name them through these.
LISTOPS, TEXT, RETRIEVAL, IMAGE = "listops", "text", "retrieval", "image"
PATHFINDER, PATHX = "pathfinder", "pathx"

_TAU = 2 * math.pi


def _pathfinder_splits(folder: Path) -> dict[str, str]:
    usable = f"the usable images listed in {folder / 'metadata'} (80/10/10 split)"
    return dict.fromkeys(("train", "val", "test"), usable)


def _image_splits(folder: Path) -> dict[str, str]:
    train = f"{folder}/data_batch_{{1..5}} (90/10 train/val split)"
    return {"train": train, "val": train, "test": str(folder / "test_batch")}


def _named_files(files: Callable[[Path], Mapping[str, Path]]) -> Callable[[Path], dict[str, str]]:
    return lambda folder: {s: str(p) for s, p in files(folder).items()}


register(
    Task(
        name=LISTOPS,
        folder="listops-1000",
        loader=_tokens.load_listops,
        num_classes=10,
        seq_len=2048,
        vocab_size=18,
        train_size=96_000,
        source_files=lambda folder: list(folder.glob("basic_*.tsv")),
        split_sources=_named_files(_tokens.listops_files),
        synthetic=synthetic.listops_data,
        defaults=dict(
            d_model=128,
            d_state=256,
            steps=80_000,
            batch_size=32,
            lr_factor=0.5,
            dropout=0.0,
            lr=3e-3,  # S5 ListOps: ssm_lr 1e-3, lr 3e-3
            bidirectional=False,
            r_min=0.0,
            r_max=0.99,
            max_phase=_TAU,
        ),
    )
)
register(
    Task(
        name=TEXT,
        folder="aclImdb",
        loader=_tokens.load_text,
        num_classes=2,
        seq_len=4096,
        vocab_size=135,
        train_size=25_000,
        allocate_on_demand=True,
        source_files=_tokens.text_files,
        split_sources=lambda folder: {
            s: f"{folder / f}/{{neg,pos}}/*.txt"
            for s, f in {"train": "train", "val": "test", "test": "test"}.items()
        },
        synthetic=synthetic.text_data,
        defaults=dict(
            d_model=256,
            d_state=192,
            steps=50_000,
            batch_size=32,
            lr_factor=0.1,
            dropout=0.1,
            lr=4e-3,  # S5 IMDB: ssm_lr 1e-3, lr 4e-3
            bidirectional=False,
            r_min=0.5,
            r_max=0.9,
            max_phase=_TAU,
        ),
    )
)
register(
    Task(
        name=RETRIEVAL,
        folder="tsv_data",
        loader=_tokens.load_retrieval,
        model="retrieval",
        num_classes=2,
        seq_len=4000,
        vocab_size=98,
        train_size=147_086,
        remat=True,
        allocate_on_demand=True,
        source_files=lambda folder: list(folder.glob("new_aan_pairs.*.tsv")),
        split_sources=_named_files(_tokens.retrieval_files),
        synthetic=synthetic.retrieval_data,
        synthetic_counts=(160, 16, 16),
        defaults=dict(
            d_model=128,
            d_state=256,
            steps=100_000,
            batch_size=64,
            lr_factor=0.5,
            dropout=0.1,
            lr=2e-3,  # S5 AAN: ssm_lr 1e-3, lr 2e-3
            bidirectional=False,
            r_min=0.5,
            r_max=0.9,
            max_phase=_TAU,
        ),
    )
)
register(
    Task(
        name=IMAGE,
        folder="cifar-10-batches-py",
        loader=_pixels.load_image,
        num_classes=10,
        seq_len=1024,
        in_channels=3,
        train_size=45_000,
        pixel_mean=(0.4914, 0.4822, 0.4465),
        pixel_std=(0.247, 0.243, 0.261),
        source_files=_pixels.image_files,
        split_sources=_image_splits,
        synthetic=synthetic.image_data,
        synthetic_counts=(150, 0, 40),  # the loader takes val as 10% of the train batches
        defaults=dict(
            d_model=512,
            d_state=384,
            steps=180_000,
            batch_size=50,
            lr_factor=0.25,
            dropout=0.1,
            lr=4.5e-3,  # S5 sCIFAR: ssm_lr 1e-3, lr 4.5e-3
            bidirectional=False,
            r_min=0.9,
            r_max=0.999,
            max_phase=_TAU,
        ),
    )
)
register(
    Task(
        name=PATHFINDER,
        folder="pathfinder32/curv_contour_length_14",
        loader=_pixels.load_pathfinder,
        num_classes=2,
        seq_len=32 * 32,
        in_channels=1,
        train_size=160_000,
        pixel_mean=(0.5,),
        pixel_std=(0.5,),
        source_files=_pixels.pathfinder_files,
        split_sources=_pathfinder_splits,
        synthetic=synthetic.pathfinder_data(32),
        synthetic_counts=(200, 0, 0),  # the total; the loader splits it 80/10/10
        defaults=dict(
            d_model=192,
            d_state=256,
            steps=500_000,
            batch_size=64,
            lr_factor=0.25,
            dropout=0.0,
            lr=4.5e-3,  # S5 Pathfinder: ssm_lr 9e-4, lr 4.5e-3
            bidirectional=True,
            r_min=0.9,
            r_max=0.999,
            max_phase=_TAU,
        ),
    )
)
register(
    Task(
        name=PATHX,
        folder="pathfinder128/curv_contour_length_14",
        loader=_pixels.load_pathfinder,
        num_classes=2,
        seq_len=128 * 128,
        in_channels=1,
        train_size=160_000,
        pixel_mean=(0.5,),
        pixel_std=(0.5,),
        remat=True,
        allocate_on_demand=True,
        source_files=_pixels.pathfinder_files,
        split_sources=_pathfinder_splits,
        synthetic=synthetic.pathfinder_data(128),
        synthetic_counts=(80, 0, 0),
        defaults=dict(
            d_model=128,
            d_state=256,
            steps=250_000,
            batch_size=32,
            lr_factor=0.25,
            dropout=0.0,
            lr=1.8e-3,  # S5 Path-X: ssm_lr 6e-4, lr 1.8e-3
            bidirectional=True,
            r_min=0.999,
            r_max=0.9999,
            max_phase=math.pi / 10,
            glu="half",
        ),
    )
)

"""The Long Range Arena tasks: one `Task` record per task, in `REGISTRY`.

A `Task` says everything the tools need to know about a task: the folder its files are in
(searched under `--data-root`), the loader that reads them, its sizes (classes, sequence
length, pixel channels or vocabulary), the kind of model it trains, and its defaults
(paper Table 9). The trainer's `--task` choices, `load_task`, `steps.task_spec` and
`steps.build_model`, `config.RunConfig.defaults`, the allocator choice of `_env`, `memory.py` and
the benchmark all read this registry, so adding a task is one `register(Task(...))` plus
its loader:

    from experiments.lra import data, tasks

    def load_parity(task, folder, store, max_examples):
        # folder/{train,val,test}.tsv, lines "0110<TAB>1": bits, then the label
        def source(split):
            def examples():
                for n, line in data.read_lines(folder / f"{split}.tsv"):
                    bits, label = line.split("\\t")
                    yield data.parse_label(label, task.num_classes, f"{split}:{n}"), (list(bits),)
            return lambda: data.take(examples(), max_examples)
        sources = {split: source(split) for split in data.SPLITS}
        return data.build_token_task(store, sources, chars=False, min_freq=1, n_docs=1)

    tasks.register(tasks.Task(
        name="parity", folder="parity", loader=load_parity, num_classes=2, seq_len=64,
        vocab_size=5, train_size=1000,
        defaults=dict(d_model=32, d_state=16, steps=1000, batch_size=16, base_lr=1e-3,
                      lr_factor=0.5, dropout=0.0, bidirectional=False, r_min=0.0,
                      r_max=0.99, max_phase=2 * math.pi),
    ))

(`tests/experiments/test_lra_tasks.py` registers and trains such a task.) A loader is called as
`loader(task, folder, store, max_examples)`: it reads the files under `folder`, puts the
arrays `<split>.<field>` (fields of `data.Split`) of the three splits into `store` and
returns the metadata `{"vocab": [...] or None, "seq_len": L, "fields": [...], "dropped":
{...}}` (optionally `"aliases": {"val": "test"}` for a split served by another);
`data.build_token_task` and `data.pixel_meta` build it for token and pixel tasks.

**Where the numbers come from** (Orvieto et al. 2023, `shared/paper/lru-paper-full.md`,
and `shared/LRA.md`):
- Table 9: depth, H (`d_model`), N (`d_state`), iterations (`steps`), batch size, LR
  factor, weight decay, dropout.
- Table 8 (LRU row): the ring `[r_min, r_max]` of the eigenvalue moduli at init; phases in
  `[0, max_phase]` with `max_phase = 2*pi`, except PathX `pi/10`.
- §D.2: AdamW; linear warmup over the first 10% of the steps, then cosine decay; the
  recurrent parameters (nu, theta, gamma, B) get `lr_factor * base_lr` and no weight decay.
- Not in the paper: the base learning rate, the norm type and pooling. `base_lr` is S5's
  global learning rate for the same task (`shared/LRA.md` §8: S5 `lr_factor * ssm_lr_base`),
  since the paper says it followed S5's settings and tuned the base learning rate on a log2
  grid; treat it as the centre of such a sweep. Norm and pooling follow minimal-LRU and S5
  (BatchNorm, mean pooling). PathX uses the GLU without its extra linear transform
  (`glu="half"`, §D.1), as S5 did. `bidirectional` is on for the two 2-D path tasks
  (Pathfinder, PathX), whose answer depends on both ends of the flattened image; S5 runs
  every task bidirectionally. `eval_every` is one epoch of the official train set.
- Sizes: l_max, classes, vocabulary sizes (specials included) and the official train sizes
  from `shared/LRA.md` §1-6; pixel statistics of CIFAR-10 from §4, Pathfinder's `[-1, 1]`
  scaling from §5-6.
- `remat` (rematerialised blocks by default): the tasks whose Table 9 step needs more than
  16 GB of XLA temp without remat (experiments/lra/MEMORY.md: Retrieval 24-45 GB, PathX
  29-67 GB; with remat 6-11 and 9-16 GB), at about the same step time.
  `allocate_on_demand`: the tasks whose step needs the most memory, for which the GPU
  allocator allocates on demand unless the user chose otherwise (`_env.py`).
"""

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from . import data
from .configs import TaskConfig
from .data import Store, TaskData, _pixels, _tokens

__all__ = ["Loader", "Task", "REGISTRY", "register", "get_task", "names", "load_task"]


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


#: Settings every task shares unless its `defaults` say otherwise (Table 9, §D.2).
_COMMON_DEFAULTS = {"depth": 6, "weight_decay": 0.05}


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
    - `defaults`: the model and optimiser settings of `configs.TaskConfig` (Table 9),
      apart from the fields above; `depth` 6 and `weight_decay` 0.05 unless given.
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
    - `remat`, `allocate_on_demand`: defaults of the trainer for big tasks (see above).
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
        self.config  # noqa: B018 (checks `defaults` now rather than at the first run)

    @property
    def input_kind(self) -> Literal["tokens", "features"]:
        return "tokens" if self.in_channels is None else "features"

    @property
    def image_side(self) -> int | None:
        """The side of the square image of a pixel task; None for token tasks."""
        return None if self.in_channels is None else math.isqrt(self.seq_len)

    @functools.cached_property
    def config(self) -> TaskConfig:
        """The task's `TaskConfig`: its sizes and `defaults` (Table 9)."""
        settings = {**_COMMON_DEFAULTS, **self.defaults}
        if "batch_size" not in settings:
            raise ValueError(f"Task {self.name!r}: defaults need a batch_size.")
        settings.setdefault("eval_every", max(1, self.train_size // settings["batch_size"]))
        try:
            return TaskConfig(
                task=self.name,
                num_classes=self.num_classes,
                seq_len=self.seq_len,
                input_kind=self.input_kind,
                train_size=self.train_size,
                **settings,
            )
        except TypeError as e:
            raise ValueError(f"Task {self.name!r}: bad defaults ({e}).") from None


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
        name="listops",
        folder="listops-1000",
        loader=_tokens.load_listops,
        num_classes=10,
        seq_len=2048,
        vocab_size=18,
        train_size=96_000,
        source_files=lambda folder: list(folder.glob("basic_*.tsv")),
        split_sources=_named_files(_tokens.listops_files),
        defaults=dict(
            d_model=128,
            d_state=256,
            steps=80_000,
            batch_size=32,
            lr_factor=0.5,
            dropout=0.0,
            base_lr=3e-3,  # S5 ListOps: ssm_lr 1e-3, lr 3e-3
            bidirectional=False,
            r_min=0.0,
            r_max=0.99,
            max_phase=_TAU,
        ),
    )
)
register(
    Task(
        name="text",
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
        defaults=dict(
            d_model=256,
            d_state=192,
            steps=50_000,
            batch_size=32,
            lr_factor=0.1,
            dropout=0.1,
            base_lr=4e-3,  # S5 IMDB: ssm_lr 1e-3, lr 4e-3
            bidirectional=False,
            r_min=0.5,
            r_max=0.9,
            max_phase=_TAU,
        ),
    )
)
register(
    Task(
        name="retrieval",
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
        defaults=dict(
            d_model=128,
            d_state=256,
            steps=100_000,
            batch_size=64,
            lr_factor=0.5,
            dropout=0.1,
            base_lr=2e-3,  # S5 AAN: ssm_lr 1e-3, lr 2e-3
            bidirectional=False,
            r_min=0.5,
            r_max=0.9,
            max_phase=_TAU,
        ),
    )
)
register(
    Task(
        name="image",
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
        defaults=dict(
            d_model=512,
            d_state=384,
            steps=180_000,
            batch_size=50,
            lr_factor=0.25,
            dropout=0.1,
            base_lr=4.5e-3,  # S5 sCIFAR: ssm_lr 1e-3, lr 4.5e-3
            bidirectional=False,
            r_min=0.9,
            r_max=0.999,
            max_phase=_TAU,
        ),
    )
)
register(
    Task(
        name="pathfinder",
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
        defaults=dict(
            d_model=192,
            d_state=256,
            steps=500_000,
            batch_size=64,
            lr_factor=0.25,
            dropout=0.0,
            base_lr=4.5e-3,  # S5 Pathfinder: ssm_lr 9e-4, lr 4.5e-3
            bidirectional=True,
            r_min=0.9,
            r_max=0.999,
            max_phase=_TAU,
        ),
    )
)
register(
    Task(
        name="pathx",
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
        defaults=dict(
            d_model=128,
            d_state=256,
            steps=250_000,
            batch_size=32,
            lr_factor=0.25,
            dropout=0.0,
            base_lr=1.8e-3,  # S5 Path-X: ssm_lr 6e-4, lr 1.8e-3
            bidirectional=True,
            r_min=0.999,
            r_max=0.9999,
            max_phase=math.pi / 10,
            glu="half",
        ),
    )
)

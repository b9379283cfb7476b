"""The ablation ladder's rungs, settings and data (`experiments/paper/ladder.py`)."""

import dataclasses

import jax.numpy as jnp
import numpy as np

from ..lra.synthetic import generate_listops
from ..lra.tasks import LISTOPS as _LRA_LISTOPS
from ._ladder_cli import DEFAULTS as DEFAULTS
from ._ladder_cli import LISTOPS as LISTOPS
from ._ladder_cli import TASKS as TASKS

assert LISTOPS == _LRA_LISTOPS, "the ladder's ListOps is the LRA registry's"

# ListOps tokens, as `experiments.lra.data` reads them: parentheses dropped, "]" -> "X".
LISTOPS_VOCAB = ("<pad>", *map(str, range(10)), "[MIN", "[MAX", "[MED", "[SM", "X")
NUM_CLASSES = 10  # both tasks
RECALL_CHANNELS = 10
AXIS_NAME = "batch"


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything that determines a ladder run (saved in `ladder.json`)."""

    task: str
    rungs: tuple[str, ...]
    seeds: tuple[int, ...]
    data_seed: int
    n_train: int
    n_test: int
    length: int  # recall: the sequence length
    min_length: int  # listops: lengths strictly between these
    max_length: int
    depth: int
    d_model: int
    d_state: int
    steps: int
    batch_size: int
    lr: float
    lr_factor: float
    weight_decay: float
    warmup_fraction: float
    log_every: int


# --------------------------------------------------------------------------- data


def recall_arrays(settings: Settings) -> dict[str, dict[str, np.ndarray]]:
    """Delayed recall: `v` `(n, 10)` standard normal (the input at step 0; every later step
    is zero) and `y = argmax(v)`, for `train` and `test`."""
    rng = np.random.default_rng([settings.data_seed, 1])
    out = {}
    for split, n in (("train", settings.n_train), ("test", settings.n_test)):
        v = rng.standard_normal((n, RECALL_CHANNELS)).astype(np.float32)
        out[split] = dict(v=v, y=np.argmax(v, axis=-1).astype(np.int32))
    return out


def listops_arrays(settings: Settings) -> dict[str, dict[str, np.ndarray]]:
    """Generated ListOps, split into `train` and `test` (no expression in both): `x` tokens
    `(n, max_length - 1)` int32 right-padded with 0, `length` valid lengths, `y` labels."""
    examples = generate_listops(
        settings.n_train + settings.n_test,
        seed=settings.data_seed,
        min_length=settings.min_length,
        max_length=settings.max_length,
    )
    index = {token: i for i, token in enumerate(LISTOPS_VOCAB)}
    x = np.zeros((len(examples), settings.max_length - 1), np.int32)  # lengths < max_length
    lengths = np.zeros(len(examples), np.int32)
    for i, (expr, _) in enumerate(examples):
        tokens = expr.replace("]", "X").replace("(", "").replace(")", "").split()
        x[i, : len(tokens)] = [index[t] for t in tokens]
        lengths[i] = len(tokens)
    y = np.array([label for _, label in examples], np.int32)
    n = settings.n_train
    return {
        "train": dict(x=x[:n], length=lengths[:n], y=y[:n]),
        "test": dict(x=x[n:], length=lengths[n:], y=y[n:]),
    }


def task_arrays(settings: Settings) -> dict[str, dict[str, np.ndarray]]:
    return (recall_arrays if settings.task == "recall" else listops_arrays)(settings)


def model_inputs(task: str, length: int, arrays: dict, index):
    """The model inputs `(x, valid lengths or None, labels)` of rows `index` (any shape,
    batch last), traceable. Recall sequences are built here: only step 0 is stored."""
    y = arrays["y"][index]
    if task == "recall":
        v = arrays["v"][index]
        x = jnp.zeros((*v.shape[:-1], length, v.shape[-1]), v.dtype).at[..., 0, :].set(v)
        return x, None, y
    return arrays["x"][index], arrays["length"][index], y

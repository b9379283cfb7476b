"""The ablation ladder's rungs, settings and data (`experiments/paper/ladder.py`)."""

import dataclasses

import jax.numpy as jnp
import numpy as np

from ..lra.synthetic import generate_listops
from ..lra.tasks import LISTOPS

# ListOps tokens, as `experiments.lra.data` reads them: parentheses dropped, "]" -> "X".
LISTOPS_VOCAB = ("<pad>", *map(str, range(10)), "[MIN", "[MAX", "[MED", "[SM", "X")
NUM_CLASSES = 10  # both tasks
RECALL_CHANNELS = 10
AXIS_NAME = "batch"
TASKS = ("recall", LISTOPS)  # the ladder's own recall, and the LRA registry's ListOps


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


#: Defaults per task and mode; every entry can be overridden on the command line.
DEFAULTS = {
    ("recall", False): dict(
        n_train=20_000, n_test=2000, length=256, min_length=0, max_length=0, depth=2,
        d_model=32, d_state=32, steps=800, batch_size=32, lr=3e-3, log_every=100,
    ),
    ("recall", True): dict(
        n_train=64, n_test=32, length=12, min_length=0, max_length=0, depth=1, d_model=8,
        d_state=8, steps=4, batch_size=8, lr=3e-3, log_every=4,
    ),
    (LISTOPS, False): dict(
        n_train=8000, n_test=1000, length=0, min_length=100, max_length=300, depth=2,
        d_model=64, d_state=64, steps=1200, batch_size=32, lr=3e-3, log_every=100,
    ),
    (LISTOPS, True): dict(
        n_train=64, n_test=32, length=0, min_length=8, max_length=30, depth=1, d_model=8,
        d_state=8, steps=4, batch_size=8, lr=3e-3, log_every=4,
    ),
}  # fmt: skip


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

"""The suite's shared sizes, inputs and builders (issue 41): new tests are written on these,
so that tests share compiled programs and the suite compiles few distinct ones.

- **Sizes.** `D_MODEL, D_STATE, LENGTH, BATCH = 3, 4, 7, 2` (every dimension distinct, so a
  swapped axis cannot hide), `IN, OUT, VOCAB = 5, 6, 9` for models. A test that needs other
  sizes says why.
- **Inputs** are drawn with NumPy (`normal`, `uniform`, `tokens`), never with eager
  `jax.random` calls: each eager call at a new shape is a program XLA compiles (15% of the
  quick tier's compile time, measured), a NumPy draw is none. Values differ per `seed`,
  shapes do not have to.
- **Builders** (`core`, `block`, `model`) build the library's layers at those sizes from an
  integer seed, in the dtype asked for (float64 inside `jax.enable_x64`).
- **Data sets** of the experiments are session fixtures in `tests/conftest.py`
  (`listops_data`): one generated ListOps folder per size class, shared by every test that
  reads one.
"""

import functools
from typing import Literal

import equinox as eqx
import jax
import numpy as np
import numpy.typing as npt

import eqx_lru

D_MODEL, D_STATE, LENGTH, BATCH = 3, 4, 7, 2
IN, OUT, VOCAB = 5, 6, 9
#: The LRU's ring for tests: a wide one, so every test sees a spread of decay rates.
RING = dict(r_min=0.5, r_max=0.95)
FORMS = {"complex": eqx_lru.ComplexLRU, "real": eqx_lru.RealLRU}


def normal(
    *shape: int, seed: int = 0, dtype: npt.DTypeLike = np.float32, scale: float = 1.0
) -> np.ndarray:
    """Standard normal draws (times `scale`) of `shape`, from NumPy's generator `seed`."""
    x = np.random.default_rng(seed).normal(size=shape) * scale
    return x.astype(dtype)


def uniform(
    *shape: int, low: float, high: float, seed: int = 0, dtype: npt.DTypeLike = np.float32
) -> np.ndarray:
    """Uniform draws in `[low, high)` of `shape`, from NumPy's generator `seed`."""
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(dtype)


def tokens(*shape: int, vocab: int = VOCAB, seed: int = 0) -> np.ndarray:
    """Integer tokens in `[0, vocab)` of `shape` (int32), from NumPy's generator `seed`."""
    return np.random.default_rng(seed).integers(0, vocab, size=shape).astype(np.int32)


def key(seed: int = 0) -> jax.Array:
    """The PRNG key of `seed` (`jax.random.PRNGKey`: no compile)."""
    return jax.random.PRNGKey(seed)


def core(
    form: str = "complex",
    *,
    d_model: int = D_MODEL,
    d_state: int = D_STATE,
    seed: int = 0,
    dtype=None,
    **options,
) -> eqx_lru.AbstractLRU:
    """An LRU core in `form` (`"complex"` or `"real"`) on the test ring; `options` go to
    the core (`method=`, `discretization=`, ...)."""
    options = {**RING, **options}
    return FORMS[form](d_model, d_state, dtype=dtype, key=key(seed), **options)  # fmt: skip


def core_factory(form: str = "complex", **options):
    """`LRUBlock(core=...)`'s factory for an LRU core in `form` on the test ring."""
    return functools.partial(FORMS[form], **{**RING, **options})


def block(
    form: str = "complex",
    *,
    d_model: int = D_MODEL,
    d_state: int = D_STATE,
    seed: int = 0,
    dtype=None,
    core_options=None,
    **options,
):
    """`(block, state)`: an `LRUBlock` of an LRU core in `form`; `options` go to the block
    (`norm=`, `bidirectional=`, `dropout=`, ...), `core_options` to the core."""
    factory = core_factory(form, **(core_options or {}))
    make = eqx.nn.make_with_state(eqx_lru.LRUBlock)
    return make(d_model, d_state, core=factory, dtype=dtype, key=key(seed), **options)  # fmt: skip


def model(
    form: str = "complex",
    *,
    encoder: Literal["embedding", "linear"] = "linear",
    depth: int = 2,
    d_model: int = D_MODEL,
    d_state: int = D_STATE,
    out_size: int | None = OUT,
    seed: int = 0,
    dtype=None,
    block_options=None,
    core_options=None,
    **options,
):
    """`(model, state)`: an `LRUModel` of `depth` `LRUBlock`s of an LRU core in `form`;
    `in_size` is `VOCAB` for the embedding encoder and `IN` for the linear one. `options`
    go to the model (`pooling=`, `remat=`, ...), `block_options` to every block."""
    factory = core_factory(form, **(core_options or {}))
    make_block = functools.partial(eqx_lru.LRUBlock, core=factory, **(block_options or {}))
    in_size = VOCAB if encoder == "embedding" else IN
    make = eqx.nn.make_with_state(eqx_lru.LRUModel)
    return make(in_size, out_size, d_model, d_state, depth, encoder=encoder,
                block=make_block, dtype=dtype, key=key(seed), **options)  # fmt: skip


def model_input(
    encoder: str = "linear",
    *,
    batch: int | None = None,
    length: int = LENGTH,
    seed: int = 0,
    dtype=np.float32,
) -> np.ndarray:
    """An input for `model(encoder=...)`: tokens for the embedding, features otherwise;
    `batch` rows in front when given."""
    lead = () if batch is None else (batch,)
    if encoder == "embedding":
        return tokens(*lead, length, seed=seed)
    return normal(*lead, length, IN, seed=seed, dtype=dtype)


def as_jax(*arrays):
    """NumPy arrays as JAX arrays: `jax.device_put`, a transfer (`jnp.asarray` compiles a
    small program per shape)."""
    out = tuple(jax.device_put(a) for a in arrays)
    return out[0] if len(out) == 1 else out

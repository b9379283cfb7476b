r"""The language model and its compiled programs: a training step over one chunk of every
stream (truncated BPTT) and the scoring of held-out text.

**The model.** `eqx_lru.LRUModel` over bytes: an embedding of the 256 byte values, `depth`
causal `LRUBlock`s with layer norm (batch norm's statistics over a sequence do not survive
chunking), no pooling, and a head of 256 logits per position, the distribution of the next
byte.

**The loss** of a step is the mean over its $B \times L$ positions of
$-\ln p_\theta(x_{t+1} \mid x_{\le t})$, where the context before the chunk reaches the
model through the carry, a constant there (truncated backpropagation through time: no
gradient flows into the previous chunk): `LRUModel.chunk(carry, x, state,
inference=False, key=...)`, with `reset=True` on the first chunk of a pass. Bits per byte
are this loss over $\ln 2$.
"""

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqx_lru

from .config import LMConfig

__all__ = [
    "VOCAB",
    "build_model",
    "stream_carry",
    "Programs",
    "make_programs",
    "make_optimizer",
    "score_layout",
]

VOCAB = 256


def build_model(cfg: LMConfig, key) -> tuple[eqx_lru.LRUModel, eqx.nn.State]:
    """The model of `cfg` (in its `form`) and its (empty) state."""
    lru = eqx_lru.ComplexLRU if cfg.form == "complex" else eqx_lru.RealLRU
    core = functools.partial(lru, r_min=cfg.r_min, r_max=cfg.r_max, max_phase=cfg.max_phase)
    block = functools.partial(eqx_lru.LRUBlock, core=core, norm="layer", dropout=cfg.dropout)
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB,
        VOCAB,
        cfg.d_model,
        cfg.d_state,
        cfg.depth,
        encoder="embedding",
        pooling=None,
        block=block,
        key=key,
    )


def stream_carry(model: eqx_lru.LRUModel, streams: int) -> Any:
    """`model.init_carry()` for `streams` streams (a leading axis on every leaf)."""
    return jax.tree_util.tree_map(
        lambda a: jnp.broadcast_to(a, (streams, *a.shape)), model.init_carry()
    )


def make_optimizer(cfg: LMConfig):
    """`eqx_lru.lru_optimizer` of `cfg`, and its base learning-rate schedule."""
    steps, warmup = cfg.steps, cfg.warmup_fraction
    optim = eqx_lru.lru_optimizer(
        learning_rate=cfg.lr,
        lr_factor=cfg.lr_factor,
        weight_decay=cfg.weight_decay,
        total_steps=steps,
        warmup_fraction=warmup,
    )
    return optim, eqx_lru.lru_schedule(cfg.lr, total_steps=steps, warmup_fraction=warmup)


def _nll(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """$-\\ln p$ of each target under `logits` (`(..., 256)`), in float32."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


class Programs(NamedTuple):
    """The jitted programs of one configuration.

    - `train(params, opt_state, carry, x, y, reset, run_key, step)`: one optimiser step on
      chunk `x` (targets `y`), `(streams, chunk)` each, from `carry` (the initial carry
      where `reset`); returns `(params, opt_state, carry, (loss, accuracy, lr))`.
    - `score(params, inputs, targets)`: per chunk of an `EvalLayout`, the summed negative
      log-likelihood (nats) and the number of bytes predicted right (argmax).
    """

    train: Callable
    score: Callable


#: The settings the programs depend on; one compilation per combination and process.
_PROGRAM_KEYS = (
    *("form", "depth", "d_model", "d_state", "r_min", "r_max", "max_phase", "dropout"),
    *("streams", "chunk", "steps", "lr", "lr_factor", "weight_decay", "warmup_fraction"),
)
_PROGRAMS: dict[tuple, Programs] = {}


def make_programs(cfg: LMConfig, static: Any, state: eqx.nn.State) -> Programs:
    """The programs of `cfg` for the model's non-array part `static` (built once per
    process for the settings they depend on, so a resumed run in the same process
    compiles nothing)."""
    key = tuple(getattr(cfg, k) for k in _PROGRAM_KEYS)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = _programs(cfg, static, state)
    return _PROGRAMS[key]


def _programs(cfg: LMConfig, static: Any, state: eqx.nn.State) -> Programs:
    optim, schedule = make_optimizer(cfg)

    def chunk(model, carry, x, reset, key):
        # Training mode (dropout), the incoming carry a constant of the gradient.
        return model.chunk(carry, x, state, reset=reset, inference=False, key=key)

    @eqx.filter_jit
    def train(params, opt_state, carry, x, y, reset, run_key, step):
        keys = jax.random.split(jax.random.fold_in(run_key, step), cfg.streams)

        def loss_fn(p):
            m = eqx.combine(p, static)
            streams = jax.vmap(functools.partial(chunk, m), in_axes=(0, 0, None, 0))
            new_carry, logits = streams(carry, x, reset, keys)
            nll = _nll(logits, y)
            accuracy = jnp.mean((jnp.argmax(logits, -1) == y).astype(jnp.float32))
            return jnp.mean(nll), (new_carry, accuracy)

        (loss, (carry, accuracy)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        with jax.numpy_dtype_promotion("standard"):  # optax's Python floats vs int32 counts
            updates, opt_state = optim.update(grads, opt_state, params)
            lr = schedule(step)
        params = eqx.apply_updates(params, updates)
        return params, opt_state, carry, (loss, accuracy, lr)

    @eqx.filter_jit
    def score(params, inputs, targets):
        model = eqx.combine(params, static)

        def body(carry, xy):
            x, y = xy
            carry, logits = jax.vmap(lambda c, x: model.chunk(c, x, state))(carry, x)
            right = jnp.sum(jnp.argmax(logits, -1) == y, dtype=jnp.int32)
            return carry, (jnp.sum(_nll(logits, y)), right)

        start = stream_carry(model, inputs.shape[1])
        _, (nll, right) = jax.lax.scan(body, start, (inputs, targets))
        return nll, right

    return Programs(train=train, score=score)


def score_layout(programs: Programs, params: Any, layout) -> dict[str, float]:
    """Scores of `params` on a held-out `EvalLayout`: the mean negative log-likelihood
    (`loss`, nats), `bits_per_byte` ($\\text{loss} / \\ln 2$), argmax `accuracy`, and the
    positions scored (`bytes`); summed in float64 on the host."""
    nll, right = programs.score(params, jnp.asarray(layout.inputs), jnp.asarray(layout.targets))
    total = float(np.sum(np.asarray(nll, np.float64)))
    loss = total / layout.positions
    return {
        "loss": loss,
        "bits_per_byte": loss / math.log(2),
        "accuracy": float(np.sum(np.asarray(right, np.int64))) / layout.positions,
        "bytes": layout.positions,
    }

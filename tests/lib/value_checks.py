"""The two lists the transformation-conformance test (`test_value_checks.py`) multiplies:
the public entry points that check a value they are given (time steps, lengths, token ids,
reset flags, packed-sequence ids, slot indices), and the ways a caller can pass that value.

An entry point is one `Entry`: a function of the value alone (everything else is built
once here, small, and closed over), a valid value, and, where a value can be invalid, an
invalid one with the start of its one-line error. A way is one function `(entry, value) ->
output`, with whether the value is known while the program is traced there (then an
invalid value is a `ValueError` at once) or traced (then a run-time check, which an
exported program skips).

Sizes are distinct and tiny: vocabulary 7, d_model 3, d_state 4, length 5, 3 slots.
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqx_lru
from eqx_lru._models._model_io import Pooling

VOCAB, H, N, L, SLOTS = 7, 3, 4, 5, 3
KEY = jax.random.PRNGKey(0)


@dataclasses.dataclass(frozen=True)
class Entry:
    """A public entry point taking one checked value.

    - `call(value)`: the entry point on `value`, returning a float array (or a tuple).
    - `valid`: a valid value (NumPy); every way must give the plain call's output on it.
    - `invalid`: a value the check refuses (NumPy), or `None` when every value of the
      right shape and dtype is valid (a reset flag); `match`: the start of its error.
    - `wide`: an invalid value only a Python or NumPy value can hold (an integer beyond
      int32, which a JAX array would have wrapped already), with its error `wide_match`.
    """

    call: Callable[[Any], Any]
    valid: np.ndarray | np.generic
    invalid: np.ndarray | np.generic | None = None
    match: str = ""
    wide: np.ndarray | np.generic | None = None
    wide_match: str = ""


# --- what the entry points run on, built once ----------------------------------------------


def _built_once(build: Callable[..., Any]) -> Callable[..., Any]:
    """`build` cached, and run outside any trace even when first asked for inside one (a
    test's `jit` or `jax.export`): a module built while tracing would hold that trace's
    tracers, and every later call would leak them."""

    @functools.cache
    def cached(*args):
        with jax.ensure_compile_time_eval():
            return build(*args)

    return cached


@_built_once
def _core():
    return eqx_lru.ComplexLRU(H, N, r_min=0.5, r_max=0.95, key=KEY)


@_built_once
def _block():
    return eqx.nn.make_with_state(eqx_lru.LRUBlock)(H, N, key=KEY)


@_built_once
def _model(pooling: Pooling = "mean"):
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, 2, H, N, 1, encoder="embedding", pooling=pooling, key=KEY
    )


@_built_once
def _pool():
    model, _ = _model()
    return eqx_lru.StreamPool(model, SLOTS).admit(0).admit(2)


_U = np.linspace(-1, 1, L * H, dtype=np.float32).reshape(L, H)
_TOKENS = np.array([1, 4, 0, 6, 2], np.int32)


def _core_dt(dt):
    return _core()(_U, dt=dt)


def _core_step_dt(dt):
    core = _core()
    return core.step(core.init_state(), _U[0], dt=dt)


def _block_length(length):
    block, state = _block()
    return block(_U, state, length=length, inference=True)[0]


def _block_segment_ids(ids):
    block, state = _block()
    return block(_U, state, segment_ids=ids, inference=True)[0]


def _model_tokens(x):
    model, state = _model()
    return model(x, state, inference=True)[0]


def _model_length(length):
    model, state = _model()
    return model(_TOKENS, state, length=length, inference=True)[0]


def _model_segments(ids):
    model, state = _model()
    return model(_TOKENS, state, segment_ids=ids, num_segments=2, inference=True)[0]


def _model_dt(dt):
    model, state = _model()
    return model(_TOKENS, state, dt=dt, inference=True)[0]


def _step(**options):
    model, state = _model()
    carry = model.init_carry()
    options = {"x_t": jnp.asarray(3), **options}
    carry, out = model.step(carry, options.pop("x_t"), state, **options)
    return out, carry["sum"]


def _chunk_length(length):
    model, state = _model()
    carry, out = model.chunk(model.init_carry(), _TOKENS, state, length=length)
    return out, carry["sum"], carry["count"].astype(jnp.float32)


def _admit(slot):
    return _pool().evict(0).admit(slot).active.astype(jnp.float32)


def _evict(slot):
    return _pool().evict(slot).active.astype(jnp.float32)


def _pool_step_x(x):
    model, state = _model()
    return _pool().step(model, x, state)[1]


def _pool_step_dt(dt):
    model, state = _model()
    return _pool().step(model, jnp.asarray([1, 2, 3]), state, dt=dt)[1]


def _pool_chunk_length(length):
    model, state = _model()
    return _pool().chunk(model, np.tile(_TOKENS[:4], (SLOTS, 1)), state, length=length)[1]


_DT = "`dt` must be positive and finite"
_LENGTH = "`length` must be between 1 and"
_TOKEN = r"Token ids must be in \[0, 7\)"
_INT32 = "outside int32"

ENTRIES = {
    "core_dt": Entry(_core_dt, np.float32(0.5), np.float32(-1.0), _DT),
    "core_step_dt": Entry(_core_step_dt, np.float32(2.0), np.float32(np.nan), _DT),
    "block_length": Entry(
        _block_length, np.int32(3), np.int32(6), _LENGTH, np.int64(2**32 + 3), _LENGTH
    ),
    "block_segment_ids": Entry(
        _block_segment_ids, np.array([0, 0, 1, 1, 1], np.int32),
        wide=np.array([0, 0, 2**32, 2**32, 0], np.int64), wide_match=f"`segment_ids`.*{_INT32}",
    ),
    "model_tokens": Entry(
        _model_tokens, _TOKENS, np.array([1, 4, 7, 6, 2], np.int32), _TOKEN,
        np.array([1, 4, 2**32, 6, 2], np.int64), _TOKEN,
    ),
    "model_length": Entry(_model_length, np.int32(4), np.int32(0), _LENGTH),
    "model_segment_ids": Entry(
        _model_segments, np.array([0, 0, 1, 1, 1], np.int32),
        np.array([0, 1, 2, 2, 2], np.int32), "`segment_ids` holds more packed sequences",
    ),
    "model_dt": Entry(_model_dt, np.full(L, 0.5, np.float32), np.r_[1, 1, -1, 1, 1]
                      .astype(np.float32), _DT),
    "step_reset": Entry(lambda r: _step(reset=r), np.bool_(True)),
    "step_token": Entry(lambda x: _step(x_t=x), np.int32(5), np.int32(-1), _TOKEN),
    "step_dt": Entry(lambda dt: _step(dt=dt), np.float32(0.25), np.float32(np.inf), _DT),
    "chunk_length": Entry(
        _chunk_length, np.int32(3), np.int32(6), "`length` must be between 0",
        np.int64(2**40), "`length` must be between 0",
    ),
    "pool_admit": Entry(
        _admit, np.int32(1), np.int32(3), r"`slot` must be .*\[0, 3\)", np.int64(2**40),
        r"`slot` must be .*\[0, 3\); got 1099511627776",
    ),
    "pool_evict": Entry(_evict, np.int32(2), np.int32(-1), r"`slot` must be .*\[0, 3\)"),
    "pool_step_x": Entry(
        _pool_step_x, np.array([1, 2, 3], np.int32), np.array([1, 2, 9], np.int32), _TOKEN,
        np.array([1, 2, 2**32 + 1], np.int64), f"`x`.*{_INT32}",
    ),
    "pool_step_dt": Entry(
        _pool_step_dt, np.array([0.5, 1.0, 2.0], np.float32),
        np.array([0.5, 1.0, -2.0], np.float32), _DT,
    ),
    "pool_chunk_length": Entry(
        _pool_chunk_length, np.array([2, 0, 4], np.int32), np.array([2, 0, 5], np.int32),
        "`length` must be between 0",
    ),
}  # fmt: skip


# --- the ways of passing a value ----------------------------------------------------------


def _closed_jit(entry, value):
    constant = jnp.asarray(value)  # made outside, closed over: a known value inside `jit`
    return jax.jit(lambda: entry.call(constant))()


#: The ways in which the value is known while tracing: `run(entry, value)`. An invalid
#: value is a `ValueError` at once. `python` passes a scalar as a Python number.
KNOWN_WAYS = {
    "python": lambda e, v: e.call(v.item()),
    "numpy": lambda e, v: e.call(v),
    "jax": lambda e, v: e.call(jnp.asarray(v)),
    "closed_jit": _closed_jit,
}


def _vmap(call):
    def run(value):
        return jax.tree_util.tree_map(lambda y: y[1], jax.vmap(call)(jnp.stack([value, value])))

    return run


def _grad(call):
    def total(value):
        out = call(value)
        floats = [y for y in jax.tree_util.tree_leaves(out) if jnp.issubdtype(y.dtype, jnp.inexact)]
        return sum((jnp.sum(jnp.real(y)) for y in floats), jnp.zeros(())), out

    def run(value):
        return jax.value_and_grad(total, has_aux=True, allow_int=True)(value)[0][1]

    return run


def _scan(call):
    def run(value):
        ys = jax.lax.scan(lambda c, v: (c, call(v)), None, value[None])[1]
        return jax.tree_util.tree_map(lambda y: y[0], ys)

    return run


#: The ways in which the value is a tracer: `wrap(call)` is the call that way, a function
#: of the value; the test runs all of them in one `jax.jit` (one compilation per entry
#: point), where each holds the run-time check.
TRACED_WAYS = {
    "jit": lambda call: call,
    "vmap": _vmap,
    "grad": _grad,
    "remat": jax.checkpoint,
    "scan": _scan,
}


def export(entry, value):
    """`entry.call` exported by `jax.export` for the value's shape and dtype, called on
    `value`: the program skips run-time checks."""
    spec = jax.ShapeDtypeStruct(np.shape(value), jnp.asarray(value).dtype)
    return jax.export.export(jax.jit(entry.call))(spec).call(value)

"""Numbers at the edges: every value the user gives is checked against what it will meet.

Ring ranges whose initialisation would not be finite, sizes whose arrays cannot exist,
the value types of sizes and dtypes (the same everywhere), inputs that are not real floats,
and lengths beyond the dtype they are cast to. Each refusal is one line naming the
argument. Distinct sizes: H = 4, N = 3, L = 6.
"""

import math
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru
from eqx_lru._cores._init import projection_init

H, N, L = 4, 3, 6
KEY = jax.random.PRNGKey(0)
SMALLEST_R_MAX = math.sqrt(float(jnp.finfo(jnp.float32).tiny))


def _one_line(excinfo, *words):
    message = str(excinfo.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    "ring,name",
    [
        (dict(r_max=0.0), "`r_max`"),  # was nu_log = +inf, NaN after the first step
        (dict(r_max=1e-30), "`r_max`"),  # its square underflows in float32
        (dict(r_min=0.9, r_max=0.5), "`r_min`"),
        (dict(max_phase=0.0), "`max_phase`"),
        (dict(max_phase=-1.0), "`max_phase`"),
        (dict(max_phase=1e39), "`max_phase`"),  # inf in float32: theta_log = inf
        (dict(max_phase=1e-40), "`max_phase`"),  # below float32's tiny: theta_log = -inf
        (dict(r_min=float("nan")), "`r_min`"),
    ],
)
def test_ring_that_cannot_initialise_finite_is_refused(ring, name):
    for build in (eqx_lru.ComplexLRU, eqx_lru.RealLRU):
        with pytest.raises((ValueError, TypeError)) as excinfo:
            build(H, N, key=KEY, **ring)
        _one_line(excinfo, name)


def test_ring_at_its_smallest_is_finite():
    """The smallest r_max allowed (√tiny) and the smallest max_phase initialise finite
    parameters and outputs: sampled |λ|² and θ below float32's range are clipped to tiny."""
    layer = eqx_lru.RealLRU(H, 32, r_max=SMALLEST_R_MAX, max_phase=1e-37, key=KEY)
    for leaf in jax.tree_util.tree_leaves(eqx.filter(layer, eqx.is_array)):
        assert bool(jnp.all(jnp.isfinite(leaf)))
    assert bool(jnp.all(layer.modulus() < 1e-18))
    y = eqx.filter_jit(lambda layer, u: layer(u))(layer, jax.random.normal(KEY, (L, H)))
    assert bool(jnp.all(jnp.isfinite(y)))


@pytest.mark.parametrize(
    "build,words",
    [
        # `ComplexLRU(4, 2**62)` aborted the Python process inside XLA.
        (lambda: eqx_lru.ComplexLRU(H, 2**62, key=KEY), ["d_state=4611686018427387904"]),
        (lambda: eqx_lru.RealLRU(2**40, N, key=KEY), ["d_model=1099511627776"]),
        (lambda: eqx_lru.ring_init(2**62, key=KEY), ["ring_init"]),
        (lambda: projection_init(2**31, 2**31, key=KEY), ["projection_init"]),
        (lambda: eqx_lru.baselines.S4D(2**31, 2**31, key=KEY), ["S4D"]),
        (lambda: eqx_lru.baselines.S5(H, 2**40, key=KEY), ["S5"]),
        (lambda: eqx_lru.ablation.DenseRNN(H, 2**40, key=KEY), ["dense RNN"]),
        (lambda: eqx_lru.GLU(2**40, key=KEY), ["GLU"]),
    ],
)
def test_sizes_whose_arrays_cannot_exist_are_refused_before_allocation(build, words):
    with pytest.raises(ValueError) as excinfo:
        build()
    _one_line(excinfo, "choose smaller sizes", *words)


def test_numpy_integers_are_sizes_everywhere_and_bools_nowhere():
    assert eqx_lru.Sequential(np.int64(2)) == eqx_lru.Sequential(2)
    assert type(eqx_lru.Sequential(np.int64(2)).unroll) is int
    assert eqx_lru.PallasScan(chunk=np.int32(4), block=np.int64(16)) == eqx_lru.PallasScan(4, 16)
    schedule = eqx_lru.lru_schedule(1e-3, np.int64(10))
    assert float(cast(jax.Array, schedule(5))) == float(
        cast(jax.Array, eqx_lru.lru_schedule(1e-3, 10)(5))
    )
    with pytest.raises(ValueError) as excinfo:
        eqx_lru.Sequential(True)
    _one_line(excinfo, "`unroll`")
    with pytest.raises(ValueError) as excinfo:
        eqx_lru.PallasScan(chunk=True)
    _one_line(excinfo, "`chunk`")


def test_numpy_integer_num_segments_and_tokens_closed_over_in_jit():
    """`num_segments=np.int64(2)` was refused by the call's type hint (`int`), and tokens
    closed over inside `jit` (concrete, whose range check is traced) raised JAX's
    `TracerArrayConversionError` from the token check."""
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        5, 2, H, N, 1, encoder="embedding", key=KEY
    )
    x, ids = jnp.arange(L) % 5, jnp.asarray([0, 0, 0, 1, 1, 1])
    n = np.int64(2)  # static: closed over (`filter_jit` would trace a NumPy scalar)
    call = lambda: model(x, state, segment_ids=ids, num_segments=n, inference=True)[0]  # noqa: E731
    out = eqx.filter_jit(call)()
    assert out.shape == (2, 2)  # was beartype's error: `int` only


def test_dtypes_as_objects_or_names():
    by_name = eqx_lru.RealLRU(H, N, dtype="float32", compute_dtype="bfloat16", key=KEY)
    by_object = eqx_lru.RealLRU(H, N, dtype=jnp.float32, compute_dtype=jnp.bfloat16, key=KEY)
    assert eqx.tree_equal(by_name, by_object)
    block, _ = eqx.nn.make_with_state(eqx_lru.LRUBlock)(H, N, dtype="float32", key=KEY)
    assert cast(eqx_lru.ComplexLRU, block.core).nu_log.dtype == jnp.float32
    model, _ = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        5, 2, H, N, 1, dtype=np.dtype("float32"), key=KEY
    )
    assert model.encoder.weight.dtype == jnp.float32
    bad = [
        (lambda: eqx_lru.RealLRU(H, N, compute_dtype="nope", key=KEY), "`compute_dtype`"),
        (lambda: eqx_lru.ComplexLRU(H, N, dtype="floaty", key=KEY), "`dtype`"),
        (lambda: eqx_lru.LRUBlock(H, N, dtype=3, key=KEY), "`dtype`"),
        (lambda: eqx_lru.LRUModel(5, 2, H, N, 1, dtype="floaty", key=KEY), "`dtype`"),
        (lambda: eqx_lru.LRUModel(5, 2, H, N, 1, dtype="int32", key=KEY), "`dtype`"),
    ]
    for build, name in bad:
        with pytest.raises((ValueError, TypeError)) as excinfo:
            build()
        _one_line(excinfo, name)


def test_float64_without_64_bit_mode_is_refused():
    """JAX would warn and store float32: the dtype asked for would be silently lost."""
    assert jnp.asarray(0.0).dtype == jnp.float32  # 64-bit mode off
    with pytest.raises(ValueError) as excinfo:
        eqx_lru.RealLRU(H, N, dtype=jnp.float64, key=KEY)
    _one_line(excinfo, "`dtype=float64`", "jax_enable_x64")


_CORES = {
    "ComplexLRU": lambda: eqx_lru.ComplexLRU(H, N, key=KEY),
    "RealLRU": lambda: eqx_lru.RealLRU(H, N, key=KEY),
    "S4D": lambda: eqx_lru.baselines.S4D(H, 2, key=KEY),
    "S5": lambda: eqx_lru.baselines.S5(H, 2, key=KEY),
    "DenseRNN": lambda: eqx_lru.ablation.DenseRNN(H, N, key=KEY),
    "DiagonalRNN": lambda: eqx_lru.ablation.DiagonalRNN(H, N, key=KEY),
}


@pytest.mark.parametrize("name", sorted(_CORES))
def test_input_that_is_not_real_floating_is_refused(name):
    """RealLRU returned complex outputs for a complex input, ComplexLRU failed inside
    `jax.lax.complex`, DenseRNN inside `lax.scan`; integer inputs were promoted silently.
    (`run`: under the suite's jaxtyping hook `__call__`'s type hint answers first; a user's
    call reaches the same check.)"""
    core = _CORES[name]()
    for dtype in (jnp.complex64, jnp.int32, jnp.bool_):
        with pytest.raises(ValueError) as excinfo:
            core.run(jnp.ones((L, H), dtype))
        _one_line(excinfo, "`u` must be a real floating array", jnp.dtype(dtype).name)


def test_length_beyond_int32_does_not_wrap_into_range():
    """An int64 length of 2**32 + 4 was cast to int32 (4) and accepted under `jit`."""
    block, state = eqx.nn.make_with_state(eqx_lru.LRUBlock)(H, N, norm="layer", key=KEY)
    x = jax.random.normal(KEY, (L, H))
    call = eqx.filter_jit(lambda x, n: block(x, state, length=n)[0])
    with jax.enable_x64(True):
        with pytest.raises(Exception, match="`length` must be between 1 and the padded length"):
            jax.block_until_ready(call(x, jnp.asarray(2**32 + 4, jnp.int64)))
        with pytest.raises(ValueError) as excinfo:  # concrete: at once, not at run time
            block(x, state, length=np.int64(2**32 + 4))
    _one_line(excinfo, "`length` must be between 1 and the padded length 6", "4294967300")

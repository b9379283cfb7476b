"""`LRUBlock`, `MaskedBatchNorm`, `GLU`, the recurrent-core contract and form conversion.

Sizes are distinct (d_model=6, d_state=5, length=9) so a swapped axis cannot hide.
"""

import functools
from typing import ClassVar, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import max_rel_err

import eqx_lru

H, N, L = 6, 5, 9
FORMS = {"complex": eqx_lru.ComplexLRU, "real": eqx_lru.RealLRU}


def _block(form="complex", **kw):
    core = functools.partial(FORMS[form], r_min=0.5, r_max=0.99)
    return eqx.nn.make_with_state(eqx_lru.LRUBlock)(
        H, N, core=core, key=jax.random.PRNGKey(0), **kw
    )


def _batched(block, state, x, length=None, keys=None, inference=None):
    """vmap over the batch with the default axis name; state unbatched."""

    def one(x, length, key):
        return block(x, state, length=length, key=key, inference=inference)

    return jax.vmap(one, axis_name="batch", out_axes=(0, None))(x, length, keys)


batched = eqx.filter_jit(_batched)


def _inputs(batch=3, length=L, seed=1):
    return jax.random.normal(jax.random.PRNGKey(seed), (batch, length, H))


# --- shapes, forms, conversion -------------------------------------------------------------


@pytest.mark.parametrize("norm,bidirectional", [("batch", True), ("layer", False)])
def test_shapes(norm, bidirectional):
    block, state = _block(norm=norm, bidirectional=bidirectional)
    y, new_state = batched(block, state, _inputs())
    assert y.shape == (3, L, H) and y.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(y)))
    assert block.bidirectional is bidirectional
    assert isinstance(block.core, eqx_lru.ComplexLRU)
    assert block.core.d_model == H and block.core.d_state == N


def test_complex_and_real_from_one_key_agree():
    (cb, state), (rb, _) = (_block(f, bidirectional=True) for f in ("complex", "real"))
    assert isinstance(rb.core, eqx_lru.RealLRU) and isinstance(rb.reverse_core, eqx_lru.RealLRU)
    # Same key => the very same parameters; converting one gives the other exactly. (Equal
    # outputs and gradients of whole models: tests/lib/test_model.py.)
    assert bool(eqx.tree_equal(eqx_lru.to_real(cb), rb))
    assert bool(eqx.tree_equal(eqx_lru.to_complex(rb), cb))
    x = _inputs()
    assert max_rel_err(batched(rb, state, x)[0], batched(cb, state, x)[0]) < 1e-5


def test_to_real_on_any_pytree():
    layer = eqx_lru.ComplexLRU(H, N, key=jax.random.PRNGKey(0))
    tree = {"a": [layer, 1.0], "b": (jnp.ones(2), eqx_lru.RealLRU.from_complex(layer))}
    real = eqx_lru.to_real(tree)
    assert isinstance(real["a"][0], eqx_lru.RealLRU) and real["a"][1] == 1.0
    back = eqx_lru.to_complex(real)
    assert isinstance(back["b"][1], eqx_lru.ComplexLRU)
    assert bool(eqx.tree_equal(back["a"][0], layer))


# --- the recurrent-core contract ----------------------------------------------------------


class DecayCore(eqx_lru.AbstractRecurrentCore):
    """A minimal custom core: a per-feature exponential moving average."""

    logit: jax.Array
    recurrent_fields: ClassVar[tuple[str, ...]] = ("logit",)

    def __init__(self, d_model, d_state, *, key):
        del d_state
        self.logit = jax.random.normal(key, (d_model,))

    def init_state(self):
        return jnp.zeros_like(self.logit)

    def step(self, state, u_t, *, dt=None):
        state = jax.nn.sigmoid(self.logit) * state + u_t
        return state, state

    def run(self, u, *, initial_state=None, reverse=False, length=None, segment_ids=None, dt=None):
        a = jax.nn.sigmoid(self.logit)
        h = eqx_lru.linear_recurrence(
            a,
            cast(jax.Array, u),
            algebra=eqx_lru.Diagonal(),
            initial_state=initial_state,
            reverse=reverse,
            segment_ids=cast("jax.Array | None", segment_ids),
        )
        return h, h[0] if reverse else h[-1 if length is None else length - 1]


def test_custom_core():
    block, state = eqx.nn.make_with_state(eqx_lru.LRUBlock)(
        H, N, core=DecayCore, bidirectional=True, norm="layer", key=jax.random.PRNGKey(0)
    )
    assert isinstance(block.core, DecayCore) and isinstance(block.reverse_core, DecayCore)
    assert not eqx.tree_equal(block.core, block.reverse_core)  # own parameters per direction
    x = _inputs(batch=1)[0]
    y, _ = block(x, state)
    # The block is the formula of Fig. 1 with the sum of both directions.
    z = jax.vmap(cast(eqx.nn.LayerNorm, block.norm))(x)
    h = block.core(z) + block.reverse_core(z, reverse=True)
    expected = x + jax.vmap(block.glu)(jax.nn.gelu(h))
    assert max_rel_err(y, expected) < 1e-6


def test_custom_core_errors():
    key = jax.random.PRNGKey(0)
    with pytest.raises(TypeError, match="AbstractRecurrentCore"):
        eqx_lru.LRUBlock(H, N, core=lambda h, n, *, key: lambda u, reverse=False: u, key=key)  # pyright: ignore[reportArgumentType]

    class NotACore(eqx.Module):  # a module called like a core, but not a subclass
        w: jax.Array

        def __call__(self, u, *, reverse=False):
            return u @ self.w

    with pytest.raises(TypeError, match="Subclass eqx_lru.AbstractRecurrentCore"):
        eqx_lru.LRUBlock(H, N, core=lambda h, n, *, key: NotACore(jnp.ones((h, n))), key=key)  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError, match="dtype"):  # the block passes its dtype to the core
        eqx_lru.LRUBlock(H, N, core=DecayCore, dtype=jnp.float32, key=key)
    # (TypeError: in the test suite jaxtyping's hook type-checks the Literal first.)
    with pytest.raises((ValueError, TypeError), match="core"):
        eqx_lru.LRUBlock(H, N, core="quaternion", key=key)  # pyright: ignore[reportArgumentType]
    with pytest.raises((ValueError, TypeError), match="norm"):
        eqx_lru.LRUBlock(H, N, norm="group", key=key)  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match="dropout"):
        eqx_lru.LRUBlock(H, N, dropout=1.0, key=key)
    with pytest.raises(ValueError, match="r_max"):
        eqx_lru.LRUBlock(H, N, core=functools.partial(eqx_lru.ComplexLRU, r_max=1.5), key=key)
    with pytest.raises(TypeError, match="r_min"):  # ring options belong to the core now
        eqx_lru.LRUBlock(H, N, r_min=0.5, key=key)  # pyright: ignore[reportCallIssue]


def test_core_options_are_set_on_the_core():
    """The core is the one knob: ring, method and precision come with the factory; the
    shortcuts build the LRU with the block's dtype."""
    core = functools.partial(
        eqx_lru.RealLRU,
        r_min=0.9,
        r_max=0.95,
        max_phase=0.1,
        method="sequential",
        precision="highest",
    )
    block = eqx_lru.LRUBlock(H, 64, core=core, key=jax.random.PRNGKey(0))
    assert isinstance(block.core, eqx_lru.RealLRU)
    modulus, phase = block.core.modulus(), block.core.phase()
    assert 0.9 <= float(modulus.min()) and float(modulus.max()) <= 0.95 + 1e-6
    assert float(phase.max()) <= 0.1 + 1e-6
    assert block.core.method == eqx_lru.Sequential()
    assert block.core.precision == jax.lax.Precision.HIGHEST
    with jax.enable_x64(True):
        wide = eqx_lru.LRUBlock(H, N, core="real", dtype=jnp.float64, key=jax.random.PRNGKey(0))
        assert isinstance(wide.core, eqx_lru.RealLRU) and wide.core.B_re.dtype == jnp.float64


# --- GLU -----------------------------------------------------------------------------------


def test_glu_variants():
    y = jax.random.normal(jax.random.PRNGKey(1), (H,))
    full = eqx_lru.GLU(H, "full", key=jax.random.PRNGKey(0))
    w, b = full.linear.weight, cast(jax.Array, full.linear.bias)
    expected = (w[:H] @ y + b[:H]) * jax.nn.sigmoid(w[H:] @ y + b[H:])
    assert max_rel_err(full(y), expected) < 1e-6
    half = eqx_lru.GLU(H, "half", key=jax.random.PRNGKey(0))
    assert half.linear.weight.shape == (H, H)
    expected = y * jax.nn.sigmoid(half.linear.weight @ y + cast(jax.Array, half.linear.bias))
    assert max_rel_err(half(y), expected) < 1e-6


# --- batch norm ----------------------------------------------------------------------------


def test_masked_batch_norm_statistics_and_modes():
    norm, state = eqx.nn.make_with_state(eqx_lru.MaskedBatchNorm)(H, momentum=0.9)
    x = _inputs(length=7) * 3 + 1
    lengths = jnp.array([7, 2, 4])
    mask = jnp.arange(7)[None, :] < lengths[:, None]
    x = jnp.where(mask[..., None], x, jnp.nan)  # garbage in the pads

    @eqx.filter_jit
    def train(norm, state, x, mask):
        def one(x, mask):
            return norm(x, state, mask=mask)

        return jax.vmap(one, axis_name="batch", out_axes=(0, None))(x, mask)

    y, new_state = train(norm, state, x, mask)
    valid = np.asarray(x)[np.asarray(mask)]  # the 13 valid positions, concatenated
    mean, var = valid.mean(0), valid.var(0)
    y_valid = np.asarray(y)[np.asarray(mask)]
    np.testing.assert_allclose(y_valid, (valid - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    # Training updated the state; bias correction makes one step's running stats exact.
    steps, _, _ = new_state.get(norm.state_index)
    assert int(steps) == 1
    run_mean, run_var = norm.running_stats(new_state)
    np.testing.assert_allclose(run_mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_var, var, rtol=1e-5)
    # Before any training: identity statistics.
    m0, v0 = norm.running_stats(state)
    assert bool(jnp.all(m0 == 0)) and bool(jnp.all(v0 == 1))
    # Inference: running statistics, state unchanged, no batch axis needed.
    x0 = jnp.nan_to_num(x[0])
    y_inf, same_state = norm(x0, new_state, inference=True)
    assert bool(eqx.tree_equal(same_state, new_state))
    np.testing.assert_allclose(y_inf, (x0 - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    y_mode, _ = eqx.nn.inference_mode(norm)(x0, new_state)
    assert bool(eqx.tree_equal(y_mode, y_inf))


def test_batch_norm_needs_the_batch_axis():
    block, state = _block()
    with pytest.raises(NameError, match="axis_name"):
        block(_inputs(batch=1)[0], state)
    block(_inputs(batch=1)[0], state, inference=True)  # fine without vmap


def test_block_train_and_inference_modes():
    block, state = _block(bidirectional=True)
    x = _inputs()
    y_train, new_state = batched(block, state, x)
    assert not eqx.tree_equal(new_state, state)
    y_inf, same_state = batched(block, new_state, x, inference=True)
    assert bool(eqx.tree_equal(same_state, new_state))
    # After one step the bias-corrected running statistics are that batch's statistics...
    np.testing.assert_allclose(y_inf, y_train, rtol=1e-4, atol=1e-5)
    # ...and before any step they are (0, 1), not the batch's.
    y_fresh, _ = batched(block, _block(bidirectional=True)[1], x, inference=True)
    assert not np.allclose(y_fresh, y_train, rtol=1e-2)
    y_mode, _ = batched(eqx.nn.inference_mode(block), new_state, x)
    assert bool(eqx.tree_equal(y_mode, y_inf))


# --- padding -------------------------------------------------------------------------------


def test_block_padding_never_leaks():
    """Garbage (nan, huge) in the pads, training mode: valid outputs, batch-norm statistics
    and gradients unchanged. (Inference mode and whole models: tests/lib/test_model.py.)"""
    inference = False
    block, state = _block(bidirectional=True)
    _, state = batched(block, state, _inputs())  # non-trivial running stats
    lengths = jnp.array([L, 4, 1])
    x = _inputs()
    valid = jnp.arange(L)[None, :, None] < lengths[:, None, None]

    def pad(x, extra, fill):
        x = jnp.where(valid, x, fill)
        return jnp.concatenate([x, jnp.full((3, extra, H), fill)], axis=1)

    @eqx.filter_jit
    def run(block, state, x):
        def loss(block):
            y, new_state = _batched(block, state, x, lengths, inference=inference)
            return jnp.sum(jnp.where(valid, y[:, :L], 0) ** 2), (y, new_state)

        return eqx.filter_value_and_grad(loss, has_aux=True)(block)

    (l1, (y1, s1)), g1 = run(block, state, pad(x, 0, 0.0))
    (l2, (y2, s2)), g2 = run(block, state, pad(x, 3, jnp.nan))
    (l3, (y3, s3)), g3 = run(block, state, pad(x, 3, 1e30))
    for y, s, g in ((y2, s2, g2), (y3, s3, g3)):
        np.testing.assert_allclose(
            jnp.where(valid, y[:, :L], 0), jnp.where(valid, y1, 0), rtol=1e-5, atol=1e-6
        )
        assert bool(jnp.all(y[:, :L][~valid[..., 0]] == 0))  # zero at pads
        assert bool(eqx.tree_equal(s, s1, rtol=1e-5, atol=1e-6))
        assert bool(eqx.tree_equal(g, g1, rtol=1e-4, atol=1e-6))


def test_length_out_of_range_raises():
    block, state = _block(norm="layer")
    x = _inputs(batch=1)[0]
    call = eqx.filter_jit(lambda b, x, n: b(x, state, length=n))
    call(block, x, jnp.array(L))
    with pytest.raises(Exception, match="length"):
        jax.block_until_ready(call(block, x, jnp.array(L + 1)))
    with pytest.raises(Exception, match="length"):
        jax.block_until_ready(call(block, x, jnp.array(0)))
    with pytest.raises((ValueError, TypeError), match="integer|length"):
        block(x, state, length=jnp.array(3.0))


# --- dropout -------------------------------------------------------------------------------


def test_dropout():
    block, state = _block(norm="layer", dropout=0.5)
    no_drop, _ = _block(norm="layer", dropout=0.0)
    x = _inputs()
    keys = jax.random.split(jax.random.PRNGKey(5), 3)
    ref, _ = batched(no_drop, state, x)
    # Inference: no dropout, no key needed, deterministic and equal to the rate-0 block.
    y_inf, _ = batched(block, state, x, inference=True)
    np.testing.assert_array_equal(y_inf, ref)
    # Training: a key per example; different keys drop different units.
    y_a, _ = batched(block, state, x, keys=keys)
    y_b, _ = batched(block, state, x, keys=jax.random.split(jax.random.PRNGKey(6), 3))
    assert not np.allclose(y_a, ref) and not np.allclose(y_a, y_b)
    with pytest.raises(RuntimeError, match="key"):
        batched(block, state, x)


# --- remat ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [False, True])
def test_block_remat_same_values_and_gradients(bidirectional):
    """Bidirectional: the remat backward pass runs the two directions one after the other
    (`_both_directions`, its own VJP); the same values and gradients."""
    plain, state = _block(bidirectional=bidirectional)
    remat, _ = _block(remat=True, bidirectional=bidirectional)
    assert remat.remat and not plain.remat
    x, lengths = _inputs(), jnp.array([L, 4, 1])

    @eqx.filter_jit
    def value_and_grad(block, state):
        def loss(block):
            y, new_state = _batched(block, state, x, lengths)
            return jnp.sum(jnp.sin(y)), (y, new_state)

        return eqx.filter_value_and_grad(loss, has_aux=True)(block)

    (_, (y1, s1)), g1 = value_and_grad(plain, state)
    (_, (y2, s2)), g2 = value_and_grad(remat, state)
    np.testing.assert_allclose(y2, y1, rtol=1e-6, atol=1e-7)
    assert bool(eqx.tree_equal(s2, s1, rtol=1e-6, atol=1e-7))
    for a, b in zip(jax.tree_util.tree_leaves(g1), jax.tree_util.tree_leaves(g2), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)

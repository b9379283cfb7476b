"""The scan methods and their shared custom VJP against autodiff of a plain loop; the
memory-light and in-place properties of the compiled code; stored-state layouts; and the
low-precision `compute_dtype` of `RealLRU`.

Every (method, algebra, shared) configuration is compiled once: one jitted function
returns the forward pass and the gradients for all four (reverse, initial_state) variants.
"""

import itertools
import re
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import ALGEBRAS, grid_methods, recurrence_oracle, recurrence_problem

import eqx_lru
from eqx_lru._scan import _recurrence
from eqx_lru._scan._storage import ComplexPairs

# The default sequential loop (one step per iteration); `test_sequential_blocks_and_tails`
# covers blocks of several steps.
LENGTH = 6  # the state is conformance's (3, 4)
VARIANTS = list(itertools.product([False, True], repeat=2))  # (reverse, with_h0)


def _via_complex(a, h):
    """The rotation-scaling block (a0, a1) acting on planar pairs, computed independently
    of `RotationScaling` as the complex product (a0 + i a1)(h0 + i h1)."""
    z = jax.lax.complex(a[..., 0, :], a[..., 1, :]) * jax.lax.complex(h[..., 0, :], h[..., 1, :])
    return jnp.stack([z.real, z.imag], axis=-2)


# The loop's step for each algebra: its own `apply`, except where an independent formula
# exists.
REFERENCE_APPLY = {"rotation": _via_complex}


def _problem(name, shared, length=LENGTH, seed=0):
    """`conformance.recurrence_problem` as JAX arrays, with the algebra first."""
    a, b, h0 = recurrence_problem(name, shared=shared, length=length, seed=seed)
    return ALGEBRAS[name].algebra, jnp.asarray(a), jnp.asarray(b), jnp.asarray(h0)


def _loop(algebra, a, b, h0, shared, reverse, apply=None):
    """The plain sequential loop (`lax.scan`), differentiated by JAX's own autodiff."""
    apply = apply or algebra.apply

    def step(h, xs):
        a_k, b_k = (a, xs) if shared else xs
        h = apply(a_k, h) + b_k
        return h, h

    return jax.lax.scan(step, h0, b if shared else (a, b), reverse=reverse)[1]


def _loss(h, weights):
    # Not holomorphic for complex states: exercises JAX's conjugation convention.
    w_lin, w_sq = weights
    return jnp.sum(jnp.real(w_lin * h)) + jnp.sum(w_sq * jnp.real(h * jnp.conj(h)))


def _weights(b, seed=1):
    rng = np.random.default_rng(seed)
    w_lin = rng.normal(size=b.shape) + (1j * rng.normal(size=b.shape) if jnp.iscomplexobj(b) else 0)
    return jnp.asarray(w_lin.astype(b.dtype)), jnp.asarray(rng.normal(size=b.shape))


def _all_variants(fn, algebra, a, b, h0, weights, shared):
    """Forward and (a, b, h0)-gradients of `_loss` for every (reverse, with_h0) variant."""
    results = []
    for reverse, with_h0 in VARIANTS:

        def run(a, b, h0, reverse=reverse, with_h0=with_h0):
            return fn(algebra, a, b, h0 if with_h0 else None, shared, reverse)

        h, vjp = jax.vjp(run, a, b, h0)
        # JAX's cotangent of a real loss: the gradient with respect to the output.
        results.append((h, vjp(jax.grad(_loss)(h, weights))))
    return results


@pytest.mark.parametrize("name", list(ALGEBRAS))
@pytest.mark.parametrize("method", grid_methods())
def test_forward_and_gradients_match_autodiff_of_loop(method, name):
    """Shared and per-step transitions, each in one compiled program; the states also
    against the algebra's float64 NumPy loop (`conformance.recurrence_oracle`)."""
    for shared in (True, False):
        with jax.enable_x64(True):
            algebra, a, b, h0 = _problem(name, shared)
            weights = _weights(b)

            def ours(algebra, a, b, h0, shared, reverse):
                return eqx_lru.linear_recurrence(
                    a, b, algebra=algebra, initial_state=h0, reverse=reverse, method=method
                )

            def reference(algebra, a, b, h0, shared, reverse):
                h0 = _zeros_if_none(h0, b)
                return _loop(algebra, a, b, h0, shared, reverse, REFERENCE_APPLY.get(name))

            got, want = (
                jax.jit(
                    lambda a, b, h0, fn=fn, algebra=algebra, weights=weights, shared=shared: (
                        _all_variants(fn, algebra, a, b, h0, weights, shared)
                    )
                )(a, b, h0)
                for fn in (ours, reference)
            )
            for (reverse, with_h0), (h, grads), (h_ref, grads_ref) in zip(
                VARIANTS, got, want, strict=True
            ):
                msg = f"shared={shared}, reverse={reverse}, initial_state={with_h0}"
                assert h.shape == b.shape and h.dtype == b.dtype
                np.testing.assert_allclose(h, h_ref, rtol=1e-12, atol=1e-12, err_msg=msg)
                for arg, g, g_ref in zip("a b h0".split(), grads, grads_ref, strict=True):
                    assert g.dtype == g_ref.dtype, arg
                    np.testing.assert_allclose(
                        g, g_ref, rtol=1e-10, atol=1e-12, err_msg=f"d{arg}, {msg}"
                    )
                if with_h0:
                    assert float(jnp.abs(grads[2]).max()) > 0
                expected = recurrence_oracle(
                    name, a, b, shared=shared, reverse=reverse, h0=h0 if with_h0 else None
                )
                np.testing.assert_allclose(h, expected, rtol=1e-12, atol=1e-12, err_msg=msg)


@pytest.mark.parametrize("unroll,length", [(3, 2), (3, 7), (4, 8)])
def test_sequential_blocks_and_tails(unroll, length):
    """`Sequential(unroll)` steps per iteration: blocks that exceed the length, leave a tail,
    divide it."""
    method = eqx_lru.Sequential(unroll=unroll)
    with jax.enable_x64(True):
        for shared in (True, False):
            algebra, a, b, h0 = _problem("block", shared, length=length)
            weights = _weights(b)

            def ours(algebra, a, b, h0, shared, reverse):
                return eqx_lru.linear_recurrence(
                    a, b, algebra=algebra, initial_state=h0, reverse=reverse, method=method
                )

            def both(a, b, h0, shared=shared, algebra=algebra, weights=weights):
                def reference(algebra, a, b, h0, *rest):
                    return _loop(algebra, a, b, _zeros_if_none(h0, b), *rest)

                return [
                    _all_variants(fn, algebra, a, b, h0, weights, shared)
                    for fn in (ours, reference)
                ]

            got, want = jax.jit(both)(a, b, h0)
            for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
                np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12)


def _zeros_if_none(h0, b):
    return jnp.zeros_like(b[0]) if h0 is None else h0


@pytest.mark.parametrize("name", list(ALGEBRAS))
def test_closed_form_backward_equals_generic_default(name):
    """The algebras override the backward's methods with closed forms; they must equal the
    autodiff-derived defaults of `AbstractAlgebra`. `transposed` gives transitions that
    act as `apply_transpose` and compose in the transposed order."""
    with jax.enable_x64(True):
        algebra, a, b, _ = _problem(name, shared=True)
        _, a2, b2, _ = _problem(name, shared=True, seed=5)
        g, h = b[0], b[1]
        base = eqx_lru.AbstractAlgebra
        algebra_t, a_t = algebra.transposed(a)
        _, a2_t = algebra.transposed(a2)
        np.testing.assert_allclose(
            algebra_t.apply(a_t, g), base.apply_transpose(algebra, a, g), rtol=1e-14
        )
        # (a2 ∘ a)ᵀ = aᵀ ∘ a2ᵀ: applied to g, the transpose of "a first, then a2".
        np.testing.assert_allclose(
            algebra_t.apply(algebra_t.compose(a_t, a2_t), g),
            base.apply_transpose(algebra, algebra.compose(a2, a), g),
            rtol=1e-13,
        )
        np.testing.assert_allclose(
            algebra.apply_transpose(a, g), base.apply_transpose(algebra, a, g), rtol=1e-14
        )
        np.testing.assert_allclose(
            algebra.transition_cotangent(g, h), base.transition_cotangent(algebra, g, h), rtol=1e-14
        )
        np.testing.assert_allclose(
            algebra.transition_cotangent_sum(b, b2),
            base.transition_cotangent_sum(algebra, b, b2),
            rtol=1e-13,
        )


def test_complex_pairs_storage_matches_complex_states():
    """Complex states stored as real pairs (what ComplexLRU does): same states, and the
    cotangents of the pairs are JAX's cotangents of the complex input mapped through
    `complex(re, im)`."""
    with jax.enable_x64(True):
        algebra, a, b, h0 = _problem("diag-complex", shared=True)
        pairs = jnp.stack([b.real, b.imag], axis=1)
        w = _weights(pairs)

        def via_pairs(a, pairs, h0, method):
            return _recurrence.recurrence(
                a,
                pairs,
                algebra=algebra,
                storage=ComplexPairs(),
                initial_state=h0,
                method=method,
            )

        def via_complex(a, pairs, h0):
            b = jax.lax.complex(pairs[:, 0], pairs[:, 1])
            h = _loop(algebra, a, b, h0, True, False)
            return jnp.stack([h.real, h.imag], axis=1)

        @jax.jit
        def run(a, pairs, h0):
            out = {}
            for method in grid_methods():
                out[method] = (
                    via_pairs(a, pairs, h0, method),
                    jax.grad(
                        lambda *x, method=method: _loss(via_pairs(*x, method=method), w),
                        argnums=(0, 1, 2),
                    )(a, pairs, h0),
                )
            out["reference"] = (
                via_complex(a, pairs, h0),
                jax.grad(lambda *x: _loss(via_complex(*x), w), argnums=(0, 1, 2))(a, pairs, h0),
            )
            return out

        out = run(a, pairs, h0)
        for method in grid_methods():
            for x, y in zip(
                jax.tree.leaves(out[method]), jax.tree.leaves(out["reference"]), strict=True
            ):
                np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12, err_msg=method)


def _compiled_grad(method, batch=2, length=128, modes=16, reference=False):
    a = 0.9 * jnp.ones((modes, 2, 2)) * jnp.asarray([[1.0, -0.3], [0.3, 1.0]])
    b = jnp.ones((batch, length, modes, 2))

    def scan(b):
        if reference:  # plain autodiff of lax.associative_scan, as in the paper's App. A

            def combine(x, y):
                return y[0] @ x[0], jnp.einsum("...ij,...j->...i", y[0], x[1]) + y[1]

            elements = (jnp.broadcast_to(a, (length,) + a.shape), b)
            return jax.lax.associative_scan(combine, elements)[1]
        return eqx_lru.linear_recurrence(a, b, algebra=eqx_lru.Block2x2(), method=method)

    def loss(a_scale, b):
        return jnp.sum(jnp.sin(jax.vmap(scan)(b * a_scale)))

    return jax.jit(jax.grad(loss, argnums=(0, 1))).lower(1.0, b).compile(), b.nbytes


# The associative method's forward+backward XLA temp here, in state-sized buffers: its
# scan's level temporaries (the halves, quarters, … of the states and of the broadcast
# transitions) take up to 4 (measured 3.27 with JAX 0.10.2). From JAX 0.11 (measured:
# 4.27 with 0.11.2 and 0.12.0.1) XLA also keeps the states themselves, the custom VJP's
# residual, as one buffer (the scan's last level, a fusion XLA 0.10 recomputed inside its
# two consumers, the loss and the backward): one more.
ASSOCIATIVE_TEMP_STATES = 5 if jax.__version_info__ >= (0, 11) else 4


@pytest.mark.parametrize("method", ["sequential", "associative"])
def test_backward_keeps_only_the_states(method):
    """XLA's temp memory for forward+backward: autodiff of `lax.associative_scan` keeps its
    tree of intermediates (about five copies of the states here); with the custom VJP the
    associative method needs only its own forward temporaries and the states (see
    `ASSOCIATIVE_TEMP_STATES`), and the sequential method, in place, nothing beyond its
    input and output."""
    compiled, state_bytes = _compiled_grad(method)
    reference, _ = _compiled_grad(method, reference=True)
    memory, reference_memory = compiled.memory_analysis(), reference.memory_analysis()
    assert memory is not None and reference_memory is not None
    temp = memory.temp_size_in_bytes
    assert temp <= (0.25 if method == "sequential" else ASSOCIATIVE_TEMP_STATES) * state_bytes
    # Against autodiff's tree, what the scan itself keeps (less the states buffer that
    # newer XLA keeps for both).
    kept = (ASSOCIATIVE_TEMP_STATES - 4) * state_bytes if method == "associative" else 0
    assert temp - kept < 0.8 * reference_memory.temp_size_in_bytes


def test_sequential_updates_the_sequence_in_place():
    """Under vmap, the sequential loop writes the states over its input: no copy of a
    whole (batch, length, ...) buffer anywhere in the compiled forward+backward (a copy
    inside the loop would copy the sequence at every iteration)."""
    compiled, _ = _compiled_grad("sequential")
    full = r"f32\[2,128,16,2\]\{[\d,]+\} copy\("
    assert not re.search(full, cast(str, compiled.as_text()))


# --- RealLRU with a low-precision compute dtype --------------------------------------------


def _lru_pair(form=eqx_lru.RealLRU, **kwargs):
    key = jax.random.PRNGKey(0)
    ring: dict[str, Any] = dict(r_min=0.9, r_max=0.999)
    return form(6, 5, **ring, key=key), form(6, 5, **ring, key=key, **kwargs)


def test_bfloat16_compute_dtype_is_close_to_float32():
    full, low = _lru_pair(compute_dtype=jnp.bfloat16)
    assert low.compute_dtype == "bfloat16" and full.compute_dtype is None
    u = jax.random.normal(jax.random.PRNGKey(1), (100, 6))

    @eqx.filter_jit
    def run(layer):
        return layer(u), jax.grad(lambda layer: jnp.mean(layer(u) ** 2))(layer)

    (y, grads), (y_low, grads_low) = run(full), run(low)
    assert y_low.dtype == jnp.float32
    rel = float(jnp.linalg.norm(y_low - y) / jnp.linalg.norm(y))
    assert 0 < rel < 1e-2
    for name in ("nu_log", "theta_log", "gamma_log", "B_re", "B_im", "C_re", "C_im", "D"):
        g, g_low = getattr(grads, name), getattr(grads_low, name)
        assert g_low.dtype == jnp.float32
        assert float(jnp.linalg.norm(g_low - g) / jnp.linalg.norm(g)) < 2e-2, name
    # The sequence of states is stored in bfloat16 (the carry is float32).
    assert low._state_pairs(u, None, False).dtype == jnp.bfloat16


def test_bfloat16_step_equals_parallel_and_state_stays_float32():
    """`step` rounds what the parallel call rounds: the drive and the stored states, to
    bfloat16, explicitly (`Cast` storage uses `lax.reduce_precision`, which XLA on GPUs
    keeps where it may drop a float32 → bfloat16 → float32 cast pair). On the CPU both
    programs then compute identical products and the results agree to float32 rounding.
    Elsewhere the one-token and the whole-sequence matmuls may accumulate in different
    orders (different kernels), and a float32 difference of one ulp can move a value
    across a bfloat16 rounding boundary: one bfloat16 ulp (2⁻⁸ relative) in a drive or
    stored state. That is the tolerance we can promise on every backend."""
    _, low = _lru_pair(compute_dtype=jnp.bfloat16)
    u = jax.random.normal(jax.random.PRNGKey(2), (20, 6))
    step = jax.jit(lambda s, x: low.step(s, x))
    state, ys = low.init_state(), []
    assert state.dtype == jnp.float32
    for t in range(u.shape[0]):
        state, y_t = step(state, u[t])
        ys.append(y_t)
    assert state.dtype == jnp.float32
    ys, parallel = jnp.stack(ys), low(u)
    # `hidden_states` returns the stored states: the float32 carry rounded to bfloat16.
    stored = low.hidden_states(u)[-1]
    assert stored.dtype == jnp.float32
    rounded = state.astype(jnp.bfloat16).astype(jnp.float32)
    if jax.default_backend() == "cpu":
        np.testing.assert_allclose(ys, parallel, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(stored, rounded)
    else:
        scale = float(jnp.abs(parallel).max())
        np.testing.assert_allclose(ys, parallel, rtol=0, atol=2**-7 * scale)
        atol = 2**-7 * float(jnp.abs(state).max())
        np.testing.assert_allclose(stored, rounded, rtol=2**-7, atol=atol)


def test_cast_storage_rounds_explicitly():
    """The rounding to the stored dtype is a `reduce_precision` in the program (which XLA
    keeps), on loading and on storing, not only a pair of casts (which XLA on GPUs may
    remove). Loading a stored value is exact."""
    from eqx_lru._scan._storage import Cast

    cast = Cast(compute="float32", stored="bfloat16")
    x = jnp.asarray([[1.0 + 2**-12, -3.0, 1e-3]], jnp.float32)
    for fn, arg in ((cast.store, x), (cast.load, x.astype(jnp.bfloat16))):
        assert "reduce_precision" in str(jax.make_jaxpr(fn)(arg)), fn
    stored = cast.store(x)
    assert stored.dtype == jnp.bfloat16
    np.testing.assert_array_equal(cast.load(stored), stored.astype(jnp.float32))


def test_complex_form_has_no_low_precision_compute_dtype():
    with pytest.raises(ValueError, match="RealLRU"):
        eqx_lru.ComplexLRU(6, 5, compute_dtype=jnp.bfloat16, key=jax.random.PRNGKey(0))
    _, low = _lru_pair(compute_dtype=jnp.bfloat16)
    with pytest.raises(ValueError, match="RealLRU"):
        eqx_lru.ComplexLRU.from_real(low)
    with pytest.raises(ValueError, match="floating"):
        eqx_lru.RealLRU(6, 5, compute_dtype=jnp.int8, key=jax.random.PRNGKey(0))
    # The parameters' own dtype is the default, not a separate compute dtype.
    key = jax.random.PRNGKey(0)
    assert eqx_lru.ComplexLRU(6, 5, compute_dtype=jnp.float32, key=key).compute_dtype is None
    round_trip = eqx_lru.RealLRU.from_complex(eqx_lru.ComplexLRU.from_real(_lru_pair()[0]))
    assert round_trip.compute_dtype is None


def test_low_precision_projection_gradient_rounds_like_the_forward():
    """With a `compute_dtype`, the projections' backward products are the forward's: the
    output cotangent and both operands rounded to bfloat16, products accumulated in float32
    (a float64 NumPy oracle on the rounded values), not JAX's mixed float32 × bfloat16
    transpose (which makes XLA on the CPU convert whole sequences to float32)."""
    from eqx_lru._cores._projection import _matmul

    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    x = jax.random.normal(keys[0], (7, 5))
    w = jax.random.normal(keys[1], (3, 5))
    g = jax.random.normal(keys[2], (7, 3))
    y, vjp = jax.vjp(lambda x, w: _matmul(x, w, None, "bfloat16"), x, w)
    ct_x, ct_w = vjp(g)

    def r(a):
        return np.asarray(a.astype(jnp.bfloat16).astype(jnp.float32), np.float64)

    assert y.dtype == ct_x.dtype == ct_w.dtype == jnp.float32
    np.testing.assert_allclose(y, r(x) @ r(w).T, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ct_x, r(g) @ r(w), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ct_w, r(g).T @ r(x), rtol=1e-6, atol=1e-6)
    # A bfloat16 operand gets a bfloat16 cotangent.
    _, vjp = jax.vjp(lambda x: _matmul(x, w, None, "bfloat16"), x.astype(jnp.bfloat16))
    assert vjp(g)[0].dtype == jnp.bfloat16


#: A float32 (batch, length, 2N) state buffer of `_layer_grad_temp`'s layers.
_LAYER_STATE_BYTES = 2 * 1024 * 2 * 16 * 4


def _layer_grad_temp(cls, compute_dtype=None) -> int:
    """XLA's temp bytes (compile only) of the layer's forward+backward under `vmap`, B 2,
    L 1024, H 24, N 16, the sequential method."""
    u = jnp.zeros((2, 1024, 24))
    layer = cls(24, 16, compute_dtype=compute_dtype, method="sequential", key=jax.random.PRNGKey(0))
    grad = jax.grad(lambda p, u: jnp.mean(jax.vmap(p)(u)), argnums=(0, 1))
    memory = jax.jit(grad).lower(layer, u).compile().memory_analysis()
    assert memory is not None
    return memory.temp_size_in_bytes


@pytest.mark.slow
@pytest.mark.parametrize("cls", [eqx_lru.RealLRU, eqx_lru.ComplexLRU])
def test_the_adjoint_loop_sums_the_transition_cotangent(cls):
    """The sequential method sums the shared transition's cotangent inside its adjoint
    loop (`Sequential.adjoint_scan_shared`): forward+backward then needs under three
    state-sized buffers of XLA temp here (2.8 measured). Summed in a second loop after
    it, the adjoint states stayed live for it: 4.5 (real) and 3.8 (complex)."""
    assert _layer_grad_temp(cls) < 3 * _LAYER_STATE_BYTES


@pytest.mark.slow
def test_bfloat16_gradient_has_no_float32_copies_of_its_sequences():
    """`RealLRU(compute_dtype=bfloat16)` under `vmap`, forward and backward: XLA's temp
    (compile only) exceeds float32's by less than half a float32 state buffer. Guards
    against float32 copies of its sequence-long bfloat16 arrays: XLA on the CPU made one
    per array for a gather in bfloat16 and for the mixed float32 × bfloat16 transposed
    matmuls (each such copy adds a whole buffer). It is not below float32's on the CPU,
    whose dot computes a bfloat16 product in float32 from a converted operand."""
    bf16 = _layer_grad_temp(eqx_lru.RealLRU, jnp.bfloat16)
    assert bf16 < _layer_grad_temp(eqx_lru.RealLRU) + _LAYER_STATE_BYTES // 2

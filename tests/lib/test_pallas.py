"""The Pallas kernel method (`eqx_lru._scan._pallas`) against a float64 NumPy loop.

Off GPUs the kernel runs in Pallas interpret mode, so these tests check the kernel's
arithmetic, chunking (with the next chunk prefetched), tail handling, the two-level scan
over segments, the shared transition's cotangent summed inside the backward kernel,
masking of partial channel tiles and batching on the CPU; `test_lowers_for_cuda` lowers
the Triton kernel for CUDA without a GPU (warning-free on every supported JAX),
`test_compiles_for_hopper` compiles its Triton IR for sm_90 with the `triton` package's
ptxas, and `test_compiled_kernel_on_gpu` runs the compiled kernel where a CUDA GPU is
present. Sizes are tiny and distinct (length != chunk != channels != block): interpret
mode compiles slowly.
"""

import functools
import os
import re
import subprocess
import tempfile
import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru
from eqx_lru._scan import _pallas
from eqx_lru._scan._algebra import Block2x2, Diagonal, RotationScaling
from eqx_lru._scan._methods import scan_method
from eqx_lru._scan._pallas import PallasScan, cuda_target, kernel_scan
from eqx_lru._scan._recurrence import recurrence
from eqx_lru._scan._storage import Cast, ComplexPairs, Identity

# length 11 = 2 chunks of 4 + a tail of 3; channel tiles of 4 over 5 (or 3) channels, the
# last one partial (masked on GPUs).
LENGTH, CHUNK, BLOCK = 11, 4, 4
KW: dict[str, Any] = dict(chunk=CHUNK, block=BLOCK)


def loop(a, x, h0, *, reverse, pair):
    """float64 oracle; pairs as complex numbers (planar axis -2)."""
    a, x, h = (np.asarray(v, np.float64) for v in (a, x, h0))
    if pair:
        a, x, h = (v[..., 0, :] + 1j * v[..., 1, :] for v in (a, x, h))
    shared = a.ndim == x.ndim - 1
    out = np.zeros_like(x)
    for k in reversed(range(len(x))) if reverse else range(len(x)):
        h = (a if shared else a[k]) * h + x[k]
        out[k] = h
    return np.stack([out.real, out.imag], axis=-2) if pair else out


def draw(seed, state, *, shared, dtype=np.float32, stored=np.float32):
    """(a, x, h0): |a| < 1 transitions in `dtype`, the drive in `stored`."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-0.95, 0.95, state if shared else (LENGTH,) + state).astype(dtype)
    x = rng.normal(size=(LENGTH,) + state).astype(stored)
    h0 = rng.normal(size=state).astype(dtype)
    return jnp.asarray(a), jnp.asarray(x), jnp.asarray(h0)


def check(out, a, x, h0, *, reverse, pair, rtol=1e-5, atol=1e-5):
    expected = loop(a, np.asarray(x.astype(jnp.float32)), h0, reverse=reverse, pair=pair)
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_allclose(np.asarray(out.astype(jnp.float32)), expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    "pair, shared, reverse, state, stored, segment",
    [
        (False, True, False, (5,), jnp.float32, None),  # shared, forward
        (False, False, True, (3, 5), jnp.bfloat16, None),  # per-step, reverse, 2 state axes
        (True, True, True, (3, 2, 5), jnp.float32, 4),  # pairs with a leading axis; 3 segments
        (True, False, False, (2, 3), jnp.bfloat16, 8),  # pairs, per-step; 2 segments
    ],
)
def test_kernel_matches_loop(pair, shared, reverse, state, stored, segment):
    # Segments of 4 or 8 steps: the two-level scan (segment ends and transition products,
    # a scan over the segments, then the states), the last segment short, with the tail.
    a, x, h0 = draw(0, state, shared=shared, stored=stored)
    out = kernel_scan(a, x, h0, pairs=pair, reverse=reverse, segment=segment, **KW)
    if stored == jnp.float32:
        check(out, a, x, h0, reverse=reverse, pair=pair)
    else:
        check_rounded(out, a, x, h0, reverse=reverse, pair=pair)


def check_rounded(out, a, x, h0, *, reverse, pair):
    """bfloat16 drive and states with a float32 carry: every stored state is the exact
    state rounded once to bfloat16, up to one ulp (float32 carry errors can flip a
    rounding), not the drifting result of a bfloat16 recurrence."""
    assert out.dtype == jnp.bfloat16
    exact = loop(a, np.asarray(x.astype(jnp.float32)), h0, reverse=reverse, pair=pair)
    rounded = jnp.asarray(exact, jnp.float32).astype(jnp.bfloat16).astype(jnp.float32)
    np.testing.assert_allclose(out.astype(jnp.float32), rounded, rtol=2**-7, atol=1e-6)


def test_vmap_and_chunk_longer_than_sequence():
    # Under jax.vmap the batch is one more grid axis; chunk > length is one tail chunk.
    state = (2, 3)
    a, _, h0 = draw(2, state, shared=True)
    x = jnp.asarray(np.random.default_rng(3).normal(size=(3, LENGTH) + state), jnp.float32)
    scan = functools.partial(kernel_scan, pairs=True, chunk=16, block=2)
    f = jax.vmap(scan, in_axes=(None, 0, None))
    # The states are written over the drive (input_output_aliases): a drive still used
    # afterwards must come through intact.
    out, x_after = jax.jit(lambda x: (f(a, x, h0), 2 * x))(x)
    np.testing.assert_array_equal(x_after, 2 * x)
    for i in range(3):
        check(out[i], a, x[i], h0, reverse=False, pair=True)


def test_argument_errors():
    a, x, h0 = draw(0, (5,), shared=True)
    with pytest.raises(ValueError, match="`a` must have shape"):
        kernel_scan(a[:3], x, h0)
    with pytest.raises(ValueError, match="planar pairs"):
        kernel_scan(jnp.zeros((3, 5)), jnp.zeros((LENGTH, 3, 5)), pairs=True)
    with pytest.raises(ValueError, match="`block` must be a power of two"):
        kernel_scan(a, x, h0, block=3)
    with pytest.raises(ValueError, match="`block` must be a power of two"):
        PallasScan(block=6)
    with pytest.raises(ValueError, match="`chunk` must be a positive integer"):
        PallasScan(chunk=0)
    with pytest.raises(ValueError, match="`segment` must be a positive integer or None"):
        PallasScan(segment=0)


def test_lowers_for_cuda():
    # The Triton lowering runs without a GPU, with no warning (filterwarnings=error: JAX
    # >= 0.11 deprecates Pallas' Triton backend, handled in eqx_lru._scan._pallas): masked
    # partial tiles, per-step transitions, bfloat16 storage, the two-level scan's two
    # kernels and the batch grid axis of vmap all lower. (Timing it needs a GPU.)
    for pairs, state in [(False, (20,)), (True, (2, 48))]:
        a = jnp.ones((LENGTH,) + state, jnp.float32)
        x = jnp.ones((4, LENGTH) + state, jnp.bfloat16)
        f = jax.vmap(
            functools.partial(
                kernel_scan, pairs=pairs, reverse=True, interpret=False, chunk=4, segment=4
            ),
            in_axes=(None, 0),
        )
        with cuda_target():
            text = jax.jit(f).trace(a, x).lower(lowering_platforms=("cuda",)).as_text()
        assert text.count("__gpu$xla.gpu.triton") == 2


# --- compiled for Hopper, without a GPU ---------------------------------------------------


def _triton_irs(fn, *args) -> list[str]:
    """The Triton IR (text) of every Pallas kernel in `fn`, lowered for CUDA on this
    machine."""
    lowering = _pallas._triton_registration.lowering  # pyright: ignore[reportPrivateImportUsage]
    captured, original = [], lowering.lower_jaxpr_to_triton_module

    def spy(*a, **k):
        result = original(*a, **k)
        captured.append(result.module.operation.get_asm())
        return result

    lowering.lower_jaxpr_to_triton_module = spy
    try:
        with cuda_target():
            jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))
    finally:
        lowering.lower_jaxpr_to_triton_module = original
    return captured


def _compile_sm90(ttir: str, num_warps: int) -> dict:
    """Triton IR → PTX by the `triton` package's passes for sm_90, then its `ptxas -v`:
    registers, spilled bytes (stores + loads), the kernel's name and the seconds taken."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler.compiler import IRSource, make_backend

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "kernel.ttir")
        with open(source, "w") as f:
            f.write(ttir)
        start = time.perf_counter()
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        src = IRSource(source, context, backend)
        options = backend.parse_options(dict(num_warps=num_warps, num_stages=1))
        stages = {}
        backend.add_stages(stages, options, src.language)
        module, metadata = src.make_ir(target, options, None, None, context), {}
        for name, stage in stages.items():
            if name == "cubin":
                break
            module = stage(module, metadata)
        ptx = os.path.join(folder, "kernel.ptx")
        with open(ptx, "w") as f:
            f.write(module)
        log = subprocess.run(
            [
                get_ptxas(90).path,
                "-v",
                "--regAllocOptLevel=2",
                "--gpu-name=sm_90a",
                ptx,
                "-o",
                os.path.join(folder, "kernel.cubin"),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stderr
        seconds = time.perf_counter() - start
    kernel = re.search(r"entry function '(\w+)'", log)
    registers = re.search(r"Used (\d+) registers", log)
    assert kernel and registers, log
    return dict(
        kernel=kernel.group(1),
        registers=int(registers.group(1)),
        spilled=sum(map(int, re.findall(r"(\d+) bytes spill (?:stores|loads)", log))),
        seconds=round(seconds, 1),
    )


def _hopper_variants():
    """(pair, shared, reverse, stored) of every variant, and the kernels (by mode) that a
    default run compiles: the most registers (pairs, per-step), the fused backward (a
    shared transition's cotangent) and the two-level scan's first kernel."""
    every = [
        (pair, shared, reverse, stored)
        for pair in (False, True)
        for shared in (True, False)
        for reverse in (False, True)
        for stored in ("float32", "bfloat16")
    ]
    if os.environ.get("EQX_LRU_HOPPER_ALL"):
        return [(v, ("states", "sum", "ends")) for v in every]
    return [
        ((True, False, True, "bfloat16"), ("states",)),
        ((True, True, False, "float32"), ("sum",)),
        ((False, False, False, "float32"), ("ends",)),
    ]


def _skip_without_triton():
    try:
        import triton  # noqa: F401
        from triton.backends.nvidia.compiler import get_ptxas
    except ImportError as e:
        pytest.skip(f"needs the `triton` package (the `test` extra on Linux x86-64): {e}")
    if not os.path.exists(get_ptxas(90).path):
        pytest.skip("the `triton` package has no ptxas")


@pytest.mark.slow
@pytest.mark.parametrize("variant, modes", _hopper_variants())
def test_compiles_for_hopper(variant, modes, monkeypatch):
    """The kernels of forward+backward at the default chunk, block and segment, lowered for
    CUDA and compiled for sm_90 (H100): no spilled registers. Registers and compile times
    are printed (`pytest -s`); compile time is not asserted (it depends on the machine).
    By default three kernels; EQX_LRU_HOPPER_ALL=1 compiles every variant (real/pairs,
    shared/per-step, forward/reverse, float32/bfloat16 storage) and each of its kernels."""
    # XLA's Triton fuses multiply-adds; say so (triton 3.9 warns when this is unset).
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    _skip_without_triton()
    pair, shared, reverse, stored = variant
    length, width = 4 * _pallas.DEFAULT_SEGMENT, 96  # two-level: 4 segments
    state = (2, width) if pair else (width,)
    algebra = RotationScaling() if pair else Diagonal()
    storage = Identity() if stored == "float32" else Cast(compute="float32", stored=stored)
    method = PallasScan(interpret=False)
    a = jnp.full(state if shared else (length,) + state, 0.5, jnp.float32)
    b = jnp.ones((length,) + state, stored)

    def loss(a, b):
        hs = recurrence(a, b, algebra=algebra, storage=storage, reverse=reverse, method=method)
        return jnp.sum(hs.astype(jnp.float32))

    irs = _triton_irs(jax.grad(loss, argnums=(0, 1)), a, b)
    chosen = [ir for ir in irs if any(f"eqx_lru_scan_{m}" in ir for m in modes)]
    assert chosen, f"no kernel of modes {modes} among {len(irs)}"
    for ir in chosen:
        result = _compile_sm90(ir, num_warps=max(1, _pallas.DEFAULT_BLOCK // 32))
        print(f"sm_90 {variant}: {result}")
        assert result["spilled"] == 0, result


# --- through the scan method interface ------------------------------------------------


def test_method_objects_and_shortcut():
    assert isinstance(scan_method("pallas"), PallasScan)
    assert eqx_lru.PallasScan is PallasScan
    assert hash(PallasScan(chunk=8)) == hash(PallasScan(chunk=8))
    a, x, h0 = draw(0, (2, 5), shared=True)
    with pytest.raises(ValueError, match="PallasScan supports.*Block2x2"):
        eqx_lru.linear_recurrence(
            jnp.zeros((2, 2, 5)), x, algebra=Block2x2(planar=True), method=PallasScan()
        )


def _values_and_grads(method, a, b, h0, algebra, reverse):
    def loss(a, b, h0):
        hs = eqx_lru.linear_recurrence(
            a, b, algebra=algebra, initial_state=h0, reverse=reverse, method=method
        )
        weights = jnp.cos(jnp.arange(hs.size, dtype=jnp.float32)).reshape(hs.shape)
        return jnp.sum(weights * (hs.real if jnp.iscomplexobj(hs) else hs)), hs

    return jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(a, b, h0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "algebra, shared, reverse, complex_",
    [
        (Diagonal(), False, True, True),  # complex arrays, per-step, reverse
        (RotationScaling(), True, False, False),  # planar pairs, shared
    ],
)
def test_linear_recurrence_values_and_gradients(algebra, shared, reverse, complex_):
    state = (2, 5) if isinstance(algebra, RotationScaling) else (5,)
    a, b, h0 = draw(4, state, shared=shared)
    if complex_:
        a2, b2, h2 = draw(5, state, shared=shared)
        a, b, h0 = (jax.lax.complex(u, 0.5 * v) for u, v in ((a, a2), (b, b2), (h0, h2)))
    (_, hs), grads = _values_and_grads(PallasScan(**KW), a, b, h0, algebra, reverse)
    (_, hs_ref), grads_ref = _values_and_grads("sequential", a, b, h0, algebra, reverse)
    np.testing.assert_allclose(hs, hs_ref, rtol=1e-5, atol=1e-5)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kind, reverse", [("real-bf16", False), ("complex", True)])
def test_shared_transition_cotangent_summed_in_kernel(kind, reverse):
    # The backward kernel of a shared transition also sums its cotangent Σ λ_k ⊗ h_{k-1}ᵀ
    # ("eqx_lru_scan_sum"; no loop over λ and the states after it), over 3 segments.
    method = PallasScan(chunk=CHUNK, block=BLOCK, segment=4)
    if kind == "complex":
        (a, b, h0), (a2, b2, h2) = draw(8, (5,), shared=True), draw(9, (5,), shared=True)
        a, b, h0 = (jax.lax.complex(u, 0.5 * v) for u, v in ((a, a2), (b, b2), (h0, h2)))
        storage = Identity()
    else:
        a, b, h0 = draw(8, (2, 5), shared=True, stored=jnp.bfloat16)
        storage = Cast(compute="float32", stored="bfloat16")

    def grads(method, storage):
        def loss(a, b, h0):
            hs = recurrence(
                a,
                b,
                algebra=Diagonal(),
                storage=storage,
                initial_state=h0,
                reverse=reverse,
                method=method,
            )
            weights = jnp.cos(jnp.arange(hs.size, dtype=jnp.float32)).reshape(hs.shape)
            return jnp.sum(weights * (hs.real if jnp.iscomplexobj(hs) else hs.astype(jnp.float32)))

        return jax.grad(loss, argnums=(0, 1, 2)), (a, b, h0)

    f, args = grads(method, storage)
    assert "eqx_lru_scan_sum" in str(jax.make_jaxpr(f)(*args))
    got = f(*args)
    if kind == "complex":
        want = grads("sequential", storage)[0](*args)
        for g, g_ref in zip(got, want, strict=True):
            np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-5)
    else:
        # The kernel sums λ_k h_{k-1} with λ in its float32 carry, the loop with the
        # bfloat16-stored λ (relative rounding ≤ 2**-9): they differ by at most
        # 2**-9 Σ|λ_k h_{k-1}| (2**-8 here). λ itself (= the gradient of b) and the
        # gradient of h0 agree to a bfloat16 ulp.
        want = grads("sequential", storage)[0](*args)
        lam = np.asarray(want[1], np.float64)
        hs = recurrence(a, b, algebra=Diagonal(), storage=storage, initial_state=h0)
        bound = 2**-8 * np.sum(np.abs(lam[1:] * np.asarray(hs[:-1], np.float64)), axis=0)
        assert np.all(np.abs(np.asarray(got[0]) - np.asarray(want[0])) <= bound + 1e-6)
        for g, g_ref in zip(got[1:], want[1:], strict=True):
            g, g_ref = g.astype(jnp.float32), g_ref.astype(jnp.float32)
            np.testing.assert_allclose(g, g_ref, rtol=2**-7, atol=1e-6)


def test_cast_storage_and_unsupported_storage():
    # Real Diagonal with a float32 carry over bfloat16 storage, by the method object. (The
    # complex planar pairs, `ComplexPairs` and its conjugated cotangent storage, are
    # exercised by the ComplexLRU layer test, forward and backward.)
    method = PallasScan(**KW)
    a, b, h0 = draw(6, (5,), shared=False, stored=jnp.bfloat16)
    storage = Cast(compute="float32", stored="bfloat16")
    out = method.scan(Diagonal(), storage, a, b, h0, shared=False, reverse=True)
    check_rounded(out, a, b, h0, reverse=True, pair=False)
    with pytest.raises(ValueError, match="PallasScan supports.*RotationScaling.*ComplexPairs"):
        method.scan(RotationScaling(), ComplexPairs(), a, b, h0, shared=True, reverse=False)


@pytest.mark.slow
@pytest.mark.parametrize("layer", ["complex", "real"])
def test_layer_with_pallas_equals_default(layer, getkey):
    cls = eqx_lru.ComplexLRU if layer == "complex" else eqx_lru.RealLRU
    key = getkey()
    default = cls(3, 5, key=key)
    pallas = cls(3, 5, method="pallas", key=key)
    assert pallas.method == PallasScan()
    u = jax.random.normal(getkey(), (2, LENGTH, 3))  # a batch of 2, by jax.vmap

    def run(model, u):
        return jax.vmap(lambda v: model(v, reverse=True))(u)

    def loss(model, u):
        return jnp.sum(jnp.sin(run(model, u)))

    grad = eqx.filter_grad(loss)
    np.testing.assert_allclose(run(pallas, u), run(default, u), rtol=1e-5, atol=1e-6)
    leaves = jax.tree.leaves(grad(pallas, u)), jax.tree.leaves(grad(default, u))
    for g, g_ref in zip(*leaves, strict=True):
        np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_compiled_kernel_on_gpu():
    # Only on a CUDA GPU: the Triton-compiled kernel (not the interpreter) against the loop,
    # at a small chunk and at the defaults, in one segment and in three.
    for pair, state in ((False, (37,)), (True, (2, 40))):
        for shared, reverse in ((True, False), (False, True)):
            a, x, h0 = draw(7, state, shared=shared)
            for kw in (dict(chunk=4, block=32), dict(), dict(chunk=2, segment=4)):
                out = kernel_scan(a, x, h0, pairs=pair, reverse=reverse, interpret=False, **kw)
                check(out, a, x, h0, reverse=reverse, pair=pair, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_compiled_fused_gradient_on_gpu():
    # Only on a CUDA GPU: the compiled backward kernel that sums a shared transition's
    # cotangent, against the sequential method's loop.
    a, b, h0 = draw(10, (2, 37), shared=True)
    for method in (PallasScan(interpret=False), PallasScan(interpret=False, chunk=2, segment=4)):
        (_, hs), grads = _values_and_grads(method, a, b, h0, RotationScaling(), False)
        (_, hs_ref), grads_ref = _values_and_grads("sequential", a, b, h0, RotationScaling(), False)
        np.testing.assert_allclose(hs, hs_ref, rtol=1e-5, atol=1e-5)
        for g, g_ref in zip(grads, grads_ref, strict=True):
            np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-5)

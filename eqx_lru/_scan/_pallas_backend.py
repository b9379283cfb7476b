r"""The backend of `eqx_lru._scan._pallas_kernel`: Pallas' Triton lowering for NVIDIA GPUs,
its compiler parameters, lowering for a GPU on a machine without one, and the masked
loads and stores of partial channel tiles (also in interpret mode).

**Backend.** JAX 0.11 deprecated the Triton backend of Pallas (Mosaic GPU is its
supported NVIDIA backend; Triton users are pointed to `jax_triton`). This kernel stays on
Pallas' Triton lowering, deliberately, because on every JAX this package supports
(0.10.2 to the newest) it is the only route that

- lowers for CUDA on a machine without a GPU (`jax_triton` needs the CUDA plugin and a
  device to lower, and Python ≥ 3.12 and JAX ≥ 0.11 to install), so CI checks the GPU
  code without a GPU, and its Triton IR compiles with the `triton` package's `ptxas`
  for a register and spill check (tests/lib/test_pallas.py);
- expresses the kernel as written: masked loads and stores of partial channel tiles,
  one program per 32 channels (Mosaic GPU works on 128-thread warpgroups and its
  `plgpu.kernel` has no masked memory ops), and runs on the A100s of the paper as well
  as on Hopper (Mosaic GPU's pipelining targets sm_90+);
- batches under `jax.vmap` (pallas_call's batching rule).

The deprecation is handled explicitly rather than passed on to every user at every
lowering: the kernel's compiler parameters are a subclass of the Triton ones, registered
with Pallas' per-backend lowering hook, and that lowering calls the Triton backend with
the deprecation warning (only that one) silenced. When JAX removes the Triton backend,
`PallasScan` says so at the call (`pallas_backend_error()`), and a port to Mosaic GPU is
the way on; the other scan methods are unaffected.

On backends other than GPUs the kernel runs in Pallas interpret mode (slow; for tests).
The defaults `chunk`, `block` are chosen by compiling the kernel for sm_90 (no spilled
registers); they are not yet tuned by timing on a GPU. Pallas' Triton lowering computes
offsets in int32: one call's arrays (batch included) must hold fewer than 2**31 elements.
"""

import contextlib
import dataclasses
import warnings
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jaxtyping import Array

try:  # the Triton backend's masked memory ops (names vary across versions)
    from jax.experimental.pallas import triton as _pltriton
except ImportError:  # pragma: no cover
    _pltriton = None

try:  # the Triton lowering and Pallas' per-backend lowering hook (private, JAX >= 0.10)
    from jax._src.pallas import core as _pallas_core
    from jax._src.pallas.triton import core as _triton_core
    from jax._src.pallas.triton import pallas_call_registration as _triton_registration
except ImportError:  # pragma: no cover  (a JAX without the Triton backend)
    _pallas_core = _triton_core = _triton_registration = None

_DEPRECATION = "The Pallas Triton backend is deprecated"


def pallas_backend_error() -> str | None:
    """Why the kernel cannot be lowered for GPUs with this JAX (`None` when it can)."""
    if _triton_registration is None or not hasattr(_pallas_core, "register_lowering_rule"):
        return (
            f"this JAX ({jax.__version__}) has no Pallas Triton backend, which PallasScan's "
            "GPU kernel needs; use method='associative' on GPUs (or an older JAX)."
        )
    return None


if pallas_backend_error() is None:
    # For the type checker: the private modules were imported (the check above).
    assert _pallas_core and _triton_core and _triton_registration
    _triton_lowering = _triton_registration.pallas_call_lowering

    @dataclasses.dataclass(frozen=True)
    class _ScanCompilerParams(_triton_core.CompilerParams):
        """Triton parameters of this kernel: their own type, so that Pallas lowers the
        kernel through `_lower_scan` below."""

    def _lower_scan(ctx, *args, **params):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", _DEPRECATION, DeprecationWarning)
            return _triton_lowering(ctx, *args, **params)

    _pallas_core.register_lowering_rule(_ScanCompilerParams, _lower_scan, "gpu")
else:  # pragma: no cover
    _ScanCompilerParams = None  # pyright: ignore[reportAssignmentType]  (no Triton backend)


def compiler_params(block: int) -> Any:
    """One warp per 32 channels; no Triton software pipelining (the kernel prefetches)."""
    warps = max(1, min(8, block // 32))
    return _ScanCompilerParams(num_warps=warps, num_stages=1)


@contextlib.contextmanager
def cuda_target(device_kind: str = "NVIDIA H100"):
    """Lower for a GPU of `device_kind` on a machine without one.

    The lowering reads the GPU's compute capability from the abstract device of the
    current abstract mesh (`jax.sharding.use_abstract_mesh`). JAX >= 0.12 needs it without
    a GPU (where its reader lives moved in 0.12.1, so no version or module is probed);
    0.10.2 accepts it and assumes sm_90 anyway. Use it around
    `jax.jit(f).trace(...).lower(lowering_platforms=("cuda",))`.
    """
    device = jax.sharding.AbstractDevice(device_kind=device_kind, num_cores=None, platform="gpu")
    mesh = jax.sharding.AbstractMesh((1,), ("_",), abstract_device=device)
    with jax.sharding.use_abstract_mesh(mesh):
        yield


def use_interpret(interpret: bool | None) -> bool:
    """`interpret`, or when `None`: interpret everywhere but on GPUs."""
    return jax.default_backend() != "gpu" if interpret is None else interpret


def _interpretable(idx: tuple, size: int) -> tuple:
    """`idx` for a masked load or store in interpret mode: every index an int32 scalar and
    the whole last axis an int32 `pl.ds`, since the interpreter's discharge of masked
    loads and stores (JAX 0.10) fails on Python ints and on mixed integer dtypes (int64
    loop indices under x64). The Triton lowering takes `idx` as it is."""

    def scalar(i):
        return jnp.int32(i) if isinstance(i, int) else jnp.asarray(i).astype(jnp.int32)

    *ints, _ = idx  # the last index is always the whole (channel) axis
    return (*map(scalar, ints), pl.ds(jnp.int32(0), size))


def _masked_ops():
    """Pallas' masked `load` and `store` (`jax.experimental.pallas.triton`, JAX >= 0.10)."""
    if _pltriton is None:  # pragma: no cover
        raise RuntimeError(
            f"this JAX ({jax.__version__}) has no `jax.experimental.pallas.triton`, whose "
            "masked loads and stores PallasScan needs; use method='associative'."
        )
    return _pltriton


def masked_load(ref, idx: tuple, mask: Array | None, interpret: bool) -> Array:
    if mask is None:
        return ref[idx]
    idx = _interpretable(idx, mask.shape[0]) if interpret else idx
    return _masked_ops().load(ref.at[idx], mask=mask, other=0)


def masked_store(ref, idx: tuple, value: Array, mask: Array | None, interpret: bool) -> None:
    if mask is None:
        ref[idx] = value
        return
    idx = _interpretable(idx, mask.shape[0]) if interpret else idx
    _masked_ops().store(ref.at[idx], value, mask=mask)

"""Shared test set-up.

- Strict dtype promotion and key-reuse checking catch silent bugs early.
- Every matmul runs at `"highest"` precision, so comparisons against float64 oracles are
  exact on every backend: on NVIDIA GPUs JAX's default runs float32 matmuls as TF32
  (relative error ~3e-4). The environment variable makes subprocesses (CLI tests) do the
  same. Tests of the default precision opt out with `jax.default_matmul_precision`.
- XLA's deterministic GPU ops are on (appended to `XLA_FLAGS` before JAX starts, unless
  the user chose `--xla_gpu_deterministic_ops` themselves): GPU reductions are otherwise
  not bit-reproducible, and the trainer's resume tests run in this process, whose backend
  is up before the trainer could set the flag itself. No effect on the CPU.
- `@pytest.mark.gpu` tests are skipped, with the reason shown by `-rs`, unless JAX runs
  on a CUDA GPU.

eqx_lru is not imported here at module level, so jaxtyping's import hook (pyproject
`addopts`) still instruments it.
"""

import os

os.environ["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"  # before JAX reads it; subprocesses
if "--xla_gpu_deterministic_ops" not in os.environ.get("XLA_FLAGS", ""):
    _flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{_flags} --xla_gpu_deterministic_ops=true".strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_debug_key_reuse", True)
jax.config.update("jax_default_matmul_precision", "highest")

#: The precision every test runs under (checked by `test_gpu.py`).
TEST_MATMUL_PRECISION = "highest"


def cuda_skip_reason() -> str | None:
    """Why a CUDA-only test cannot run here, or None on a CUDA GPU."""
    backend = jax.default_backend()
    if backend != "gpu":
        return f"needs a CUDA GPU; backend is {backend}"
    version = getattr(jax.devices()[0].client, "platform_version", "")
    if "rocm" in str(version).lower():
        return f"needs a CUDA GPU; backend is gpu ({version})"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = cuda_skip_reason()
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def getkey():
    """A fresh key per call, from a fixed seed per test."""
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 1000))
    return lambda: next(keys)


def tree_allclose(x, y, *, rtol=1e-5, atol=1e-8):
    import equinox as eqx

    return eqx.tree_equal(x, y, typematch=True, rtol=rtol, atol=atol)


def max_rel_err(x, y):
    x, y = jnp.asarray(x), jnp.asarray(y)
    return float(jnp.max(jnp.abs(x - y)) / jnp.maximum(jnp.max(jnp.abs(y)), 1e-30))


@pytest.fixture(scope="module")
def restore_backend_env():
    """The LRA trainer sets XLA_FLAGS / XLA_PYTHON_CLIENT_PREALLOCATE in `os.environ`
    (harmless on the CPU); put them back for the test modules that follow."""
    names = ("XLA_FLAGS", "XLA_PYTHON_CLIENT_PREALLOCATE")
    saved = {name: os.environ.get(name) for name in names}
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

"""Shared test set-up.

- Strict dtype promotion and key-reuse checking catch silent bugs early.
- Every matmul runs at `"highest"` precision, so comparisons against float64 oracles are
  exact on every backend: on NVIDIA GPUs JAX's default runs float32 matmuls as TF32
  (relative error ~3e-4). The environment variable makes subprocesses (CLI tests) do the
  same. Tests of the default precision opt out with `jax.default_matmul_precision`.
- XLA's deterministic GPU ops are on (appended to `XLA_FLAGS` before JAX starts, unless
  the user chose `--xla_gpu_deterministic_ops` themselves): GPU reductions are otherwise
  not bit-reproducible, and the trainer's resume tests run in this process, whose backend
  is up before the trainer could set the flag itself. No effect on the CPU. LLVM's
  optimisation passes and XLA's MLIR fusion emitters are off (`_TEST_XLA_FLAGS`):
  compiling is most of the suite's time.
- `@pytest.mark.gpu` tests are skipped, with the reason shown by `-rs`, unless JAX runs
  on a CUDA GPU.
- JAX's persistent compilation cache is on for the session, the xdist workers and every
  child process the tests start (through the environment), in the user's cache folder
  (`$XDG_CACHE_HOME/eqx_lru/jax-tests`, by default `~/.cache/eqx_lru/jax-tests`), or in
  `EQX_LRU_TEST_CACHE` (`off` turns it off). On a new machine the first run is cold, and
  the children that compile the same trainer step (multi-process and command-line tests)
  read what the first compiled; a later run of the same code on the same machine reads
  every program compiled before (a key is the program's hash with JAX's version and
  options: an entry is never wrong, only unused). Programs that compile in under
  `JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS` (0.3 s here) are not written.
- Memory stays bounded: when a test module ends in a worker above
  `CLEAR_CACHES_ABOVE_GIB`, JAX's in-memory caches (compiled programs, traces) are
  cleared, and the run ends with each worker's peak resident memory.

eqx_lru is not imported here at module level, so jaxtyping's import hook (pyproject
`addopts`) still instruments it.
"""

import ctypes
import os
import pathlib
import re
import resource
import subprocess
import sys
import tempfile

os.environ["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"  # before JAX reads it; subprocesses
_USER_CACHE = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
_CACHE = os.environ.get("EQX_LRU_TEST_CACHE", os.path.join(_USER_CACHE, "eqx_lru", "jax-tests"))
if _CACHE != "off":
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.abspath(_CACHE))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
#: XLA flags the suite adds before JAX starts, unless the user's `XLA_FLAGS` names them.
#: The other four make the CPU's code generation cheap: most of the suite's time is
#: compiling small programs that then run for microseconds. LLVM runs without its `-O2`
#: passes, fusions are emitted by XLA's older elemental emitter instead of its MLIR fusion
#: emitters (docs/development.md has the times), and each program is one
#: LLVM module (no split for parallel code generation). They change how the machine code
#: is made, not the HLO (fusion, buffer assignment and so the compiled memory budgets are
#: the same); `EQX_LRU_TEST_FULL_OPT=1` leaves them out.
_TEST_XLA_FLAGS = {"--xla_gpu_deterministic_ops": "true"}
if os.environ.get("EQX_LRU_TEST_FULL_OPT", "") in ("", "0"):
    _TEST_XLA_FLAGS["--xla_backend_optimization_level"] = "0"
    _TEST_XLA_FLAGS["--xla_llvm_disable_expensive_passes"] = "true"
    _TEST_XLA_FLAGS["--xla_cpu_use_fusion_emitters"] = "false"
    _TEST_XLA_FLAGS["--xla_cpu_parallel_codegen_split_count"] = "1"


def _flags_xla_knows(flags: dict[str, str]) -> dict[str, str]:
    """`flags` less those this XLA does not know (an unknown flag in `XLA_FLAGS` aborts
    the process: newer XLA releases dropped `--xla_cpu_use_fusion_emitters`). One child
    process starts JAX with them; each flag it names as unknown is dropped and it starts
    again. Only the first process of a run pays: the xdist workers and the tests' child
    processes inherit the `XLA_FLAGS` it sets."""
    flags = dict(flags)
    for _ in range(len(flags) + 1):
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        env["XLA_FLAGS"] = " ".join(f"{k}={v}" for k, v in flags.items())
        probe = subprocess.run(
            [sys.executable, "-c", "import jax; jax.devices()"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        unknown = re.search(r"Unknown flag in XLA_FLAGS: (--[\w]+)", probe.stderr)
        if probe.returncode == 0 or unknown is None or unknown.group(1) not in flags:
            return flags
        flags.pop(unknown.group(1), None)
    return flags


_missing = {k: v for k, v in _TEST_XLA_FLAGS.items() if k not in os.environ.get("XLA_FLAGS", "")}
if _missing and "EQX_LRU_TEST_XLA_FLAGS_SET" not in os.environ:  # workers: set by the first
    for _name, _value in _flags_xla_knows(_missing).items():
        _flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{_flags} {_name}={_value}".strip()
    os.environ["EQX_LRU_TEST_XLA_FLAGS_SET"] = "1"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_debug_key_reuse", True)
jax.config.update("jax_default_matmul_precision", "highest")

#: The precision every test runs under (checked by `test_gpu.py`).
TEST_MATMUL_PRECISION = "highest"


#: A worker's resident memory (GiB) above which JAX's in-memory caches are cleared when a
#: test module ends. Below it the next module reuses what earlier ones compiled (eager ops
#: at shared shapes, jitted library functions), which clearing after every module compiled
#: again (docs/development.md has the times). In the measured runs a module added at most
#: 0.7 GiB above it: workers peaked at 2.2 GiB, within the 3 GB budget.
CLEAR_CACHES_ABOVE_GIB = 1.5


def _resident_gib() -> float | None:
    """This process's resident memory now, in GiB, or `None` where `/proc` is absent."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**30


def _return_freed_memory() -> None:
    """Hands the heap's free pages back to the system (glibc's `malloc_trim`), so that the
    resident size measures what is live; a no-op where there is no glibc."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


@pytest.fixture(autouse=True, scope="module")
def _bound_worker_memory():
    """When a module ends and the worker holds more than `CLEAR_CACHES_ABOVE_GIB` (or its
    size cannot be read), JAX's in-memory caches are cleared and the freed heap returned:
    memory stays bounded by about the threshold plus the largest module, not the sum of
    every module the worker ran (the persistent cache reloads the expensive programs)."""
    yield
    resident = _resident_gib()
    if resident is None or resident >= CLEAR_CACHES_ABOVE_GIB:
        jax.clear_caches()
        _return_freed_memory()


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        folder = tempfile.mkdtemp(prefix="eqx-lru-test-memory-")
        os.environ["EQX_LRU_TEST_MEMORY_DIR"] = folder
        config._eqx_lru_memory_dir = folder


def pytest_sessionfinish(session):
    folder = os.environ.get("EQX_LRU_TEST_MEMORY_DIR")
    if folder and os.path.isdir(folder):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        pathlib.Path(folder, worker).write_text(str(peak_kib))


def pytest_terminal_summary(terminalreporter, config):
    folder = getattr(config, "_eqx_lru_memory_dir", None)
    if folder is None:
        return
    peaks = {p.name: int(p.read_text()) for p in sorted(pathlib.Path(folder).iterdir())}
    for p in pathlib.Path(folder).iterdir():
        p.unlink()
    os.rmdir(folder)
    if peaks:
        words = ", ".join(f"{name} {kib / 2**20:.2f} GiB" for name, kib in peaks.items())
        terminalreporter.write_line(f"peak resident memory per process: {words}")


#: The ListOps size classes the experiments' tests share (`listops_data`): examples per
#: split (train, val, test) and expression lengths. One generated folder per class and
#: session, read by every test of that class (never written to: copy it to change it).
LISTOPS_SIZES = {
    "tiny": dict(sizes=(16, 4, 4), min_length=5, max_length=12),
    "small": dict(sizes=(40, 12, 12), min_length=8, max_length=30),
    "medium": dict(sizes=(96, 20, 20), min_length=10, max_length=40),
}


@pytest.fixture(scope="session")
def listops_data(tmp_path_factory):
    """`listops_data(size)`: the data root (`--data-root`) of a ListOps set of size class
    `size` (`LISTOPS_SIZES`), generated once per session and worker, seed 0."""
    roots = {}

    def get(size: str = "tiny"):
        if size not in roots:
            from experiments.lra.synthetic import write_listops

            spec = LISTOPS_SIZES[size]
            root = tmp_path_factory.mktemp(f"listops-{size}")
            write_listops(root, spec["sizes"], seed=0, min_length=spec["min_length"],
                          max_length=spec["max_length"])  # fmt: skip
            roots[size] = root
        return roots[size]

    return get


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
    """`max |x - y| / max |y|`, computed in NumPy in float64 (complex128 for complex
    arrays): no program to compile, whatever the shapes."""

    def wide(a):
        a = np.asarray(a)
        return a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)

    x, y = wide(x), wide(y)
    return float(np.max(np.abs(x - y)) / max(float(np.max(np.abs(y))), 1e-30))


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

"""The process environment a training run needs, set before JAX initialises its backend.

JAX reads `XLA_FLAGS` and `XLA_PYTHON_CLIENT_*` once, when the first device is touched
(`jax.devices()`, the first array, `jax.process_index()`...). `configure_backend` must
therefore run before any of those; importing `jax` is harmless.

- **Determinism.** GPU reductions (e.g. the scatter-adds of gradients, cuBLAS/cuDNN
  algorithm choice) are not deterministic by default, so two runs, or a run and its
  resumed copy, drift apart in the last bits. `--xla_gpu_deterministic_ops=true` makes
  XLA pick deterministic implementations. It is appended to the user's `XLA_FLAGS`
  (never replacing them, never twice, and never overriding an explicit
  `--xla_gpu_deterministic_ops=...` of the user). CPU programs are deterministic
  anyway; the flag is ignored there.
- **Allocator.** JAX preallocates 75% of a GPU's memory by default; on an 80 GB card the
  PathX step then failed with `RESOURCE_EXHAUSTED` on a 35.67 GiB allocation, and ran
  with `XLA_PYTHON_CLIENT_PREALLOCATE=false` (allocate on demand). For the tasks the
  caller's look-up `on_demand(task)` names (the LRA trainer's: `allocate_on_demand` in the
  task's `experiments/lra/tasks.py` entry) that is the default, unless the user set
  `XLA_PYTHON_CLIENT_PREALLOCATE` or `XLA_PYTHON_CLIENT_MEM_FRACTION` themselves.
- **Variables the trainer reads** (`check_environment`): the multi-process ones
  (`JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`, the timeouts
  `LRA_INIT_TIMEOUT` and `LRA_HEARTBEAT_TIMEOUT`, the SLURM/Open MPI task counts) and the
  allocator's are checked before JAX sees them; a malformed value is one error naming the
  variable, its value and what it must hold. `start_backend` touches the devices and turns
  a platform JAX cannot start (`JAX_PLATFORMS=cuda` without CUDA) into one such error.
"""

import os
from collections.abc import Callable, Mapping
from typing import Any

from .errors import UsageError

__all__ = [
    "check_environment",
    "start_backend",
    "DETERMINISTIC_FLAG",
    "backend_env",
    "configure_backend",
    "never",
    "is_out_of_memory",
    "out_of_memory_message",
    "jax_option",
]

DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops"
_ALLOCATOR_VARS = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
)


def jax_option(name: str) -> Any:
    """The value of JAX's configuration option `name` (`jax.config.<name>`, which JAX's
    type stubs do not list)."""
    import jax

    return getattr(jax.config, name)


def never(task: str) -> bool:
    """The default task look-up of `backend_env`: no task allocates on demand."""
    return False


def backend_env(
    environ: Mapping[str, str],
    *,
    deterministic: bool,
    task: str,
    on_demand: Callable[[str], bool] = never,
) -> dict[str, Any]:
    """The variables to set on top of `environ`, and a record of the choices.

    `on_demand(task)`: whether `task` allocates accelerator memory on demand by default
    (the trainer's task registry; e.g. the LRA tasks whose step needs the most memory,
    experiments/lra/MEMORY.md).

    **Returns:** `{"set": {name: value}, "record": {...}}`; `record` goes to config.json:
    `deterministic` (whether XLA's deterministic GPU ops are on), `xla_flags` (the flags
    JAX will see), `allocator` (`"on demand"`, `"preallocate"` or `"user"`).
    """
    updates: dict[str, str] = {}
    flags = environ.get("XLA_FLAGS", "")
    user_choice = next((f for f in flags.split() if f.split("=")[0] == DETERMINISTIC_FLAG), None)
    if user_choice is not None:  # the user's explicit setting wins
        deterministic = user_choice.split("=", 1)[-1].lower() in ("true", "1", DETERMINISTIC_FLAG)
    elif deterministic:
        flags = f"{flags} {DETERMINISTIC_FLAG}=true".strip()
        updates["XLA_FLAGS"] = flags
    if any(name in environ for name in _ALLOCATOR_VARS):
        allocator = "user"
    elif on_demand(task):
        updates["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        allocator = "on demand"
    else:
        allocator = "preallocate"
    record = {"deterministic": deterministic, "xla_flags": flags, "allocator": allocator}
    return {"set": updates, "record": record}


def configure_backend(
    *, deterministic: bool, task: str, on_demand: Callable[[str], bool] = never
) -> dict[str, Any]:
    """Apply `backend_env` to `os.environ`; returns its record for config.json."""
    env = backend_env(os.environ, deterministic=deterministic, task=task, on_demand=on_demand)
    os.environ.update(env["set"])
    return env["record"]


_OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory", "OOM when allocating")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is an accelerator (or host) allocation failure raised through XLA."""
    if isinstance(error, MemoryError):
        return True
    name = type(error).__name__
    if name not in ("XlaRuntimeError", "JaxRuntimeError") and not isinstance(error, RuntimeError):
        return False
    text = str(error)
    return any(marker in text for marker in _OOM_MARKERS)


def out_of_memory_message(
    error: BaseException, *, task: str, batch: int, remat: bool, devices: int | None
) -> str:
    """One paragraph: what ran out training `task` (global `batch`, `remat`), and what to
    change."""
    first = next(
        (line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__
    )
    if len(first) > 300:
        first = first[:300] + "..."
    half = f"--batch-size {batch // 2}" if batch > 1 else "a smaller --batch-size"
    use_remat = "" if remat else "--remat (recompute each block in the backward pass), "
    return (
        f"out of memory while training {task} (batch {batch}, "
        f"{'?' if devices is None else devices} device(s)): {first}. To fit, use {use_remat}"
        f"{half} (changes the recipe), or more devices (the global batch is split over them); "
        "with JAX's default preallocation also try XLA_PYTHON_CLIENT_PREALLOCATE=false. "
        "experiments/lra/MEMORY.md lists each task's memory."
    )


def _whole(low: int, high: int = 2**31 - 1):
    def check(text: str) -> str | None:
        try:
            value = int(text.strip())
        except ValueError:
            return f"a whole number >= {low}"
        return None if low <= value <= high else f"a whole number >= {low} and <= {high}"

    return check


def _address(text: str) -> str | None:
    host, _, port = text.strip().rpartition(":")
    if host and port.isdigit() and 1 <= int(port) <= 65535:
        return None
    return "HOST:PORT with a port in 1..65535 (e.g. 10.0.0.1:12345)"


def _fraction(text: str) -> str | None:
    try:
        value = float(text)
    except ValueError:
        return "a number in (0, 1]"
    return None if 0 < value <= 1 else "a number in (0, 1]"


def _boolean(text: str) -> str | None:
    ok = text.strip().lower() in ("true", "false", "1", "0", "yes", "no")
    return None if ok else "true or false"


#: The variables the trainer (or JAX for it) reads, and what each must hold; the
#: multi-process ones only matter unless --distributed off.
_CHECKS = {
    "JAX_COORDINATOR_ADDRESS": (_address, True),
    "JAX_NUM_PROCESSES": (_whole(1), True),
    "JAX_PROCESS_ID": (_whole(0), True),
    "LRA_INIT_TIMEOUT": (_whole(1), True),
    "LRA_HEARTBEAT_TIMEOUT": (_whole(1), True),
    "SLURM_NTASKS": (_whole(1), True),
    "OMPI_COMM_WORLD_SIZE": (_whole(1), True),
    "XLA_PYTHON_CLIENT_MEM_FRACTION": (_fraction, False),
    "XLA_PYTHON_CLIENT_PREALLOCATE": (_boolean, False),
}


def check_environment(environ: Mapping[str, str], *, distributed: bool) -> None:
    """Refuse a malformed variable the run would read (`distributed`: whether the
    multi-process ones are read).

    **Raises:** `UsageError` naming the first bad variable, its value and what it
    must hold."""
    for name, (check, multi) in _CHECKS.items():
        value = environ.get(name)
        if value is None or (multi and not distributed):
            continue
        expected = check(value)
        if expected is not None:
            raise UsageError(
                f"the environment variable {name}={value!r} is malformed: it must be "
                f"{expected}. Fix or unset it."
            )
    count, rank = environ.get("JAX_NUM_PROCESSES"), environ.get("JAX_PROCESS_ID")
    if distributed and count and rank and int(rank) >= int(count):
        raise UsageError(
            f"the environment variable JAX_PROCESS_ID={rank!r} must be below "
            f"JAX_NUM_PROCESSES={count!r} (processes are numbered 0 to {int(count) - 1})."
        )


def start_backend() -> list:
    """The devices of every process (`jax.devices()`), starting JAX's backend.

    **Raises:** `UsageError` if JAX cannot start the platform(s) asked for
    (`JAX_PLATFORMS`), naming them and what to do."""
    import jax

    try:
        return jax.devices()
    except (AssertionError, RuntimeError) as e:
        asked = os.environ.get("JAX_PLATFORMS") or jax_option("jax_platforms") or ""
        first = next((x.strip() for x in str(e).splitlines() if x.strip()), type(e).__name__)
        if asked:
            raise UsageError(
                f"JAX_PLATFORMS={asked!r}: JAX cannot start that platform on this machine "
                f"({first}); install its JAX plugin (e.g. jax[cuda12] for cuda) and check "
                "that the device is visible, or set JAX_PLATFORMS=cpu (or unset it to let "
                "JAX choose)."
            ) from None
        raise UsageError(
            f"JAX cannot start any device on this machine ({first}); check the JAX "
            "installation, or set JAX_PLATFORMS=cpu."
        ) from None

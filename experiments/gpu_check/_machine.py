"""The machine the check runs on: JAX's backend and devices (asked in a child process, so
this one never imports JAX or holds the GPU), `nvidia-smi`'s names and driver, the commit,
and the environment of every child process."""

import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["REPO", "child_env", "probe", "no_cuda_reason", "commit"]

REPO = Path(__file__).resolve().parents[2]
DETERMINISTIC = "--xla_gpu_deterministic_ops=true"

_PROBE = """
import json, jax, jaxlib
devices = jax.devices()
print(json.dumps({
    "backend": jax.default_backend(),
    "jax": jax.__version__,
    "jaxlib": jaxlib.__version__,
    "platform_version": str(getattr(devices[0].client, "platform_version", "")),
    "devices": [d.device_kind for d in devices],
    "matmul_precision": str(jax.config.jax_default_matmul_precision or "default"),
}))
"""


def child_env(
    *, dry: bool, cache: Path | None = None, deterministic: bool = False, **extra: str
) -> dict[str, str]:
    """The environment of a child process: the repository importable, allocation on demand
    (one process at a time, and `peak_bytes_in_use` then counts what was used, not a
    preallocated pool), the CPU for a dry run, a persistent compilation cache shared by
    the children of one run (`cache`), XLA's deterministic GPU ops if asked (the trainer's
    default, so the memory part measures the trainer's program)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if dry:
        env["JAX_PLATFORMS"] = "cpu"
    if cache is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
    if deterministic and "--xla_gpu_deterministic_ops" not in env.get("XLA_FLAGS", ""):
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {DETERMINISTIC}".strip()
    env.update(extra)
    return env


def _nvidia_smi() -> list[str]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    query = [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def commit() -> str:
    """The checkout's commit (`+dirty` with uncommitted changes), or "unknown"."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git checkout)"
    return head + ("+dirty" if dirty else "")


def probe(env: Mapping[str, str]) -> dict[str, Any]:
    """JAX's backend, versions and devices, `nvidia-smi`'s lines, Python, the commit."""
    info: dict[str, Any] = {"python": platform.python_version(), "commit": commit()}
    try:
        result = subprocess.run(
            [sys.executable, "-c", _PROBE],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        lines = result.stdout.strip().splitlines()
        if result.returncode == 0 and lines:
            info.update(json.loads(lines[-1]))
        else:
            why = (result.stderr.strip().splitlines() or ["?"])[-1]
            info.update(backend="unavailable", error=why)
    except subprocess.TimeoutExpired:
        info.update(backend="unavailable", error="JAX did not start within 300 s")
    info["nvidia_smi"] = _nvidia_smi()
    return info


def no_cuda_reason(info: Mapping[str, Any]) -> str | None:
    """Why this machine cannot be checked (one line), or None on a CUDA GPU."""
    backend = info.get("backend")
    if backend == "gpu" and "rocm" not in str(info.get("platform_version", "")).lower():
        return None
    where = f"JAX's backend is {backend}" + (f" ({info['error']})" if info.get("error") else "")
    if info.get("nvidia_smi"):
        return (
            f"no CUDA GPU for JAX: {where}, though nvidia-smi sees {info['nvidia_smi'][0]}; "
            'install JAX for CUDA (pip install -U "jax[cuda12]") and run again.'
        )
    return f"no CUDA GPU: {where}; nothing to check here (--dry-run runs the check on the CPU)."

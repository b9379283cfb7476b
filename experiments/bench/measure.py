"""Timing and memory of one case, in this process or in a child process.

A case is a JSON-able dict: `impl`, `mode` (`"fwd"` or `"grad"`), `H`, `N`, `L`, `B`, `reps`,
optionally `unroll` (the sequential block size). `python -m experiments.bench.measure CASE`
runs one case and prints one JSON line with the result, including the child's peak RSS
(`VmHWM`), so that each case's peak memory is its own and is freed when it ends.

- time: median (and min) of `reps` calls of the compiled function after one warm-up call;
- `temp_mb`: XLA's compiled temp buffers, `compiled.memory_analysis().temp_size_in_bytes`;
- `peak_mb`: the process's peak resident set size on the CPU, the device's peak memory
  (`memory_stats()`) on GPUs (children only).

"grad" is the gradient of the mean output with respect to all parameters and the input.
"""

import json
import math
import os
import sys
import time

import numpy as np


def _peak_rss_mb() -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def data(case):
    import jax

    key = jax.random.PRNGKey(0)
    return jax.random.normal(jax.random.fold_in(key, 1), (case["B"], case["L"], case["H"]))


def compiled_function(case):
    import jax
    import jax.numpy as jnp

    from . import impls

    fn, params = impls.make(
        case["impl"], case["H"], case["N"], key=jax.random.PRNGKey(0), unroll=case.get("unroll")
    )
    batched = jax.vmap(fn, in_axes=(None, 0))
    if case["mode"] == "fwd":
        f = batched
    else:
        f = jax.grad(lambda p, u: jnp.mean(batched(p, u)), argnums=(0, 1))
    u = data(case)
    start = time.perf_counter()
    compiled = jax.jit(f).lower(params, u).compile()
    return compiled, params, u, time.perf_counter() - start


def run_case(case) -> dict:
    """Measure one case in this process."""
    import jax

    if case.get("impl") == "data_only":
        jax.block_until_ready(data(case))
        return {"case": case}
    compiled, params, u, compile_s = compiled_function(case)
    analysis = compiled.memory_analysis()
    temp = math.nan if analysis is None else analysis.temp_size_in_bytes
    jax.block_until_ready(compiled(params, u))  # warm-up
    times = []
    for _ in range(case["reps"]):
        start = time.perf_counter()
        jax.block_until_ready(compiled(params, u))
        times.append(time.perf_counter() - start)
    return {
        "case": case,
        "ms": 1e3 * float(np.median(times)),
        "min_ms": 1e3 * float(np.min(times)),
        "times_ms": [1e3 * t for t in times],
        "temp_mb": temp / 2**20,
        "compile_s": compile_s,
    }


def run_child(case, *, env_extra=None, timeout=1800) -> dict:
    """Measure one case in a fresh Python process; adds its peak RSS."""
    import subprocess

    env = dict(os.environ, **(env_extra or {}))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.bench.measure", json.dumps(case)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"case": case, "error": (proc.stderr or proc.stdout).strip().splitlines()[-5:]}
    return json.loads(lines[-1])


def _device_peak_mb() -> float | None:
    """Peak device memory where the backend reports it (GPUs), else None."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**20


def main(argv):
    import jax

    case = json.loads(argv[1])
    result = run_case(case)
    # The process's peak RSS on the CPU, the device's peak memory elsewhere.
    result["peak_mb"] = _peak_rss_mb() if jax.default_backend() == "cpu" else _device_peak_mb()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv)

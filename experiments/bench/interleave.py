"""Time several implementations in ONE process, in interleaved rounds.

On a shared machine the load changes from minute to minute, so times measured in separate
processes at different moments can disagree by more than the differences being measured.
Here every round runs each variant once, back to back, and ratios are taken within each
round; their median over rounds is robust to load changes.

A spec: `{"variants": [{"impl": ..., "unroll": optional}, ...], "mode", "H", "N", "L", "B",
"rounds"}`. `python -m experiments.bench.interleave SPEC` prints one JSON line with, per
variant name (`impl`, or `impl@unroll`), the times of every round and XLA's temp memory.
"""

import json
import math
import sys
import time

import numpy as np


def name(variant) -> str:
    return variant["impl"] + (f"@{variant['unroll']}" if variant.get("unroll") else "")


def run(spec, *, deadline: float | None = None) -> dict:
    """Compile every variant of `spec`, then time them in `spec["rounds"]` interleaved
    rounds. With `deadline` (a `time.time()`), variants not yet compiled by then are
    skipped (listed under `"skipped"`; the first is always compiled) and no round starts
    after it (the first always runs)."""
    import jax

    from .measure import compiled_function

    compiled, temp, compile_s, skipped, data = {}, {}, {}, [], None
    for variant in spec["variants"]:
        if deadline is not None and compiled and time.time() >= deadline:
            skipped.append(name(variant))
            continue
        case = {k: v for k, v in spec.items() if k not in ("variants", "rounds")}
        case = dict(case, impl=variant["impl"], unroll=variant.get("unroll"))
        fn, params, u, compile_s[name(variant)] = compiled_function(case)
        data = u if data is None else data  # one input array for all (the same values)
        jax.block_until_ready(fn(params, data))  # warm-up
        compiled[name(variant)] = (fn, params)
        analysis = fn.memory_analysis()
        temp[name(variant)] = math.nan if analysis is None else analysis.temp_size_in_bytes / 2**20
    times = {n: [] for n in compiled}
    for round_ in range(spec["rounds"]):
        if deadline is not None and round_ and time.time() >= deadline:
            break
        for n, (fn, params) in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(params, data))
            times[n].append(1e3 * (time.perf_counter() - start))
    result = {
        "spec": spec,
        "ms": {n: float(np.median(t)) for n, t in times.items()},
        "times_ms": times,
        "temp_mb": temp,
        "compile_s": compile_s,
    }
    return dict(result, skipped=skipped) if skipped else result


def ratio(result, name, ref) -> float | None:
    """Median over rounds of the per-round time ratio `name / ref`."""
    times = result["times_ms"] if result else {}
    if name not in times or ref not in times:
        return None
    return float(np.median(np.asarray(times[name]) / np.asarray(times[ref])))


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)

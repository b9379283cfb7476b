"""`STREAMING-<backend>.md`: the streaming benchmark's results (`streaming.measure`) as
Markdown, one function per section."""

import numpy as np

__all__ = ["render"]


def _intro(grid, results, info) -> list[str]:
    from . import report

    return [
        f"# Streaming a deep LRU on `{info['backend']}`",
        "",
        "Written by `python -m experiments.bench.streaming` (also part of `./dev.sh bench`); see",
        f"its docstring. Model: depth {grid['depth']}, H = {grid['d_model']}, "
        f"N = {grid['d_state']}, ListOps vocabulary,",
        "batch norm, mean pooling, inference mode, float32. Each time is the median of",
        f"{grid['tokens']} single-token calls from Python (dispatch included) of a stream",
        "advanced to the given position; the streams of one configuration take turns token by",
        "token. 'wall' is elapsed time, 'CPU' the process's CPU time for the call (all its",
        "threads): on a busy machine the wall time includes waiting for a core, the CPU time",
        "approximates the time on an idle core.",
        "",
        "## Machine",
        "",
        *report.machine_lines(info, end_load=results["load_end"]),
        "- The machine was shared with other jobs during the run (other test suites on its",
        "  two cores), so absolute times are noisy upwards; the load averages say how busy it was.",
        "",
    ]


def _heads(grid) -> tuple[list[str], str, str]:
    positions = [str(p) for p in grid["positions"]]
    head = " | ".join(f"ms/token at {int(p):,}" for p in positions)
    cpu_head = " | ".join(f"CPU ms at {int(p):,}" for p in positions)
    return positions, head, cpu_head


def _step_lines(grid, results) -> list[str]:
    positions, head, cpu_head = _heads(grid)
    lines = [
        "## The jitted step (`LRUModel.step`, `jax.vmap` over the streams)",
        "",
        f"| form | batch | wall {head} | {cpu_head} | tokens/s (wall) | carry per stream "
        "| XLA temp | RSS before → after |",
        "|---|---|" + "---|" * (2 * len(positions)) + "---|---|---|---|",
    ]
    for r in results["jax_step"]:
        ms = [r["ms"][p] for p in positions]
        rate = r["batch"] / (np.median(ms) / 1e3)
        rss = (
            f"{r['rss_before_mb']:,.0f} → {r['rss_after_mb']:,.0f} MB"
            if r["rss_before_mb"] is not None
            else "—"
        )
        temp = "—" if r["temp_kb"] is None else f"{r['temp_kb']:,.0f} KB"
        lines.append(
            f"| {r['form']} | {r['batch']} | "
            + " | ".join(f"{m:.3f}" for m in ms + [r["cpu_ms"][p] for p in positions])
            + f" | {rate:,.0f} | {r['carry_bytes'] / 1024:,.1f} KB | {temp} | {rss} |"
        )
    return lines


def _parallel_lines(results) -> list[str]:
    lines = [
        "",
        "## Re-running the parallel call on the prefix (batch 1)",
        "",
        "What each new token costs a model without a recurrent state: the whole-sequence call on",
        "the prefix so far (its time grows with the prefix, and so does its XLA temp).",
        "",
        "| form | prefix length | ms per call (= per new token) | XLA temp | × the batch-1 step |",
        "|---|---|---|---|---|",
    ]
    step1 = {
        r["form"]: np.median(list(r["ms"].values())) for r in results["jax_step"] if r["batch"] == 1
    }
    for r in results["parallel"]:
        temp = "—" if r["temp_kb"] is None else f"{r['temp_kb'] / 1024:,.1f} MB"
        lines.append(
            f"| {r['form']} | {r['length']:,} | {r['ms']:,.1f} | {temp} | "
            f"{r['ms'] / step1[r['form']]:,.1f}× |"
        )
    return lines


def _onnx_lines(grid, results) -> list[str]:
    positions, head, cpu_head = _heads(grid)
    lines = [
        "",
        "## onnxruntime's step beside JAX's",
        "",
        "The model exported by `python -m experiments.export --format onnx --step` (real form,",
        "batch norm folded into one scale and shift, constants folded), onnxruntime on the CPU",
        "with one intra-op thread; JAX's real-form row above for comparison.",
        "",
        f"| runtime | batch | wall {head} | {cpu_head} | tokens/s (wall) |",
        "|---|---|" + "---|" * (2 * len(positions)) + "---|",
    ]
    jax_real = {r["batch"]: r for r in results["jax_step"] if r["form"] == "real"}
    for r in results["onnx_step"]:
        if "error" in r:
            lines.append(f"| onnxruntime | {r['batch']} | {r['error']} |")
            continue
        for name, row in (("onnxruntime", r), ("JAX (jit)", jax_real.get(r["batch"]))):
            if row is None:
                continue
            ms = [row["ms"][p] for p in positions]
            lines.append(
                f"| {name} | {r['batch']} | "
                + " | ".join(f"{m:.3f}" for m in ms + [row["cpu_ms"][p] for p in positions])
                + f" | {r['batch'] / (np.median(ms) / 1e3):,.0f} |"
            )
    return lines


def _goal_lines(results) -> list[str]:
    batch1 = [r for r in results["jax_step"] if r["batch"] == 1]
    best1 = min(np.median(list(r["ms"].values())) for r in batch1)
    best1_cpu = min(np.median(list(r["cpu_ms"].values())) for r in batch1)
    flat = max(max(r["ms"].values()) / min(r["ms"].values()) for r in results["jax_step"])
    flat_cpu = max(
        max(r["cpu_ms"].values()) / min(r["cpu_ms"].values()) for r in results["jax_step"]
    )
    return [
        "",
        "## Goals",
        "",
        f"- Step ≤ 1 ms at batch 1: wall {best1:.3f} ms, CPU {best1_cpu:.3f} ms per token (the "
        "better form, median over the windows): "
        + (
            "met."
            if best1 <= 1
            else f"{'met in CPU time, ' if best1_cpu <= 1 else ''}not met in "
            "wall time on this busy machine; to be re-measured on an idle one."
        ),
        f"- Time per token independent of the position: the largest ratio between the windows "
        f"of one configuration is {flat:.2f} in wall time, {flat_cpu:.2f} in CPU time. The "
        "step's work and memory are fixed by the shapes (constant carry and XLA temp above);",
        "  what remains is the noise of the shared machine.",
        "",
    ]


def render(grid, results, info) -> str:
    lines = _intro(grid, results, info) + _step_lines(grid, results)
    lines += _parallel_lines(results) + _onnx_lines(grid, results) + _goal_lines(results)
    return "\n".join(lines)

"""`RESULTS-<backend>.md`: the benchmark's results (a `runner.Runner`'s data) as Markdown,
one function per section; the tables themselves are `report.py`'s."""

from . import impls, report, traffic
from .runner import model_specs, spec_key

__all__ = ["render"]


def _grid_entry(runner, mode, H, N, L):
    for result in runner.data["grid"].values():
        s = result.get("spec", {})
        if (s.get("mode"), s.get("H"), s.get("N"), s.get("L")) == (mode, H, N, L):
            return result
    return None


def _memory_entry(runner, impl, mode, H, N, L):
    for result in runner.data["memory"].values():
        c = result.get("case", {})
        if (c.get("impl"), c.get("mode"), c.get("H"), c.get("N"), c.get("L")) == (
            impl,
            mode,
            H,
            N,
            L,
        ):
            return result
    return None


def _intro(grid, info, *, name, end_load) -> list[str]:
    backend = info["backend"]
    B, N = grid["B"], grid["N"]
    peak_what = "peak MB" + (" (RSS)" if backend == "cpu" else " (device memory)")
    command = "python -m experiments.bench" + ("" if name == "full" else f" --grid {name}")
    return [
        f"# eqx_lru benchmark on `{backend}`" + ("" if name == "full" else f" ({name} grid)"),
        "",
        f"Written by `{command}`. float32 unless",
        f"said, batch {B} via `jax.vmap`, N = {N} complex modes, "
        "the parameters of one key in every",
        "row. 'fwd+bwd' is the gradient of the mean output with respect to all parameters and the",
        "input. Times are under `jax.jit` after a warm-up call; all implementations of one",
        f"configuration run in ONE process, in {grid['rounds']} interleaved rounds "
        "of one call each",
        f"({grid['key_rounds']} for the key configuration): "
        "'ms' is the median over rounds, '×' the",
        "median over rounds of the ratio within the round — "
        "robust to the load changing on a shared",
        "machine. 'temp' is XLA's `compiled.memory_analysis().temp_size_in_bytes`; "
        f"'{peak_what}' is measured in a separate process that ran only that case (at the "
        "longest length" + ("" if grid["peak_rss"] else "; not measured in this grid") + ").",
        *_method_note(backend),
        "",
        "## Machine",
        "",
        *report.machine_lines(info, end_load=end_load),
        "",
        "The machine may be shared (other jobs running), so absolute times are noisy: compare",
        "the ratios.",
        "",
    ]


def _key_sections(grid, runner, info, peaks, names, *, name) -> list[str]:
    method = impls.default_method()
    B = grid["B"]
    kH, kN, kL = grid["key"]
    key_entry = _grid_entry(runner, "grad", kH, kN, kL)
    lines = [
        f"## Key configuration: fwd+bwd, B={B}, H={kH}, N={kN}, L={kL}",
        "",
        f'Bold: the default method on this backend (`method="auto"` → `"{method}"`).',
        "",
        *report.key_table(key_entry, peaks, names, mode="grad", H=kH, default_method=method),
        "",
        *report.target_checks(key_entry, default_method=method),
        "",
        f"## Bytes moved (a model) beside the time, fwd+bwd, B={B}, H={kH}, N={kN}, L={kL}",
        "",
        "Modelled device-memory traffic of one call (`experiments/bench/traffic.py`: passes over",
        "the sequence-long arrays each method makes) and the time it takes at the device's peak",
        "bandwidth: a memory-bound layer's floor. 'measured / model' near 1 is a method at the",
        "bandwidth limit; far above 1, latency, launches or compute dominate.",
        "",
        *traffic.traffic_table(
            key_entry, names, mode="grad", B=B, H=kH, N=kN, L=kL, device_kind=info["device"]
        ),
        "",
    ]
    if name == "quick":
        lines += [
            "(Quick grid: tiny sizes, dominated by dispatch; the targets concern the full grid.)",
            "",
        ]
    return lines


def _grid_sections(grid, runner, peaks, names) -> list[str]:
    lines = []
    for mode, title in (("grad", "fwd+bwd"), ("fwd", "fwd")):
        for H in grid["H"]:
            entries = {L: _grid_entry(runner, mode, H, grid["N"], L) for L in grid["L"]}
            lines += [f"## {title}, H={H}, N={grid['N']}", ""]
            lines += report.grid_table(entries, peaks, names, mode=mode, H=H) + [""]
    return lines


def _data_rss_lines(grid, runner) -> list[str]:
    largest = grid["L"][-1]
    data_rss = [
        e
        for e in (_memory_entry(runner, "data_only", "-", H, grid["N"], largest) for H in grid["H"])
        if e and e.get("peak_mb")
    ]
    if not data_rss:
        return []
    sizes = ", ".join(
        f"{e['peak_mb']:,.0f} MB (H={e['case']['H']}, L={e['case']['L']})" for e in data_rss
    )
    return [f"Peak RSS of a process that only imports JAX and makes the data: {sizes}.", ""]


def _unroll_lines(grid, runner) -> list[str]:
    import eqx_lru

    unroll = {r["spec"]["mode"]: r for r in runner.data["unroll"].values() if "spec" in r}
    if not unroll:
        return []
    kH, kN, kL = grid["key"]
    default = eqx_lru.Sequential().unroll
    return [
        f"## Sequential block size, RealLRU, H={kH}, N={kN}, L={kL}",
        "",
        "Steps per iteration of the in-place `fori_loop` (`eqx_lru.Sequential(unroll=k)`, "
        f"default {default}); interleaved in one process, ratio to the default.",
        "",
        *report.unroll_table(unroll, default=default),
        "",
    ]


def _hugetlb_lines(grid, runner) -> list[str]:
    if not runner.data["hugetlb"]:
        return []
    kH, kN, _ = grid["key"]
    h = grid["hugetlb"]
    return [
        f"## glibc huge pages (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`), fwd+bwd, H={kH}, N={kN}",
        "",
        f"CPU only. {h['pairs']} pairs of processes (default malloc, then huge "
        f"pages), {h['reps']} timed calls each; 'ratio' is the median of the "
        "per-pair ratios.",
        "",
        *report.hugetlb_table(list(runner.data["hugetlb"].values())),
        "",
    ]


def _step_precision_lines(grid, runner) -> list[str]:
    step = next(iter(runner.data["step"].values()), [])
    precision = next(iter(runner.data["precision"].values()), [])
    return [
        "## Step (RNN) mode: per-token latency of `layer.step` under `jax.jit`, batch 1",
        "",
        "(H, N) of the paper's LRA models (Table 9). 'jitted call' is one Python call per token,",
        "dispatch included; 'in-graph' is the step inside one jitted `lax.scan` over "
        f"{grid['step']['tokens']} tokens.",
        "",
        *report.step_table(step if isinstance(step, list) else []),
        "",
        "## Precision: error against the same layer in float64",
        "",
        "Relative error (‖x − x₆₄‖ / ‖x₆₄‖) of the output and of the gradient of `mean(w ⊙ y)`",
        f"(w random), batch {grid['precision']['batch']}. `real bf16` is",
        "`RealLRU(..., compute_dtype=jnp.bfloat16)`: bfloat16 operands of the projections and",
        "stored states, float32 accumulation and carry. The complex form has no bfloat16 variant",
        "(there is no bfloat16 complex dtype).",
        "",
        *report.precision_table(precision if isinstance(precision, list) else []),
        "",
    ]


def render(grid, runner, info, *, name, end_load) -> str:
    """The whole results page."""
    backend = info["backend"]
    names = impls.variants(backend, autodiff=grid["autodiff"])
    largest = grid["L"][-1]
    peaks = {
        (impl, mode, H): (_memory_entry(runner, impl, mode, H, grid["N"], largest) or {}).get(
            "peak_mb"
        )
        for impl in names
        for mode in ("fwd", "grad")
        for H in grid["H"]
    }
    lines = _intro(grid, info, name=name, end_load=end_load)
    lines += _key_sections(grid, runner, info, peaks, names, name=name)
    lines += _grid_sections(grid, runner, peaks, names)
    lines += _model_lines(runner, backend, model_specs(grid))
    lines += _data_rss_lines(grid, runner)
    lines += _unroll_lines(grid, runner)
    lines += _hugetlb_lines(grid, runner)
    lines += _step_precision_lines(grid, runner)
    return "\n".join(lines)


def _method_note(backend) -> list[str]:
    if backend != "cpu":
        return []
    return [
        "",
        "`eqx_lru.PallasScan` (the GPU kernel) is left out on the CPU: there it runs in Pallas",
        "interpret mode, an emulator for testing, whose times mean nothing.",
    ]


def _model_lines(runner, backend, specs) -> list[str]:
    rows = []
    for spec in specs:
        result = runner.data["model"].get(spec_key(spec))
        if result is not None:
            rows.append(result if "spec" in result else dict(result, spec=spec))
    if not rows:
        return []
    peak = (
        "peak device memory (`memory_stats()`)"
        if backend != "cpu"
        else "no peak device memory (the CPU backend reports none)"
    )
    return [
        "## One training step per LRA task (Table 9 sizes)",
        "",
        "The trainer's own jitted step (`experiments.lra.steps.compile_train_step`, settings of",
        "`train.py --task T --core C --form F`): depth, H, N, batch and full length of the paper's",
        "Table 9, on example batches of the official shapes. 'temp' is XLA's scratch memory of the",
        "compiled step (compile only: nothing of that size is allocated, so it is reported even",
        "where the step would not fit); 'steps/s' is the median of timed steps after a warm-up",
        f"(— where not timed); {peak}.",
        "",
        *report.model_table(rows),
        "",
    ]

"""The Markdown of parts (b), (c) and (d) of the report, drawn from their records (no JAX
here: the check's own process never imports it)."""

from collections.abc import Mapping
from typing import Any

from experiments.bench.interleave import ratio

from ._listops import MARGIN, compare

__all__ = ["layer_body", "memory_body", "listops_body"]

_MODES = {"grad": "fwd+bwd", "fwd": "fwd"}
_TRAFFIC = (
    "**Bytes moved per call** are a model (`experiments/bench/traffic.py`), not a counter: "
    "every sequence-long array read or written once per pass, with U = B·L·H·4 bytes (an "
    "input-sized array) and X = B·L·2N·s (a state-sized one, s = 4, or 2 for bfloat16 "
    "storage). Projections: 3U + 2X forward, 3X + 4U more backward; the scan adds 2X "
    "forward (sequential, Pallas; +X for the Pallas two-level scan above 2048 steps), 8X "
    "(associative), and backward 4X (sequential), 3X (Pallas), 10X (associative); App. A "
    "8X forward and 16X more for its autodiff. 'GB/s' is that model over the measured "
    "time; 'of peak' divides it by the card's nominal peak bandwidth."
)


def _f(value: float | None, fmt: str, missing: str = "–") -> str:
    return missing if value is None else format(value, fmt)


def _layer_rows(spec: Mapping[str, Any], bandwidth: float | None) -> list[str]:
    rows = []
    for impl, ms in spec["ms"].items():
        moved = spec.get("bytes", {}).get(impl)
        rate = None if moved is None else moved / (ms * 1e-3) / 1e9
        share = None if rate is None or bandwidth is None else rate / bandwidth
        rows.append(
            f"| {spec['spec']['L']} | {impl} | {ms:.3g} | "
            f"{_f(ratio(spec, impl, 'app_a'), '.2f')} | {_f(ratio(spec, impl, 'floor'), '.2f')} "
            f"| {_f(moved and moved / 1e9, '.3g')} | {_f(rate, '.3g')} | {_f(share, '.1%')} "
            f"| {spec['temp_mb'][impl]:.3g} | {spec.get('compile_s', {}).get(impl, 0):.1f} |"
        )
    for impl in spec.get("skipped", []):
        rows.append(f"| {spec['spec']['L']} | {impl} | not run: the part's time was spent |||||||")
    return rows


def layer_body(data: Mapping[str, Any]) -> list[str]:
    bandwidth = data.get("bandwidth_gbs")
    peak = (
        f"nominal peak bandwidth of `{data.get('device_kind')}`: {bandwidth:,.0f} GB/s"
        if bandwidth
        else f"no nominal peak bandwidth known for `{data.get('device_kind', '-')}`"
    )
    lines = [
        f"Medians of interleaved rounds, all variants of one configuration in one process; "
        f"`auto` is `{data.get('default_method', '-')}` here; {peak}.",
        "",
        _TRAFFIC,
    ]
    specs = data.get("specs", [])
    for mode, title in _MODES.items():
        mine = [s for s in specs if s["spec"]["mode"] == mode]
        if not mine:
            continue
        s0 = mine[0]["spec"]
        lines += [
            "",
            f"### {title}, B = {s0['B']}, H = {s0['H']}, N = {s0['N']}",
            "",
            "| L | implementation | ms | × App. A | × floor | GB moved (model) | GB/s "
            "| of peak | XLA temp MB | compile s |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for spec in mine:
            lines += _layer_rows(spec, bandwidth)
    skipped = data.get("skipped_specs", [])
    if skipped:
        cut = ", ".join(f"{_MODES[m]} L = {L}" for m, L in skipped)
        lines += ["", f"Not run (the part's time was spent): {cut}."]
    return lines


def memory_body(data: Mapping[str, Any]) -> list[str]:
    lines = [
        "The trainer's jitted step of the longest task (Table 9 settings, "
        "`experiments.lra.memory.table9`), "
        "compiled and run twice in a process of its own per form (one for both in the dry run); "
        "'peak' is the device's "
        '`memory_stats()["peak_bytes_in_use"]` after the steps (allocation on demand), '
        "beside XLA's compile-time sizes (`memory_analysis()`: temp, arguments, outputs).",
        "",
        "| task | form | remat | batch × L | depth, H, N | XLA temp GB | XLA args GB "
        "| XLA total GB | **peak GB** | peak ÷ XLA total | step s | compile s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data.get("steps", []):
        total = r["xla_temp_gb"] + r["xla_args_gb"] + r["xla_out_gb"]
        peak = r.get("peak_gb")
        bidir = ", bidir." if r.get("bidirectional") else ""
        lines.append(
            f"| {r.get('task', '-')} | {r['form']} | {'on' if r['remat'] else 'off'} "
            f"| {r['batch']} × {r['length']} "
            f"| {r['depth']}, {r['H']}, {r['N']}{bidir} | {r['xla_temp_gb']:.3g} "
            f"| {r['xla_args_gb']:.3g} | {total:.3g} "
            f"| **{_f(peak, '.3g', 'not reported')}** | {_f(peak and peak / total, '.2f')} "
            f"| {r['step_s']:.3g} | {r['compile_s']:.0f} |"
        )
    notes = [f"- {e['form']}: {e['error']}" for e in data.get("errors", [])]
    notes += [f"- {f}: not run (the part's time was spent)" for f in data.get("skipped", [])]
    return lines + ([""] + notes if notes else [])


def listops_body(data: Mapping[str, Any]) -> list[str]:
    ref = data.get("reference", {})
    then = {int(k): v for k, v in ref.get("val", {}).items()}
    now = {int(k): v for k, v in data.get("val", {}).items()}
    cmp = compare(now, then)
    lines = [
        f"Validation accuracy now and in the earlier H100 run (`{ref.get('source', '-')}`: "
        f"eqx_lru 0.1, the same settings and 32k-step schedule; its test accuracy "
        f"{_f(ref.get('test'), '.1%')}).",
        "",
        "| step | val accuracy now | then (H100, 0.1) | now − then |",
        "|---|---|---|---|",
    ]
    for step, a, b, diff in cmp["rows"]:
        lines.append(f"| {step} | {_f(a, '.1%')} | {_f(b, '.1%')} | {_f(diff, '+.1%')} |")
    lines.append("")
    if cmp["below"]:
        steps = ", ".join(map(str, cmp["below"]))
        lines.append(
            f"**FLAG: this run is more than {MARGIN:.0%} below the reference at step(s) "
            f"{steps}: a regression in learning?**"
        )
    elif cmp["common"]:
        lines.append(
            f"Not below the reference by more than {MARGIN:.0%} at any of the "
            f"{cmp['common']} step(s) both curves have."
        )
    else:
        first = min(then, default=None)
        lines.append(f"No step in common with the reference yet (its first is step {first}).")
    results, last = data.get("results", {}), data.get("last_train") or {}
    rate = results.get("steps_per_sec", last.get("steps_per_sec"))
    lines.append(
        f"Trainer: {results.get('status', 'running or killed')}, step "
        f"{results.get('step', last.get('step', '-'))}, {_f(rate, '.1f')} steps/s; waited "
        f"{_f(data.get('data_s'), '.0f')} s for the data (drawn in the background)."
    )
    return lines

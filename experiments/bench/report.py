"""The machine's description, the Markdown tables of RESULTS-<backend>.md, and the check that
the files a run writes can be written (before it measures)."""

import argparse
import datetime
import math
import os
import platform
import subprocess

from .impls import label

BASELINE, FLOOR = "app_a", "floor"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def machine_info() -> dict:
    import equinox
    import jax
    from jaxlib import version as jaxlib_version

    cpuinfo = _read("/proc/cpuinfo")
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in cpuinfo.splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    cache = next(
        (
            line.split(":", 1)[1].strip()
            for line in cpuinfo.splitlines()
            if line.startswith("cache size")
        ),
        "?",
    )
    mem_kb = next(
        (
            int(line.split()[1])
            for line in _read("/proc/meminfo").splitlines()
            if line.startswith("MemTotal")
        ),
        0,
    )
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled").strip() or "?"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    device = jax.devices()[0]
    return {
        "cpu": model,
        "cache": cache,
        "cores": os.cpu_count(),
        "ram_gb": mem_kb / 2**20,
        "thp": thp,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib_version.__version__,
        "equinox": equinox.__version__,
        "backend": jax.default_backend(),
        "matmul_precision": getattr(jax.config, "jax_default_matmul_precision", None) or "default",
        "device": getattr(device, "device_kind", str(device)),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "load": os.getloadavg(),
    }


def _fmt_ms(ms: float) -> str:
    return f"{ms:,.0f}" if ms >= 10 else f"{ms:.2f}"


def _fmt_mb(mb) -> str:
    return "—" if mb is None else f"{mb:,.0f}" if mb >= 10 else f"{mb:.1f}"


def _is_default(impl: str, default_method: str) -> bool:
    return impl in (f"complex-{default_method}", f"real-{default_method}")


def key_table(entry, peaks, names, *, mode, H, default_method) -> list[str]:
    from .interleave import ratio

    if not entry or "times_ms" not in entry:
        return ["(the key configuration did not run)"]
    lines = [
        "| implementation | ms | × App. A | × floor | XLA temp MB | temp × App. A | peak MB |",
        "|---|---|---|---|---|---|---|",
    ]
    base_temp = entry["temp_mb"].get(BASELINE)
    for impl in names:
        if impl not in entry["ms"]:
            continue
        b = "**" if _is_default(impl, default_method) else ""
        temp = entry["temp_mb"][impl]
        lines.append(
            f"| {b}{label(impl)}{b} | {_fmt_ms(entry['ms'][impl])} | "
            f"{b}{ratio(entry, impl, BASELINE):.2f}{b} "
            f"| {ratio(entry, impl, FLOOR):.2f} | {_fmt_mb(temp)} "
            f"| {temp / base_temp:.2f} | {_fmt_mb(peaks.get((impl, mode, H)))} |"
        )
    return lines


def _ratio(entry, name: str, ref: str) -> float:
    """`interleave.ratio`, NaN where a row is missing."""
    from .interleave import ratio

    value = ratio(entry, name, ref)
    return math.nan if value is None else value


def target_checks(entry, *, default_method) -> list[str]:
    ratio = _ratio
    cplx, real = f"complex-{default_method}", f"real-{default_method}"
    if not entry or not all(k in entry.get("ms", {}) for k in (BASELINE, FLOOR, cplx, real)):
        return ["(not all rows of the key configuration ran)"]
    temp = entry["temp_mb"]
    c_base, r_base = ratio(entry, cplx, BASELINE), ratio(entry, real, BASELINE)
    c_floor, r_floor = ratio(entry, cplx, FLOOR), ratio(entry, real, FLOOR)
    r_c = ratio(entry, real, cplx)
    c_temp, r_temp = temp[cplx] / temp[BASELINE], temp[real] / temp[BASELINE]
    r_c_temp = temp[real] / temp[cplx]
    mark = lambda ok: "met" if ok else "**missed**"  # noqa: E731
    checks = [
        (
            "time ≤ 0.30× App. A, both forms",
            f"complex {c_base:.2f}×, real {r_base:.2f}×",
            mark(max(c_base, r_base) <= 0.30),
        ),
        (
            "XLA temp ≤ 0.40× App. A, both forms",
            f"complex {c_temp:.2f}×, real {r_temp:.2f}×",
            mark(max(c_temp, r_temp) <= 0.40),
        ),
        ("real form no slower than complex", f"real / complex = {r_c:.2f}", mark(r_c <= 1.02)),
        (
            "real form no more XLA temp than complex (to 0.1%)",
            f"real / complex = {r_c_temp:.4f} ({temp[real] - temp[cplx]:+,.2f} MB)",
            mark(r_c_temp <= 1.001),
        ),
        (
            "within 1.3× of the projections-only floor",
            f"complex {c_floor:.2f}×, real {r_floor:.2f}×",
            mark(max(c_floor, r_floor) <= 1.3),
        ),
        ("(reference) the floor itself", f"{ratio(entry, FLOOR, BASELINE):.2f}× App. A", ""),
    ]
    lines = ["| target | measured | |", "|---|---|---|"]
    return lines + [f"| {name} | {value} | {ok} |" for name, value, ok in checks]


def grid_table(entries, peaks, names, *, mode, H) -> list[str]:
    from .interleave import ratio

    lengths = sorted(entries)
    last = entries[lengths[-1]]
    head = " | ".join(f"L={L} ms (× App. A)" for L in lengths)
    lines = [
        f"| implementation | {head} | temp MB @ L={lengths[-1]} (×) | peak MB @ L={lengths[-1]} |",
        "|---|" + "---|" * (len(lengths) + 2),
    ]
    for impl in names:
        cells = []
        for L in lengths:
            e = entries[L]
            if not e or impl not in e.get("ms", {}):
                cells.append("—")
            else:
                cells.append(f"{_fmt_ms(e['ms'][impl])} ({ratio(e, impl, BASELINE):.2f})")
        if all(c == "—" for c in cells):
            continue
        if last and impl in last.get("temp_mb", {}):
            t, t0 = last["temp_mb"][impl], last["temp_mb"][BASELINE]
            temp = f"{_fmt_mb(t)} ({t / t0:.2f})"
        else:
            temp = "—"
        lines.append(
            f"| {label(impl)} | "
            + " | ".join(cells)
            + f" | {temp} | {_fmt_mb(peaks.get((impl, mode, H)))} |"
        )
    return lines


def unroll_table(by_mode, *, default) -> list[str]:
    from .interleave import ratio

    names = sorted(
        {n for r in by_mode.values() for n in r.get("ms", {})}, key=lambda n: int(n.split("@")[1])
    )
    ref = f"real-sequential@{default}"
    lines = [
        "| steps per iteration | fwd ms (× default) | fwd+bwd ms (× default) |",
        "|---|---|---|",
    ]
    for n in names:
        cells = []
        for mode in ("fwd", "grad"):
            r = by_mode.get(mode)
            if not r or n not in r.get("ms", {}):
                cells.append("—")
            else:
                cells.append(f"{_fmt_ms(r['ms'][n])} ({ratio(r, n, ref):.2f})")
        lines.append(f"| {n.split('@')[1]} | " + " | ".join(cells) + " |")
    return lines


def hugetlb_table(results) -> list[str]:
    import numpy as np

    lines = [
        "| implementation | L | default malloc ms | `hugetlb=1` ms | ratio "
        "| peak RSS MB default / hugetlb |",
        "|---|---|---|---|---|---|",
    ]
    for result in results:
        runs = [r for r in result.get("runs", []) if "ms" in r]
        off = [r for r in runs if not r["hugetlb"]]
        on = [r for r in runs if r["hugetlb"]]
        if not off or not on:
            continue
        ratios = [b["ms"] / a["ms"] for a, b in zip(off, on, strict=False)]
        c = result["case"]
        peak = (
            f"{np.median([r['peak_mb'] for r in off]):,.0f} / "
            f"{np.median([r['peak_mb'] for r in on]):,.0f}"
        )
        lines.append(
            f"| {label(c['impl'])} | {c['L']} | {_fmt_ms(np.median([r['ms'] for r in off]))} "
            f"| {_fmt_ms(np.median([r['ms'] for r in on]))} | {np.median(ratios):.2f} | {peak} |"
        )
    return lines


def model_table(rows) -> list[str]:
    lines = [
        "| task | core | batch × L | depth, H, N | remat | XLA temp GB | steps/s | step s "
        "| peak GB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    from experiments.lra import cores, tasks

    order = tasks.names()
    rows = sorted(
        (r for r in rows if "spec" in r),
        key=lambda r: (order.index(r["spec"]["task"]), r["spec"]["core"], r["spec"]["form"]),
    )
    for r in rows:
        s = r["spec"]
        core = cores.get_core(s["core"]).describe(s["form"])
        if "temp_gb" not in r:
            lines.append(
                f"| {s['task']} | {core} | | | "
                f"| error: {' '.join(r.get('error', []))[-80:]} | | | |"
            )
            continue
        bidir = ", bidir." if r["bidirectional"] else ""
        if "step_s" in r:
            timing = f"{1 / r['step_s']:.3g} | {r['step_s']:.2f}"
        else:
            timing = "— | —"
        peak = f"{r['peak_gb']:.2f}" if "peak_gb" in r else "—"
        lines.append(
            f"| {s['task']} | {core} | {r['batch']} × {r['length']} | {r['depth']}, {r['H']}, "
            f"{r['N']}{bidir} | {'yes' if s['remat'] else 'no'} | {r['temp_gb']:.2f} "
            f"| {timing} | {peak} |"
        )
    return lines


def step_table(rows) -> list[str]:
    lines = [
        "| H | N | form | jitted call per token µs | in-graph (`lax.scan` of `step`) µs/token |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['H']} | {r['N']} | {r['form']} | {r['call_us']:.1f} | {r['scan_us']:.2f} |"
        )
    return lines


def precision_table(rows) -> list[str]:
    lines = [
        "| H | N | L | ring (r_min, r_max, max phase) | variant | output rel. error "
        "| gradient rel. error (worst parameter) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ring = "({:g}, {:g}, {:.3g})".format(*r["ring"])
        lines.append(
            f"| {r['H']} | {r['N']} | {r['L']} | {ring} | {r['variant']} | {r['y_err']:.1e} "
            f"| {r['grad_err']:.1e} (`{r['grad_worst']}`) |"
        )
    return lines


def machine_lines(info, *, end_load=None) -> list[str]:
    load = " / ".join(f"{x:.1f}" for x in info["load"])
    lines = [
        f"- CPU: {info['cpu']} ({info['cores']} logical cores, cache {info['cache']}), "
        f"RAM {info['ram_gb']:.1f} GiB, transparent huge pages: `{info['thp']}`",
        f"- JAX {info['jax']} (jaxlib {info['jaxlib']}), backend `{info['backend']}` "
        f"({info['device']}), Equinox {info['equinox']}, Python {info['python']}; matmul "
        f"precision: {info.get('matmul_precision', 'default')} "
        "(JAX's default is TF32 on NVIDIA GPUs)",
        f"- Date {info['date']}, eqx_lru commit `{info['commit']}`",
        f"- Load average (1/5/15 min) at the start: {load}"
        + (f"; at the end: {' / '.join(f'{x:.1f}' for x in end_load)}" if end_load else ""),
    ]
    return lines


def check_writable(parser: argparse.ArgumentParser, writes) -> None:
    """`parser.error` (one `error:` line, status 2) naming the first of `writes`, pairs
    `(what, path or None)`, that cannot be written (`experiments.runs.flags.output_file`)."""
    from experiments.runs.flags import output_file

    for what, path in writes:
        if path is None:
            continue
        try:
            output_file(str(path))
        except argparse.ArgumentTypeError as e:
            parser.error(f"{what}: {e}")

"""The report: the check's state as JSON (`report.json`) and as Markdown (`report.md`),
both rewritten atomically after every part and whenever a part's records grow, so a run
killed at any moment leaves the last complete pair.

The state: `title`, `dry_run`, `budget_s`, `started`, `elapsed_s`, `status` ("running",
"finished", "interrupted ..."), `machine` (the probe), `plan` (`_plan.plan_rows`) and
`parts`: per part `title`, `status` ("pending", "running", "pass", "fail", "partial": cut
short by its time, "skipped"), `seconds`, `allowed_s`, `summary`, `notes` and `data`, which
the part's table is drawn from.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.runs.atomic import write_atomic

from . import _tables, selection

__all__ = ["render", "write_report"]


def write_report(out: Path, state: Mapping[str, Any]) -> None:
    """`out/report.json` then `out/report.md`, each atomically."""
    write_atomic(out / "report.json", (json.dumps(state, indent=1) + "\n").encode())
    write_atomic(out / "report.md", render(state).encode())


def _machine_lines(state: Mapping[str, Any]) -> list[str]:
    m = state.get("machine", {})
    devices = m.get("devices") or []
    device = f"{len(devices)} x {devices[0]}" if devices else "-"
    smi = m.get("nvidia_smi") or []
    fields = smi[0].split(",") if smi else []
    driver = fields[1].strip() if len(fields) > 1 else "- (no nvidia-smi)"
    return [
        f"- started: {state.get('started', '-')}; status: **{state.get('status', '-')}** "
        f"after {state.get('elapsed_s', 0):.0f} s of a {state.get('budget_s', 0):.0f} s budget",
        f"- device: {device}" + (f" (nvidia-smi: {'; '.join(smi)})" if smi else ""),
        f"- driver: {driver}; platform: {m.get('platform_version') or '-'}",
        f"- JAX {m.get('jax', '-')}, jaxlib {m.get('jaxlib', '-')}, Python {m.get('python', '-')}, "
        f"backend {m.get('backend', '-')}",
        f"- eqx_lru commit: `{m.get('commit', '-')}`",
        f"- matmul precision in parts (b)-(d): {m.get('matmul_precision', '-')} (JAX's default "
        "is TF32 on NVIDIA GPUs); the tests run at 'highest' except where they ask for the "
        "default",
    ]


def _plan_lines(state: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Budget plan",
        "",
        "Each part stops itself when its time is spent; one that ends early leaves its time to "
        "the parts after it (`experiments/gpu_check/_plan.py`).",
        "",
        "| part | share of the budget | why |",
        "|---|---|---|",
    ]
    for row in state.get("plan", []):
        share = f"the time left (about {row['about']} s)" if row["left"] else f"{row['seconds']} s"
        lines.append(f"| {row['part']} | {share} | {row['why']} |")
    return lines


def render(state: Mapping[str, Any]) -> str:
    parts = state.get("parts", {})
    failed = any(p.get("status") == "fail" for p in parts.values())
    verdict = "FAIL" if failed else "PASS" if state.get("status") == "finished" else "INCOMPLETE"
    lines = [f"# {state.get('title', 'GPU check')}: {verdict}", "", *_machine_lines(state), ""]
    lines += ["| part | result | time (allowed) | summary |", "|---|---|---|---|"]
    for p in parts.values():
        allowed = f" ({p['allowed_s']:.0f} s)" if p.get("allowed_s") is not None else ""
        lines.append(
            f"| {p['title']} | {p['status'].upper()} | {p.get('seconds', 0):.0f} s{allowed} "
            f"| {p.get('summary', '')} |"
        )
    lines += ["", *_plan_lines(state)]
    for name, p in parts.items():
        body = _BODIES[name](p.get("data", {})) if name in _BODIES and p.get("data") else []
        notes = [f"- {n}" for n in p.get("notes", [])]
        if body or notes:
            lines += ["", f"## {p['title']}", ""] + notes + ([""] if notes and body else []) + body
    return "\n".join(lines) + "\n"


def _tests_body(data: Mapping[str, Any]) -> list[str]:
    results: dict[str, dict] = data.get("results", {})
    groups: dict[str, dict[str, int]] = {}
    for nodeid in data.get("collected") or data.get("selection", []):
        outcome = results.get(nodeid, {}).get("outcome")
        if nodeid in data.get("crashed", []):
            outcome = "crashed"
        counts = groups.setdefault(selection.group_of(nodeid), {})
        counts[outcome or "not run"] = counts.get(outcome or "not run", 0) + 1
    kinds = ("passed", "failed", "error", "crashed", "skipped", "not run")
    lines = ["| what | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for group, counts in groups.items():
        lines.append(f"| {group} | " + " | ".join(str(counts.get(k, 0)) for k in kinds) + " |")
    bad = [r for r in results.values() if r.get("outcome") in ("failed", "error")]
    for r in bad:
        lines += ["", f"- {r['outcome'].upper()} `{r['id']}`", ""]
        lines += ["```", r.get("message", ""), "```"]
    lines += [f"- CRASHED (the interpreter died in it) `{i}`" for i in data.get("crashed", [])]
    skips: dict[str, int] = {}
    for r in results.values():
        if r.get("outcome") == "skipped":
            skips[r.get("message", "")] = skips.get(r.get("message", ""), 0) + 1
    if skips:
        lines += ["", *(f"- skipped {n}: {why}" for why, n in skips.items())]
    return lines


_BODIES = {
    "tests": _tests_body,
    "layer": _tables.layer_body,
    "memory": _tables.memory_body,
    "learning": _tables.listops_body,
}

"""The GPU check's results (`PartResult`), the test suite's JUnit file read back
(`parse_junit`) and the Markdown report (`render_report`); see `experiments/gpu_check.py`."""

import dataclasses
import datetime
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["PartResult", "parse_junit", "render_report", "tail"]


@dataclasses.dataclass
class PartResult:
    """What one part found: `status` is "pass", "fail" or "skipped"."""

    name: str
    status: str
    seconds: float
    summary: str
    details: str = ""


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def parse_junit(path: Path) -> dict:
    """Counts and failed test ids from a pytest JUnit XML file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}
    failed, skipped = [], {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        skip = case.find("skipped")
        if skip is not None:
            reason = skip.get("message", "")
            skipped[reason] = skipped.get(reason, 0) + 1
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "failed": failed, "skip_reasons": skipped}


def render_report(info: Mapping, parts: Sequence[PartResult], *, when: str | None = None) -> str:
    """The Markdown report: the machine, then one line per part, then each part's details."""
    ok = all(p.status != "fail" for p in parts)
    when = when or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    devices = info.get("devices") or []
    device = f"{len(devices)} x {devices[0]}" if devices else "-"
    smi = info.get("nvidia_smi") or []
    driver = smi[0].split(",")[1].strip() if smi and len(smi[0].split(",")) > 1 else "-"
    lines = [
        f"# GPU check: {'PASS' if ok else 'FAIL'}",
        "",
        f"- when: {when}",
        f"- device: {device}" + (f" (nvidia-smi: {'; '.join(smi)})" if smi else ""),
        f"- driver: {driver}; platform: {info.get('platform_version', '-')}",
        f"- JAX {info.get('jax', '-')}, jaxlib {info.get('jaxlib', '-')}, "
        f"Python {info.get('python', '-')}, backend {info.get('backend', '-')}",
        "- matmul precision: JAX's default (TF32 on NVIDIA) except where the tests ask for more",
        "",
        "| part | result | time | summary |",
        "|---|---|---|---|",
    ]
    lines += [f"| {p.name} | {p.status.upper()} | {p.seconds:.0f} s | {p.summary} |" for p in parts]
    for p in parts:
        if p.details:
            lines += ["", f"## {p.name}", "", p.details.rstrip()]
    return "\n".join(lines) + "\n"

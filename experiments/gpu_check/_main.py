"""The run itself: the parts in order, the report saved after each, a signal turned into
a saved report and status 130."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._parts import PART_RUNNERS, start_listops_data
from ._run import Check, Interrupted, catch_signals, restore_signals

__all__ = ["run"]


def _run_part(check: Check, name: str) -> None:
    part = check.part(name)
    part["status"] = "running"
    began = check.elapsed()
    part["allowed_s"] = round(check.end(name) - check.t0 - began, 1)
    check.say(f"{part['title']}: up to {part['allowed_s']:.0f} s")
    check.save()
    try:
        PART_RUNNERS[name](check)
    except Interrupted:
        part.update(status="fail", summary=(part.get("summary") or "") + " (interrupted)")
        raise
    except Exception as e:  # a bug of the check: say so in the report, go on
        import traceback

        part["status"] = "fail"
        part["summary"] = f"the check itself failed: {type(e).__name__}: {e}"
        part.setdefault("notes", []).append(f"```\n{traceback.format_exc()}\n```")
    finally:
        part["seconds"] = round(check.elapsed() - began, 1)
        check.save()
    check.say(f"{part['title']}: {part['status']} ({part['summary']})")


def run(
    out: Path,
    *,
    budget: float,
    dry: bool,
    parts: Sequence[str],
    info: Mapping[str, Any],
    started: tuple[float, float] | None = None,
) -> int:
    """Run `parts` (in the plan's order) within `budget` seconds of `started` (a
    `(time.monotonic(), time.time())` pair; default now); 0 if none failed, 1 if one
    did, 130 on SIGINT/SIGTERM/SIGHUP (the report saved first)."""
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out, budget=budget, dry=dry, parts=parts, started=started)
    check.state["machine"] = dict(info)
    check.state["status"] = "running"
    handlers = catch_signals()
    try:
        check.save()
        if "learning" in parts:
            start_listops_data(check)  # CPU work while the GPU runs the first parts
        for name in PART_RUNNERS:
            if name in parts:
                _run_part(check, name)
        check.state["status"] = "finished"
    except Interrupted as e:
        check.state["status"] = f"interrupted ({e})"
        return 130
    finally:
        check.stop_background()
        check.save()
        restore_signals(handlers)
        check.say(f"report: {out / 'report.md'}")
    failed = any(p["status"] == "fail" for p in check.state["parts"].values())
    return 1 if failed else 0

"""The four parts, each filling its entry of the report from its child processes' records.

A part's status: "pass"; "fail" (a test failed, a measurement raised, a child died, the
ListOps curve is flagged); "partial" (nothing failed, but its time ran out before all of
it ran: the report says what was left out).
"""

import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from . import _listops, selection
from ._jobs import read_records, tail
from ._plan import GRACE_S
from ._run import Check

__all__ = ["PART_RUNNERS", "start_listops_data"]

#: What the test selection imports beyond the library's dependencies (the GPU image of
#: shared/GPU.md lacks beartype).
TEST_NEEDS = ("pytest", "beartype", "jaxtyping", "hypothesis", "scipy")
_NORMAL_PYTEST_EXITS = (0, 1)  # all passed; some failed (2: stopped for time, or an error)


def _worker(part: str, config: dict[str, Any], records: Path, deadline: float) -> list[str]:
    return [
        sys.executable,
        "-m",
        "experiments.gpu_check._worker",
        part,
        json.dumps(config),
        str(records),
        repr(deadline),
    ]


def _log_note(check: Check, log: str, rc: int) -> str:
    end = tail(check.out / "logs" / f"{log}.log")
    return f"exit status {rc}; the log's end:\n\n```\n{end}\n```"


# --------------------------------------------------------------------------- (a) tests


def _read_tests(data: dict[str, Any], records: Path) -> str | None:
    """Fold the records into `data`; return the test that started last without a result."""
    last = None
    for r in read_records(records):
        if r.get("event") == "collected" and not data["collected"]:
            data["collected"] = r["ids"]
        elif r.get("event") == "start":
            last = r["id"]
        elif r.get("event") == "result":
            data["results"][r["id"]] = r
        elif r.get("event") == "stopped":
            data["stopped_for_time"] = True
    return last if last is not None and last not in data["results"] else None


def _tests_summary(data: dict[str, Any]) -> tuple[str, str]:
    counts: dict[str, int] = {}
    for r in data["results"].values():
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    done = set(data["results"]) | set(data["crashed"])
    data["not_run"] = [i for i in data["collected"] or data["selection"] if i not in done]
    bad = counts.get("failed", 0) + counts.get("error", 0) + len(data["crashed"])
    summary = (
        f"{counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed, "
        f"{counts.get('error', 0)} errors, {len(data['crashed'])} crashed, "
        f"{counts.get('skipped', 0)} skipped, {len(data['not_run'])} not run"
    )
    return summary, "fail" if bad else "partial" if data["not_run"] else "pass"


def tests_part(check: Check) -> None:
    """Part (a): the selection in one pytest process (restarted after the test that
    killed it, if one does), no `-x`, stopped between tests when the time is spent."""
    p, end = check.part("tests"), check.end("tests")
    data = p["data"] = {"selection": selection.ids(check.sizes.tests), "collected": []}
    data.update(results={}, crashed=[], not_run=[], exits=[])
    missing = [m for m in TEST_NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        p.update(status="fail", summary=f"not run: missing Python packages {missing}")
        return
    records, remaining = check.out / "tests.jsonl", list(data["selection"])
    records.unlink(missing_ok=True)
    plugin = ["-p", "experiments.gpu_check._pytest_plugin", "-p", "no:randomly"]
    while remaining and len(data["exits"]) < 4 and (not data["exits"] or time.monotonic() < end):
        cmd = [sys.executable, "-m", "pytest", *plugin, "-p", "no:benchmark", "-q", "-rs"]
        job = check.start(
            cmd + remaining,
            "tests",
            GPU_CHECK_RECORDS=str(records),
            GPU_CHECK_DEADLINE=repr(check.wall(end)),
        )
        rc, stopped = check.wait(
            job, end + GRACE_S, lambda: _read_tests(data, records), watch=[records]
        )
        data["exits"].append(rc)
        crashed = _read_tests(data, records)
        normal = rc in _NORMAL_PYTEST_EXITS or (rc == 2 and data.get("stopped_for_time"))
        if stopped or normal or crashed is None:
            if not (stopped or normal):  # a collection error, a bad test id, a crash outside tests
                note = "pytest ended abnormally: " + _log_note(check, "tests", rc)
                p.setdefault("notes", []).append(note)
                data["abnormal"] = True
            break
        data["crashed"].append(crashed)  # the interpreter died in it: go on without it
        done = set(data["results"]) | set(data["crashed"])
        remaining = [i for i in data["collected"] if i not in done]
    p["summary"], p["status"] = _tests_summary(data)
    if data.get("abnormal"):
        p["status"] = "fail"


# --------------------------------------------------------------------------- (b) layer


def layer_part(check: Check) -> None:
    """Part (b): the layer table in one child process (`_worker.layer`)."""
    p, end = check.part("layer"), check.end("layer")
    data = p["data"] = {"specs": [], "skipped_specs": [], "errors": []}
    records = check.out / "layer.jsonl"
    records.unlink(missing_ok=True)

    def update() -> None:
        data.update(specs=[], skipped_specs=[], errors=[])
        for r in read_records(records):
            kind = r.pop("event", None)
            if kind == "device":
                data.update(r)
            elif kind == "spec":
                data["specs"].append(r)
            elif kind == "skipped":
                data["skipped_specs"].append((r["mode"], r["L"]))
            elif kind == "error":
                data["errors"].append(r["error"])

    config = dict(check.sizes.layer)
    job = check.start(_worker("layer", config, records, check.wall(end)), "layer")
    rc, stopped = check.wait(job, end + GRACE_S, update, watch=[records])
    total = 2 * len(config["lengths"])
    rows = sum(len(s["ms"]) for s in data["specs"])
    cut = stopped or data["skipped_specs"] or any(s.get("skipped") for s in data["specs"])
    p["summary"] = f"{len(data['specs'])} of {total} configurations, {rows} timed rows"
    if data["errors"] or (rc != 0 and not stopped):
        p["notes"] = data["errors"] + [_log_note(check, "layer", rc)]
        p["status"] = "fail"
    else:
        p["status"] = "partial" if cut else "pass"


# --------------------------------------------------------------------------- (c) memory


def memory_part(check: Check) -> None:
    """Part (c): the PathX step's peak memory, one child process per form on a GPU (the
    peak is per process), one for both in the dry run."""
    p, end = check.part("memory"), check.end("memory")
    data = p["data"] = {"steps": [], "errors": [], "skipped": []}
    records = check.out / "memory.jsonl"
    records.unlink(missing_ok=True)
    config = dict(check.sizes.memory)
    forms = list(config.pop("forms"))
    groups = [[f] for f in forms] if config["isolate"] else [forms]

    def update() -> None:
        rs = read_records(records)
        data["steps"] = [r for r in rs if r.get("event") == "step"]
        data["errors"] = [r for r in rs if r.get("event") == "error"]
        data["skipped"] = [r["form"] for r in rs if r.get("event") == "skipped"]

    bad = []
    for i, group in enumerate(groups):
        if i and time.monotonic() >= end:
            data["skipped"] += group
            continue
        job = check.start(
            _worker("memory", dict(config, forms=group), records, check.wall(end)),
            f"memory-{'-'.join(group)}",
            deterministic=True,
        )
        rc, stopped = check.wait(job, end + GRACE_S, update, watch=[records])
        if rc != 0 and not stopped:
            bad.append(_log_note(check, f"memory-{'-'.join(group)}", rc))
    update()
    p["summary"] = f"{len(data['steps'])} of {len(forms)} forms measured" + "".join(
        f"; {r['form']}: peak {r['peak_gb']:.2f} GB" for r in data["steps"] if r["peak_gb"]
    )
    p["notes"] = bad
    complete = len(data["steps"]) == len(forms)
    p["status"] = "fail" if bad or data["errors"] else "pass" if complete else "partial"


# --------------------------------------------------------------------------- (d) ListOps


def start_listops_data(check: Check) -> None:
    """Start drawing the ListOps data in the background (CPU only), unless the folder
    already holds data of the same counts (a rerun with the same --out)."""
    root = check.out / "listops-data"
    counts = list(check.sizes.listops["counts"])
    marker = root / "counts.json"
    if marker.is_file() and json.loads(marker.read_text()) == counts:
        return
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    config = {"root": str(root), "counts": counts, "seed": 0, "workers": 1 if check.dry else 8}
    records = check.out / "listops-data.jsonl"
    records.unlink(missing_ok=True)
    cmd = _worker("listops-data", config, records, check.wall(check.t0 + check.budget))
    check.background["listops-data"] = check.start(cmd, "listops-data", JAX_PLATFORMS="cpu")


def _data_ready(check: Check, end: float) -> str | None:
    """Wait for the data (until `end`); None when ready, else why not."""
    root = check.out / "listops-data"
    job = check.background.pop("listops-data", None)
    if job is not None:
        rc, stopped = check.wait(job, end, lambda: None)
        if stopped or rc != 0:
            why = "not written in time" if stopped else _log_note(check, "listops-data", rc)
            return f"the ListOps data: {why}"
        (root / "counts.json").write_text(json.dumps(list(check.sizes.listops["counts"])))
    return None if (root / "counts.json").is_file() else "the ListOps data is missing"


def listops_part(check: Check) -> None:
    """Part (d): the trainer for the time left, its validation curve against the earlier
    H100 run's."""
    p, end, began = check.part("learning"), check.end("learning"), time.monotonic()
    data = p["data"] = {"reference": _listops.read_reference(), "val": {}}
    problem = _data_ready(check, end)
    data["data_s"] = time.monotonic() - began
    if problem is not None:
        p.update(status="fail", summary=problem)
        return
    run = check.out / "listops-run"
    shutil.rmtree(run, ignore_errors=True)
    argv = _listops.train_argv(
        check.out / "listops-data",
        run,
        argv=check.sizes.listops["argv"],
        time_limit_s=end - time.monotonic(),
    )
    job = check.start([sys.executable, "-m", "experiments.lra.train", *argv], "learning")
    rc, stopped = check.wait(
        job,
        end + GRACE_S,
        lambda: data.update(_listops.run_summary(run)),
        watch=[run / "metrics.jsonl"],
    )
    _listops_verdict(check, p, rc, stopped)


def _listops_verdict(check: Check, p: dict[str, Any], rc: int, stopped: bool) -> None:
    data = p["data"]
    now = {int(k): v for k, v in data["val"].items()}
    then = {int(k): v for k, v in data["reference"]["val"].items()}
    cmp = _listops.compare(now, then)
    if now:
        last = max(now)
        p["summary"] = f"{len(now)} validations, last at step {last}: {now[last]:.1%}"
    else:
        p["summary"] = "no validation"
    if cmp["below"]:
        p["summary"] += f"; FLAG: below the reference at step(s) {cmp['below']}"
    if rc != 0 and not stopped:
        p["notes"] = [_log_note(check, "learning", rc)]
    p["status"] = "fail" if cmp["below"] or (rc != 0 and not stopped) or not now else "pass"


PART_RUNNERS = {
    "tests": tests_part,
    "layer": layer_part,
    "memory": memory_part,
    "learning": listops_part,
}

"""A pytest plugin for part (a): each test's outcome as a JSON line as soon as it is known,
and a stop between tests once the part's time is spent.

Loaded with `-p experiments.gpu_check._pytest_plugin`; reads `GPU_CHECK_RECORDS` (the
records file) and `GPU_CHECK_DEADLINE` (a `time.time()` after which no further test starts).
Records: `{"event": "collected", "ids": [...]}` once, `{"event": "start", "id"}` before each
test (so a test that kills the interpreter is known), `{"event": "result", "id", "outcome",
"seconds", "message"}` after it (outcome "passed", "failed", "error" or "skipped"), and
`{"event": "stopped", "before"}` when the time is spent (pytest then exits with status 2).
"""

import os
import time

import pytest

from ._jobs import RecordWriter

_writer: RecordWriter | None = None
_outcomes: dict[str, dict] = {}


def _write(record: dict) -> None:
    global _writer
    path = os.environ.get("GPU_CHECK_RECORDS")
    if not path:
        return
    if _writer is None:
        _writer = RecordWriter(path)
    _writer(record)


def _message(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    text = getattr(report, "longreprtext", "") or ""
    lines = [line for line in text.splitlines() if line.startswith("E ")]
    return "\n".join(lines[:6]) if lines else "\n".join(text.splitlines()[-6:])


def pytest_collection_finish(session: pytest.Session) -> None:
    _write({"event": "collected", "ids": [item.nodeid for item in session.items]})


def pytest_runtest_logstart(nodeid: str, location) -> None:
    _outcomes[nodeid] = {"event": "result", "id": nodeid, "outcome": "passed", "seconds": 0.0}
    _write({"event": "start", "id": nodeid})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    record = _outcomes.setdefault(
        report.nodeid, {"event": "result", "id": report.nodeid, "outcome": "passed", "seconds": 0.0}
    )
    record["seconds"] += report.duration
    if report.skipped and record["outcome"] == "passed":
        record.update(outcome="skipped", message=_message(report))
    elif report.failed:
        outcome = "failed" if report.when == "call" else "error"
        if record["outcome"] not in ("failed", "error"):
            record.update(outcome=outcome, message=_message(report))


def pytest_runtest_logfinish(nodeid: str, location) -> None:
    record = _outcomes.pop(nodeid, None)
    if record is not None:
        record["seconds"] = round(record["seconds"], 3)
        _write(record)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    yield
    deadline = float(os.environ.get("GPU_CHECK_DEADLINE", "inf"))
    if nextitem is not None and time.time() >= deadline:
        item.session.shouldstop = "gpu-check: this part's time is spent"
        _write({"event": "stopped", "before": nextitem.nodeid})

"""The metrics log's per-record hook (`runs.metrics.MetricsLog(on_record=...)`): each record
written reaches it once, as the file holds it; a disabled log (hosts > 0) sends nothing; a
truncation on resume does not send again."""

import json

import pytest

from experiments.runs.metrics import MetricsLog, read_records


def test_each_written_record_reaches_the_hook_once(tmp_path):
    sent = []
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path, on_record=sent.append)
    records = [
        {"split": "train", "step": 1, "loss": 2.5, "steps_per_sec": None},
        {"split": "val", "step": 1, "loss": float("nan"), "accuracy": 0.25},
        {"split": "train", "step": 2, "loss": 1.0, "lr": 1e-3},
    ]
    for record in records:
        log.write(record)
    log.close()
    assert len(sent) == 3
    on_disk = read_records(path)
    for got, written, record in zip(sent, on_disk, records, strict=True):
        assert json.dumps(got) == json.dumps(written) == json.dumps(record)
    sent[0]["loss"] = 0.0  # the hook's own copy: the caller's record is untouched
    assert records[0]["loss"] == 2.5

    log = MetricsLog(path, on_record=sent.append)
    log.truncate(1)  # a resume drops the later records; nothing is sent again
    assert len(sent) == 3 and [r["step"] for r in read_records(path)] == [1, 1]


def test_a_disabled_log_sends_nothing_and_a_failing_hook_keeps_the_record(tmp_path):
    sent = []
    MetricsLog(tmp_path / "a.jsonl", enabled=False, on_record=sent.append).write({"step": 1})
    assert sent == [] and not (tmp_path / "a.jsonl").exists()

    def broken(record):
        raise RuntimeError("the dashboard is down")

    log = MetricsLog(tmp_path / "b.jsonl", on_record=broken)
    with pytest.raises(RuntimeError, match="dashboard"):
        log.write({"split": "train", "step": 1})
    log.close()
    assert read_records(tmp_path / "b.jsonl") == [{"split": "train", "step": 1}]

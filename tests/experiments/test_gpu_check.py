"""The pieces of `python -m experiments.gpu_check` on the CPU: its command line, budget plan,
test selection, records, parts and report. (The command end to end, its dry run and a
kill midway: `test_gpu.py`.)"""

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest

from experiments.gpu_check import _jobs, _listops, _machine, _parts, _plan, _run, _worker, selection
from experiments.gpu_check._report import render, write_report

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "experiments.gpu_check", *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, **kwargs)


# --------------------------------------------------------------------------- command line


def test_help_answers_without_jax_and_shows_every_default():
    code = (
        "import runpy, sys\n"
        "sys.argv = ['gpu_check', '--help']\n"
        "try:\n"
        "    runpy.run_module('experiments.gpu_check', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "assert 'jax' not in sys.modules, 'JAX imported before the flags were parsed'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for flag, default in (
        ("--budget SECONDS", "[480: 8 minutes on one H100]"),
        ("--out FOLDER", "[runs/gpu-check in the repository; with --dry-run,"),
        ("--dry-run", "[off]"),
        ("--parts LIST", "[all]"),
    ):
        assert flag in text and default in text, (flag, default)


def test_the_dry_run_writes_to_its_own_default_folder(monkeypatch):
    """`--dry-run` wrote to the real check's default folder, so the first real check on a
    GPU was refused until --overwrite or --out."""
    from experiments.gpu_check import _cli

    seen = []
    monkeypatch.setattr(_cli, "_check_out", lambda p, out: seen.append(out) or _stop())
    for extra in ([], ["--dry-run"]):
        with pytest.raises(_Stopped):
            _cli.main(extra)
    assert seen[0].name == "gpu-check" and seen[1].name == "gpu-check-dry-run"
    assert seen[0].parent == seen[1].parent
    with pytest.raises(_Stopped):
        _cli.main(["--dry-run", "--out", "elsewhere"])
    assert str(seen[2]) == "elsewhere"


class _Stopped(Exception):
    pass


def _stop():
    raise _Stopped


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--budget", "0"], "--budget"),
        (["--budget", "nan"], "--budget"),
        (["--budget", "1e30"], "--budget"),
        (["--parts", "tests,nope"], "--parts"),
        (["--parts", ""], "--parts"),
        (["--out", "/proc/version"], "--out"),
        (["--out", "/proc/version/folder"], "--out"),
    ],
)
def test_bad_flags_are_one_line_and_status_2(args, flag):
    result = _cli(*args)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m experiments.gpu_check: error: argument " + flag), last
    assert "Traceback" not in result.stderr


def test_no_cuda_reason():
    reason = _machine.no_cuda_reason
    assert reason({"backend": "gpu", "platform_version": "cuda 12030"}) is None
    assert "backend is cpu" in cast(str, reason({"backend": "cpu"}))
    assert reason({"backend": "gpu", "platform_version": "rocm 6"}) is not None
    hint = cast(str, reason({"backend": "cpu", "nvidia_smi": ["NVIDIA H100, 570.1, 80 GiB"]}))
    assert "nvidia-smi sees NVIDIA H100" in hint and "jax[cuda12]" in hint


def test_child_environment(tmp_path):
    env = _machine.child_env(dry=True, cache=tmp_path, deterministic=True)
    assert env["JAX_PLATFORMS"] == "cpu" and env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] in (
        "false",
        os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
    )
    assert env["XLA_FLAGS"].count("--xla_gpu_deterministic_ops") == 1
    assert "JAX_PLATFORMS" not in _machine.child_env(dry=False) or "JAX_PLATFORMS" in os.environ


# --------------------------------------------------------------------------- the plan


def test_budget_plan():
    budget = _plan.DEFAULT_BUDGET_S
    assert budget == 480
    assert sum(p.share or 0 for p in _plan.PARTS) + sum(p.floor for p in _plan.PARTS) < 1.2
    assert [p.name for p in _plan.PARTS] == ["tests", "layer", "memory", "learning"]
    # On time: each part its share; ListOps the rest.
    assert _plan.part_end("tests", budget=budget, elapsed=10) == 10 + 0.25 * budget
    assert _plan.part_end("layer", budget=budget, elapsed=130) == 130 + 0.25 * budget
    assert _plan.part_end("learning", budget=budget, elapsed=300) == budget - _plan.RESERVE_S
    # Late: the parts after keep their floors.
    late = _plan.part_end("layer", budget=budget, elapsed=400)
    assert late == budget - _plan.RESERVE_S - (0.06 + 0.2) * budget < 400
    rows = _plan.plan_rows(budget)
    assert [r["seconds"] for r in rows] == [120, 120, 82, None] and rows[3]["about"] == 153


# --------------------------------------------------------------------------- (a) tests


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_the_selection_names_existing_tests_once():
    every = selection.ids()
    assert len(every) == len(set(every)) and len(every) >= 20
    for nodeid in every:
        file, function = nodeid.split("::")
        assert function in _test_functions(REPO / file), nodeid
    assert selection.ids("dry") == [
        i for i in every if i.startswith("tests/experiments/test_gpu.py")
    ]
    groups = list(selection.GROUPS)
    assert groups[1] == "precision against the float64 oracles" and "Auto's choice" in groups
    assert (
        selection.group_of("tests/lib/test_scan.py::test_matches_loop[x-y]")
        == "every scan method and algebra against the sequential loop"
    )
    assert selection.group_of("tests/lib/test_x.py::test_y") == "other"


_SAMPLE = """
import os, time
import pytest

def test_ok():
    pass

def test_broken():
    assert 1 == 2, "one is not two"

@pytest.mark.skip(reason="needs a CUDA GPU; backend is cpu")
def test_gpu_only():
    pass

def test_abort():
    os.abort()

@pytest.mark.parametrize("x", [1, 2])
def test_after(x):
    time.sleep(0.05)
"""


def _sample_check(tmp_path, monkeypatch, *, budget=480.0) -> _run.Check:
    """A check whose test selection is the sample file above, run in its own folder
    (a pytest.ini there, so no JAX is imported)."""
    root = tmp_path / "sample"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_sample.py").write_text(_SAMPLE)
    names = ["test_ok", "test_broken", "test_gpu_only", "test_abort", "test_after"]
    monkeypatch.setattr(selection, "ids", lambda which: [f"test_sample.py::{n}" for n in names])
    monkeypatch.setattr(_run, "REPO", root)
    out = tmp_path / "out"
    out.mkdir()
    return _run.Check(out, budget=budget, dry=True, parts=["tests"])


@pytest.mark.slow
def test_tests_part_records_each_outcome_and_goes_on_after_a_crash(tmp_path, monkeypatch):
    check = _sample_check(tmp_path, monkeypatch)
    _parts.tests_part(check)
    part = check.part("tests")
    data = part["data"]
    outcomes = {i.split("::")[1]: r["outcome"] for i, r in data["results"].items()}
    assert outcomes == {
        "test_ok": "passed",
        "test_broken": "failed",
        "test_gpu_only": "skipped",
        "test_after[1]": "passed",
        "test_after[2]": "passed",
    }
    assert data["crashed"] == ["test_sample.py::test_abort"] and data["not_run"] == []
    assert data["exits"][0] < 0 and data["exits"][1] == 0  # killed by SIGABRT, then relaunched
    assert part["status"] == "fail"
    assert part["summary"] == "3 passed, 1 failed, 0 errors, 1 crashed, 1 skipped, 0 not run"
    assert "one is not two" in data["results"]["test_sample.py::test_broken"]["message"]
    text = render(check.state)
    assert "- FAILED `test_sample.py::test_broken`" in text
    assert "- CRASHED (the interpreter died in it) `test_sample.py::test_abort`" in text
    assert "- skipped 1: needs a CUDA GPU; backend is cpu" in text


@pytest.mark.slow
def test_tests_part_stops_between_tests_when_its_time_is_spent(tmp_path, monkeypatch):
    check = _sample_check(tmp_path, monkeypatch)
    monkeypatch.setattr(check, "end", lambda name: time.monotonic())  # spent at once
    _parts.tests_part(check)
    part, data = check.part("tests"), check.part("tests")["data"]
    assert list(data["results"]) == ["test_sample.py::test_ok"]  # the first always runs
    assert data["exits"] == [2] and len(data["not_run"]) == 5
    assert part["status"] == "partial" and part["summary"].endswith("5 not run")
    assert "| other | 1 | 0 | 0 | 0 | 0 | 5 |" in render(check.state)


@pytest.mark.slow
def test_tests_part_fails_on_a_collection_error(tmp_path, monkeypatch):
    # pytest's status 2 or 4 without the plugin's stop: a module of the selection cannot be
    # imported (a package missing on the GPU machine); not "partial", a failure.
    check = _sample_check(tmp_path, monkeypatch)
    (tmp_path / "sample" / "test_missing.py").write_text("import no_such_module_xyz\n")
    monkeypatch.setattr(
        selection, "ids", lambda which: ["test_sample.py::test_ok", "test_missing.py::test_x"]
    )
    _parts.tests_part(check)
    part = check.part("tests")
    (rc,) = part["data"]["exits"]
    assert rc in (2, 4) and not part["data"]["results"]  # a collection or usage error
    assert part["status"] == "fail"
    assert f"pytest ended abnormally: exit status {rc}" in part["notes"][0]
    assert "no_such_module_xyz" in part["notes"][0]


# --------------------------------------------------------------------------- records, jobs


def test_records_survive_a_torn_last_line(tmp_path):
    path = tmp_path / "r.jsonl"
    with _jobs.records_to(path) as emit:
        emit({"a": 1})
        emit({"b": [2]})
    with open(path, "a") as f:
        f.write('{"c": 3, "d"')  # a kill in the middle of a line
    assert _jobs.read_records(path) == [{"a": 1}, {"b": [2]}]
    assert _jobs.read_records(tmp_path / "none.jsonl") == []


def test_a_job_past_its_time_is_stopped_with_its_group(tmp_path):
    sleep = "import time; time.sleep(60)"
    script = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {sleep!r}]); {sleep}"
    job = _jobs.Job(
        [sys.executable, "-c", script], log=tmp_path / "j.log", env=dict(os.environ), cwd=tmp_path
    )
    began = time.monotonic()
    rc, stopped = _jobs.run_job(job, kill_at=time.monotonic() + 1.5, poll_s=0.2)
    assert stopped and rc < 0 and time.monotonic() - began < _jobs.KILL_WAIT_S
    assert _group_gone(job.pid)  # the grandchild went with it
    rc, stopped = _jobs.run_job(
        _jobs.Job(
            [sys.executable, "-c", "pass"],
            log=tmp_path / "k.log",
            env=dict(os.environ),
            cwd=tmp_path,
        ),
        kill_at=time.monotonic() + 60,
    )
    assert (rc, stopped) == (0, False)
    assert (tmp_path / "k.log").read_text().startswith("$ ")


def _group_gone(pgid: int, wait: float = 5.0) -> bool:
    end = time.monotonic() + wait
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


# --------------------------------------------------------------------------- (b)-(d)


def test_layer_variants():
    gpu = _worker.layer_variants("associative")
    assert gpu == [
        "floor", "app_a", "complex-associative", "real-associative", "complex-pallas",
        "real-pallas", "real-associative-bf16", "complex-sequential", "real-sequential",
    ]  # fmt: skip
    assert _worker.layer_variants("sequential", dry=True) == [
        "floor", "app_a", "complex-sequential", "real-sequential-bf16",
    ]  # fmt: skip


def _layer_state() -> dict:
    spec = {"mode": "grad", "B": 16, "H": 256, "N": 256, "L": 16384, "rounds": 3}
    result = {
        "spec": spec,
        "ms": {"app_a": 10.0, "floor": 2.0, "complex-pallas": 4.0},
        "times_ms": {"app_a": [10.0, 10, 10], "floor": [2.0, 2, 2], "complex-pallas": [4.0, 4, 5]},
        "temp_mb": {"app_a": 100.0, "floor": 10.0, "complex-pallas": 20.0},
        "compile_s": {"app_a": 1.0, "floor": 0.5, "complex-pallas": 30.0},
        "bytes": {"app_a": 33.5e9, "floor": 3.35e9, "complex-pallas": 6.7e9},
        "skipped": ["real-pallas"],
    }
    data = {"device_kind": "NVIDIA H100 80GB HBM3", "bandwidth_gbs": 3350.0}
    data.update(default_method="associative", specs=[result], skipped_specs=[("fwd", 1024)])
    return {"parts": {"layer": {"title": "(b) layer", "status": "partial", "data": data}}}


def test_layer_table_states_bytes_and_bandwidth_fraction():
    text = render(_layer_state())
    # 3.35 GB in 2 ms = 1675 GB/s = 50% of 3350; 6.7 GB in 4 ms = 50%; App. A 100%.
    assert "| 16384 | floor | 2 | 0.20 | 1.00 | 3.35 | 1.68e+03 | 50.0% | 10 | 0.5 |" in text
    assert (
        "| 16384 | complex-pallas | 4 | 0.40 | 2.00 | 6.7 | 1.68e+03 | 50.0% | 20 | 30.0 |" in text
    )
    assert "| 16384 | app_a | 10 | 1.00 | 5.00 | 33.5 | 3.35e+03 | 100.0% |" in text
    assert "nominal peak bandwidth of `NVIDIA H100 80GB HBM3`: 3,350 GB/s" in text
    assert "| 16384 | real-pallas | not run: the part's time was spent |" in text
    assert "Not run (the part's time was spent): fwd L = 1024." in text
    assert "U = B·L·H·4" in text


def test_memory_table():
    step = {
        "task": "pathx", "form": "real", "remat": True, "batch": 32, "length": 16384, "depth": 6,
        "H": 128, "N": 256, "bidirectional": True, "compile_s": 21.0, "step_s": 0.2,
        "xla_temp_gb": 29.0, "xla_args_gb": 0.5, "xla_out_gb": 0.5, "peak_gb": 38.7,
    }  # fmt: skip
    data = {
        "steps": [step],
        "errors": [{"form": "complex", "error": "XlaRuntimeError: RESOURCE_EXHAUSTED"}],
        "skipped": [],
    }
    text = render({"parts": {"memory": {"title": "(c) memory", "status": "fail", "data": data}}})
    row = "| pathx | real | on | 32 × 16384 | 6, 128, 256, bidir. | 29 | 0.5 | 30 | **38.7** "
    assert row + "| 1.29 | 0.2 | 21 |" in text
    assert "- complex: XlaRuntimeError: RESOURCE_EXHAUSTED" in text


def test_listops_reference_and_flag():
    ref = _listops.read_reference()
    assert sorted(ref["val"]) == list(range(4000, 32001, 4000))
    assert ref["val"][4000] == pytest.approx(0.3643, abs=1e-4) and ref["test"] == pytest.approx(
        0.4815, abs=1e-4
    )
    then = ref["val"]
    ok = _listops.compare({1000: 0.2, 4000: then[4000] - 0.049, 5000: 0.4}, then)
    assert ok["below"] == [] and ok["common"] == 1
    assert ok["rows"] == [
        (1000, 0.2, None, None),
        (4000, then[4000] - 0.049, then[4000], pytest.approx(-0.049)),
        (5000, 0.4, None, None),
    ]
    bad = _listops.compare({4000: then[4000] - 0.051, 8000: then[8000]}, then)
    assert bad["below"] == [4000] and bad["common"] == 2
    data: dict[str, Any] = {
        "reference": {
            k: (v if k != "val" else {str(s): a for s, a in v.items()}) for k, v in ref.items()
        }
    }
    data.update(
        val={"4000": then[4000] - 0.10},
        results={"status": "stopped", "step": 4100, "steps_per_sec": 55.0},
        data_s=3.0,
    )
    text = render({"parts": {"learning": {"title": "(d) ListOps", "status": "fail", "data": data}}})
    assert "| 4000 | 26.4% | 36.4% | -10.0% |" in text
    assert "**FLAG: this run is more than 5% below the reference at step(s) 4000" in text
    assert "Trainer: stopped, step 4100, 55.0 steps/s" in text


@pytest.mark.slow
def test_listops_data_is_the_official_format(tmp_path):
    from experiments.lra.tasks import load_task

    # In a process of its own, as the check runs it (its pool forks; this one has JAX).
    config = {"root": str(tmp_path), "counts": [6, 2, 2], "seed": 0, "workers": 2}
    records = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-m", "experiments.gpu_check._worker", "listops-data"]
    cmd += [json.dumps(config), str(records), "0"]
    subprocess.run(cmd, cwd=REPO, env=_machine.child_env(dry=True), check=True, timeout=300)
    assert _jobs.read_records(records)[0]["event"] == "data"
    data = load_task("listops", tmp_path)
    assert data.sizes == {"train": 6, "val": 2, "test": 2} and 500 < data.seq_len <= 2000
    argv = _listops.train_argv(tmp_path, tmp_path / "run", argv=["--steps", "7"], time_limit_s=90)
    from experiments.lra import train

    args = train.parse_args(argv)
    assert (args.task, args.steps, args.time_limit, args.no_progress) == ("listops", 7, 1.5, True)


# --------------------------------------------------------------------------- the report


def test_report_is_written_whole_and_says_what_ran(tmp_path):
    state = {
        "title": "GPU check", "budget_s": 480, "started": "2026-01-01 00:00:00 UTC",
        "elapsed_s": 95.2, "status": "running", "plan": _plan.plan_rows(480),
        "machine": {
            "backend": "gpu", "jax": "0.11.2", "jaxlib": "0.11.2", "python": "3.12.1",
            "platform_version": "cuda 13000", "devices": ["NVIDIA H100 80GB HBM3"],
            "nvidia_smi": ["NVIDIA H100 80GB HBM3, 580.65.06, 81559 MiB"], "commit": "abc1234",
        },
        "parts": {
            "tests": {
                "title": "(a) tests", "status": "pass", "seconds": 95.2, "allowed_s": 120,
                "summary": "300 passed",
            },
            "layer": {"title": "(b) layer", "status": "running", "seconds": 0, "summary": ""},
        },
    }  # fmt: skip
    write_report(tmp_path, state)
    assert json.loads((tmp_path / "report.json").read_text()) == state
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# GPU check: INCOMPLETE\n")
    for needle in (
        "1 x NVIDIA H100 80GB HBM3",
        "driver: 580.65.06",
        "JAX 0.11.2, jaxlib 0.11.2",
        "commit: `abc1234`",
        "| (a) tests | PASS | 95 s (120 s) | 300 passed |",
        "| (b) layer | RUNNING | 0 s |",
        "| (d) ListOps at Table 9 size | the time left (about 153 s) |",
    ):
        assert needle in text, needle
    state["status"] = "finished"
    assert render(state).startswith("# GPU check: PASS")
    state["parts"]["layer"]["status"] = "fail"
    assert render(state).startswith("# GPU check: FAIL")
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left


def test_main_saves_the_report_after_each_part_and_fails_on_any_failure(tmp_path, monkeypatch):
    from experiments.gpu_check import _main

    seen = []

    def ok(check):
        seen.append(_state_on_disk(check.out)["parts"]["tests"]["status"])
        check.part("tests").update(status="pass", summary="9 passed")

    def broken(check):
        seen.append(_state_on_disk(check.out)["parts"]["tests"]["status"])  # saved before
        raise RuntimeError("the layer blew up")

    monkeypatch.setitem(_parts.PART_RUNNERS, "tests", ok)
    monkeypatch.setitem(_parts.PART_RUNNERS, "layer", broken)
    info = {"backend": "gpu", "devices": ["H100"]}
    rc = _main.run(tmp_path, budget=60, dry=True, parts=["tests", "layer"], info=info)
    assert rc == 1 and seen == ["running", "pass"]
    state = _state_on_disk(tmp_path)
    assert state["status"] == "finished" and state["parts"]["memory"]["status"] == "skipped"
    assert (
        state["parts"]["layer"]["summary"]
        == "the check itself failed: RuntimeError: the layer blew up"
    )
    assert "RuntimeError: the layer blew up" in (tmp_path / "report.md").read_text()
    assert _main.run(tmp_path, budget=60, dry=True, parts=["tests"], info=info) == 0


def _state_on_disk(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())

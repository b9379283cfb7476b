"""The benchmarks check every file they will write before they measure (issue 27).

`--out` and `--json` given on the command line were checked by argparse already
(test_cli_flags.py); these are the paths a run derives: the JSON file beside `--out`, the
default tables beside the benchmark, and the streaming benchmark's own `--out`/`--json`.
Each was found unwritable only after minutes of measuring. The measuring functions are
replaced by ones that fail the test if called.
"""

import importlib

import jax
import pytest

bench = importlib.import_module("experiments.bench.__main__")
streaming = importlib.import_module("experiments.bench.streaming")


@pytest.fixture
def no_measuring(monkeypatch):
    def measured(*args, **kwargs):
        raise AssertionError("measured before checking the output paths")

    monkeypatch.setattr(bench, "run", measured)
    monkeypatch.setattr(streaming, "measure", measured)


def _error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert "error: " in lines[-1], lines  # argparse's `prog: error: ...`, after the usage
    return lines[-1]


@pytest.mark.usefixtures("no_measuring")
def test_the_json_file_beside_out_is_checked_first(tmp_path, capsys):
    (tmp_path / f"results-{jax.default_backend()}.json").mkdir()  # a folder in its place
    with pytest.raises(SystemExit) as excinfo:
        bench.main(["--grid", "quick", "--out", str(tmp_path / "table.md")])
    assert excinfo.value.code == 2
    error = _error(capsys)
    assert "error: --json: " in error and "is a folder; give a file name" in error


@pytest.mark.usefixtures("no_measuring")
def test_the_default_tables_are_checked_first(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "missing"
    monkeypatch.setattr(bench, "HERE", str(missing))
    with pytest.raises(SystemExit) as excinfo:
        bench.main(["--grid", "reduced"])  # RESULTS-<backend>.md in HERE
    assert excinfo.value.code == 2
    assert "error: --out: the folder" in _error(capsys)
    monkeypatch.setattr(streaming, "HERE", str(missing))
    with pytest.raises(SystemExit):
        bench.main(["--grid", "reduced", "--out", str(tmp_path / "table.md")])
    assert "error: the streaming table: the folder" in _error(capsys)


@pytest.mark.usefixtures("no_measuring")
def test_the_streaming_benchmark_checks_its_outputs_first(tmp_path, capsys, monkeypatch):
    for argv, expected in [
        (["--out", str(tmp_path / "missing" / "s.md")], "argument --out: the folder"),
        (["--quick", "--json", str(tmp_path)], "argument --json: "),
    ]:
        with pytest.raises(SystemExit) as excinfo:
            streaming.main(argv)
        assert excinfo.value.code == 2
        assert expected in _error(capsys)
    monkeypatch.setattr(streaming, "HERE", str(tmp_path / "missing"))
    with pytest.raises(SystemExit):
        streaming.main([])
    assert "error: the default --out: the folder" in _error(capsys)

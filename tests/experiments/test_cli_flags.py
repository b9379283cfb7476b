"""Cases of bad flags and existing outputs that need more than the walk over every
command's flags (`test_entry_points.py`, from the list in `entry_points.py`): a command's
work that must not start, files that must stay as they were (issue 20).
"""

import importlib

import pytest


def _status(main, argv) -> int | str:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return 0 if code is None else code


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "module, argv, expected",
    [
        (
            "experiments.lra.memory",
            ["--time-batch", "-4"],
            "argument --time-batch: expected an integer >= 1",
        ),
        (
            "experiments.lra.memory",
            ["--repeats", "0"],
            "argument --repeats: expected an integer >= 1",
        ),
        ("experiments.demo", ["--steps", "0"], "argument --steps: expected an integer >= 1"),
        ("experiments.demo", ["--out", "FILE/sub"], "argument --out: "),
        (
            "experiments.bench.__main__",
            ["--out", "MISSING/results.md"],
            "argument --out: the folder",
        ),
        ("experiments.bench.__main__", ["--json", "TMP"], "argument --json: "),
        (
            "experiments.lra.generate",
            ["--task", "listops", "--out", "TMP", "--size", "0"],
            "argument --size",
        ),
    ],
)
def test_commands_answer_bad_flags_with_one_line_before_any_work(
    module, argv, expected, tmp_path, capsys
):
    """`demo --steps 0` used to run part 1 (20 s) and then print the trainer's usage;
    `memory --time-batch -4` and bench's unwritable --out failed deep inside (or at the end)."""
    (tmp_path / "file").write_text("x")
    argv = [
        a.replace("FILE", str(tmp_path / "file"))
        .replace("MISSING", str(tmp_path / "missing"))
        .replace("TMP", str(tmp_path))
        for a in argv
    ]
    main = importlib.import_module(module).main
    assert _status(main, argv) == 2
    assert expected in _one_error_line(capsys)


def test_generate_refuses_to_replace_existing_files(tmp_path, capsys):
    """`generate --task listops --out DATA` used to replace existing files silently."""
    from experiments.lra import generate

    argv = [
        "--task",
        "listops",
        "--out",
        str(tmp_path),
        "--split-sizes",
        "3",
        "4",
        "5",
        "--min-length",
        "5",
        "--max-length",
        "30",
    ]
    assert generate.main(argv) == 0
    train = tmp_path / "listops-1000" / "basic_train.tsv"
    before = train.read_text()
    capsys.readouterr()
    assert generate.main(argv[:-4] + ["--seed", "1"] + argv[-4:]) == 2
    line = _one_error_line(capsys)
    assert "already holds basic_train.tsv" in line and "--overwrite" in line
    assert train.read_text() == before
    assert generate.main(argv + ["--seed", "1", "--overwrite"]) == 0
    assert train.read_text() != before


def test_bench_resume_with_a_damaged_results_file_is_one_line(tmp_path, capsys):
    from experiments.bench import __main__ as bench

    results = tmp_path / "results.json"
    results.write_text('{"memory": {')
    assert _status(bench.main, ["--quick", "--json", str(results), "--resume"]) == 2
    assert "is not a valid results file" in _one_error_line(capsys)
    assert results.read_text() == '{"memory": {'  # left as it was


def test_the_demo_recognises_its_folder_by_its_record_not_by_names(tmp_path, capsys):
    """The demo called any `data/`, `complex/` or `real/` in --out its own, and with
    --overwrite removed them whole (`shutil.rmtree`), the user's files in them too."""
    from experiments import demo

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "mine.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit) as e:
            demo.main(["--out", str(tmp_path), *extra])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"{tmp_path / 'data'} exists and was not written by `demo`" in err, err
    assert (tmp_path / "data" / "mine.txt").read_text() == "mine"

"""Every command of `experiments/` answers a bad flag with one `error:` line and status 2,
at parse time, before any work (issue 20).

`test_every_numeric_flag_refuses_bad_values` walks the parsers themselves: every option
whose `type` turns "1" into a number is given "abc", "nan", "inf", "1e400", "-4" and "0";
the first four must always be refused, "-4" and "0" unless the flag is listed below as
accepting them. A flag added later with a bare `type=int` fails here until it is checked.
"""

import argparse
import importlib

import pytest


def _commands():
    """name -> (module, argv that satisfies the required flags)."""
    out = {
        "train": ("experiments.lra.cli", ["--out", "OUT"]),
        "generate": ("experiments.lra.generate", ["--task", "listops", "--out", "OUT"]),
        "memory": ("experiments.lra.memory", []),
        "bench": ("experiments.bench.__main__", []),
        "demo": ("experiments.demo", []),
        "gpu_check": ("experiments.gpu_check", []),
        "paper": ("experiments.paper.common", []),  # every figure script's flags
        "ladder": ("experiments.paper.ladder", []),
    }
    for name in ("experiments.export", "experiments.export.__main__"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "_parser"):
            out["export"] = (name, [])
            break
    return out


COMMANDS = _commands()
#: Flags for which 0 is a valid value (a seed, a lower bound, a rate).
ZERO_OK = {
    "train": {"--seed", "--weight-decay", "--dropout", "--warmup-fraction", "--r-min", "--r-max"},
    "generate": {"--seed", "--min-length"},
    "demo": {"--seed"},
    "export": {"--seed"},
    "gpu_check": {"--workers"},
    "paper": {"--seed"},
    "ladder": {"--seed", "--data-seed", "--weight-decay", "--warmup-fraction"},
}
#: Flags for which a negative value is valid: none so far.
NEGATIVE_OK: dict[str, set[str]] = {}


def _parser(name) -> argparse.ArgumentParser:
    return importlib.import_module(COMMANDS[name][0])._parser()


def _numeric_options(parser):
    for action in parser._actions:
        if not action.option_strings or action.type is None or action.nargs == 0:
            continue
        try:
            sample = action.type("1")
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        if isinstance(sample, int | float) and not isinstance(sample, bool):
            yield action


def _numeric_flags():
    for name in COMMANDS:
        for action in _numeric_options(_parser(name)):
            yield name, action.option_strings[-1]


@pytest.mark.parametrize("name, flag", list(_numeric_flags()))
def test_every_numeric_flag_refuses_bad_values(name, flag, tmp_path, capsys):
    parser = _parser(name)
    (action,) = [a for a in parser._actions if flag in a.option_strings]
    base = [str(tmp_path / "out") if a == "OUT" else a for a in COMMANDS[name][1]]
    count = action.nargs if isinstance(action.nargs, int) else 1
    bad = ["abc", "nan", "inf", "1e400"]
    bad += [] if flag in NEGATIVE_OK.get(name, set()) else ["-4"]
    bad += [] if flag in ZERO_OK.get(name, set()) else ["0"]
    for value in bad:
        with pytest.raises(SystemExit) as e:
            parser.parse_args(base + [flag] + [value] * count)
        assert e.value.code == 2, (flag, value)
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if "error:" in line]
        assert len(lines) == 1 and f"argument {flag}" in lines[0] and "Traceback" not in err, (
            flag,
            value,
            err,
        )


def test_the_walk_covers_the_known_flags():
    flags = set(_numeric_flags())
    for expected in [
        ("memory", "--time-batch"),
        ("memory", "--repeats"),
        ("memory", "--time-length"),
        ("demo", "--steps"),
        ("demo", "--seed"),
        ("train", "--batch-size"),
        ("train", "--time-limit"),
        ("generate", "--size"),
        ("generate", "--workers"),
    ]:
        assert expected in flags, expected


def _status(main, argv) -> int:
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

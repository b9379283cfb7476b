"""Every command of `entry_points.COMMANDS` conforms (issue 32 item 2):

(a) `--help` answers before JAX is imported, with a help line and a default for every flag;
(b) a bad value of every numeric, text or path flag (out of range, zero, negative, huge,
    not a number, not UTF-8, a path under a file or missing) is one `error:` line naming
    the flag, status 2, no traceback;
(c) a command that writes files refuses to replace an existing output without
    `--overwrite`, and says so (one that writes a run folder also offers `--resume`).

Each command's cases run in one child process (`entry_points.py`'s probe: one start-up for
all of them), started once per command and shared by its three tests.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from entry_points import COMMANDS, WORKERS, Command, bad_values

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("entry_points.py")
#: Seconds a case may run: a refusal takes well under one (the first case also imports the
#: command: up to tens of seconds on a loaded machine); a value wrongly accepted starts the
#: real work, which is cut here (and the command's later cases are skipped).
CASE_TIMEOUT = 60

_BY_NAME = {c.name: c for c in COMMANDS}


def _marks(command: Command) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.xdist_group(command.name)]
    marks += [pytest.mark.slow] if command.slow else []
    if command.xfail is not None:
        marks.append(pytest.mark.xfail(reason=command.xfail, run=command.xfail_run))
    return marks


_PARAMS = [pytest.param(c.name, marks=_marks(c)) for c in COMMANDS]
_WRITERS = [p for p, c in zip(_PARAMS, COMMANDS, strict=True) if c.writes is not None]


def _main_modules() -> set[str]:
    """Every module of `experiments/` with a `__main__` block."""
    found = set()
    for path in (ROOT / "experiments").rglob("*.py"):
        if re.search(r"^if __name__ == .__main__.:", path.read_text(), re.MULTILINE):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found.add(".".join(parts[:-1] if parts[-1] == "__main__" else parts))
    return found


def test_the_list_holds_every_command():
    listed = {c.module for c in COMMANDS} | set(WORKERS)
    assert _main_modules() == listed


def _cases(command: Command) -> list[tuple[str, list[str]]]:
    """(what, argv) for one command: --help, every flag's bad values, the overwrite case."""
    cases = [("help", [*command.prefix, "--help"])]
    base = [*command.prefix, *command.argv.split()]
    for flag, (kind, count) in command.kinds().items():
        rest = _without(base, flag)
        cases += [(flag, [*rest, flag, *[value] * count]) for value in bad_values(kind)]
    if command.writes not in (None, "?"):
        cases.append(("overwrite", [*command.prefix, *command.argv.split()]))
    return cases


def _without(argv: list[str], flag: str) -> list[str]:
    """`argv` without `flag` and its value (so that the bad value is the only one)."""
    if flag not in argv:
        return argv
    i = argv.index(flag)
    return argv[:i] + argv[i + 2 :]


def _filled(argv: list[str], tmp: Path, what: str) -> list[str]:
    out = tmp / ("existing" if what == "overwrite" else "out")
    values = dict(out=out, run=tmp / "run", file=tmp / "file", missing=tmp / "missing")
    return [a.format(**values) for a in argv]


_RESULTS: dict[str, list[dict]] = {}


def _probe(name: str, tmp: Path) -> list[dict]:
    """Run every case of command `name` in one child process (in `tmp`), once."""
    if name not in _RESULTS:
        _RESULTS[name] = _run_probe(_BY_NAME[name], tmp)
    return _RESULTS[name]


def _run_probe(command: Command, tmp: Path) -> list[dict]:
    (tmp / "run").mkdir()
    (tmp / "out").mkdir()
    (tmp / "file").write_text("a file")
    existing = None
    if command.writes not in (None, "?"):
        existing = Path(command.writes.format(out=tmp / "existing"))
        existing.parent.mkdir(parents=True)
        existing.write_text("written before")
    cases = _cases(command)
    request = dict(
        module=command.module,
        cases=[_filled(argv, tmp, what) for what, argv in cases],
        timeout=CASE_TIMEOUT,
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, str(PROBE)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=tmp,
        env=env,
        timeout=CASE_TIMEOUT * 10,
    )
    assert proc.returncode == 0, _shown(proc.stderr[-3000:])
    results = json.loads(proc.stdout)
    for (what, _), result in zip(cases, results, strict=True):
        result["what"] = what
        if existing is not None and what == "overwrite":
            result["kept"] = existing.read_text() == "written before"
    return results


@pytest.fixture
def probe(tmp_path_factory):
    def run(name: str) -> list[dict]:
        if name in _RESULTS:
            return _RESULTS[name]
        return _probe(name, tmp_path_factory.mktemp(name.replace(" ", "-")))

    return run


def _shown(text: str) -> str:
    """`text` with what is not UTF-8 escaped (pytest-xdist sends reports as UTF-8)."""
    return text.encode("utf-8", "backslashreplace").decode()


def _error_lines(result: dict) -> list[str]:
    return [line for line in result["err"].splitlines() if "error:" in line]


@pytest.mark.parametrize("name", _PARAMS)
def test_help_answers_before_jax_with_every_default(name, probe):
    (help_result,) = [r for r in probe(name) if r["what"] == "help"]
    assert help_result["status"] == 0, _shown(help_result["err"][-2000:])
    problems = ["--help imported JAX (parse argv first)"] if help_result["jax"] else []
    value_flags = set()
    for action in help_result["actions"]:
        flag = action["flags"][-1]
        if action["is_help"] or action["suppressed"]:
            continue
        text = action["help"] or ""
        if not text.strip():
            problems.append(f"{flag}: no help line")
        elif not action["required"] and not re.search(r"\[[^\]]+\]\s*$", text):
            problems.append(f"{flag}: no [default] at the end of {text!r}")
        repeated = re.search(r"\b(\w+) \1\b", text)
        if repeated:
            problems.append(f"{flag}: {repeated.group(0)!r} in {text!r}")
        if action["nargs"] != 0 and not action["choices"]:
            value_flags.add(flag)
    listed = set(_BY_NAME[name].kinds())
    assert not problems, "\n".join(problems)
    assert value_flags == listed, (
        f"flags taking a value but not in entry_points.py: {sorted(value_flags - listed)}; "
        f"listed but not in the parser: {sorted(listed - value_flags)}"
    )


@pytest.mark.parametrize("name", _PARAMS)
def test_bad_values_are_one_line_naming_the_flag(name, probe):
    problems = []
    for result in probe(name):
        flag = result["what"]
        if not flag.startswith("--"):
            continue
        lines = _error_lines(result)
        ok = (
            result["status"] == 2
            and "Traceback" not in result["err"]
            and len(lines) == 1
            and flag in lines[0]
        )
        if not ok:
            tail = result["err"].strip().splitlines()[-1:] or ["(nothing on stderr)"]
            problems.append(
                _shown(f"{' '.join(result['argv'])!r}: status {result['status']}, {tail[0]}")
            )
    assert not problems, f"{len(problems)} bad values not refused as one line:\n" + "\n".join(
        problems
    )


@pytest.mark.parametrize("name", _WRITERS)
def test_an_existing_output_needs_overwrite(name, probe):
    results = probe(name)
    (help_result,) = [r for r in results if r["what"] == "help"]
    flags = {f for a in help_result["actions"] for f in a["flags"]}
    assert "--overwrite" in flags, f"{name} writes files but has no --overwrite"
    if _BY_NAME[name].run_folder:
        assert "--resume" in flags, f"{name} writes a run folder but has no --resume"
    if _BY_NAME[name].writes == "?":
        return
    (result,) = [r for r in results if r["what"] == "overwrite"]
    lines = _error_lines(result)
    assert result["status"] == 2 and len(lines) == 1 and "--overwrite" in lines[0], (
        result["status"],
        _shown(result["err"][-2000:]),
    )
    assert result["kept"], "the existing output was changed"

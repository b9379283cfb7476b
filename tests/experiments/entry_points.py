"""Every `python -m` command of the repository, one line each: what the entry-point tests
(`test_entry_points.py`) check every command against (as `tests/lib/conformance.py` lists
the cores).

A `Command` is the module run by `python -m` (with its sub-command), the arguments that
satisfy its required flags, every flag that takes a value with its kind, and what it
writes. A new command is one line in `COMMANDS`; a new flag is one word in its line (the
tests refuse a parser whose value-taking flags differ from the line's).

**Kinds** of flags: numbers as `int[1,]` (an integer >= 1), `int[1,256]`, `float(0,]`
(> 0), `float[0,1)` ..., an interval whose open end is unbounded (an integer flag still
refuses 10**30 and 2**63: no count, size or seed is that large); `text`; paths as `out`
(a folder or file the command writes), `in` (a folder or file it reads). A flag taking
several values is written `--flag=KIND*N`. Flags with `choices` and switches take no kind
(argparse checks them).

**Placeholders** in arguments and paths, filled by the tests: `{out}` (an empty folder;
in the overwrite case, one holding the file the command writes), `{run}` (an empty
folder), `{file}` (a regular file), `{missing}` (a path that does not exist).

`python tests/experiments/entry_points.py` is the probe the tests run in a child process:
it reads a module and argument lists as JSON on stdin, runs each as `python -m` would
(`runpy`, in this one process, so one start-up serves every case), and writes each
case's exit status, stderr and whether JAX was imported as JSON on stdout.
"""

import dataclasses
import re

__all__ = ["Command", "COMMANDS", "WORKERS", "bad_values"]


@dataclasses.dataclass(frozen=True)
class Command:
    """One `python -m` command.

    - `name`: the module and sub-command, as typed after `python -m`;
    - `argv`: the arguments its required flags need (placeholders allowed);
    - `flags`: `--flag=KIND` words, every flag that takes a value but has no `choices`;
    - `writes`: a file (placeholders) the command writes given `argv`, or None: with it
      there already, the command refuses to start without `--overwrite` and names it;
      `"?"`: it writes files, but only from a real run (its refusal is tested by its own
      tests), so only the presence of `--overwrite` is checked here;
    - `run_folder`: it writes a run folder (checkpoints, `--resume`);
    - `owner`: who owns the command's files (named by a failure's note);
    - `slow`: its probe takes more than a few seconds (it imports JAX before it parses, or
      has a hundred cases);
    - `xfail`: why the command does not conform yet, naming its owner (None: it does);
      `xfail_run`: whether to run it anyway (False where a wrongly accepted value starts
      minutes of work).
    """

    name: str
    argv: str = ""
    flags: str = ""
    writes: str | None = None
    run_folder: bool = False
    owner: str = "entry"
    slow: bool = False
    xfail: str | None = None
    xfail_run: bool = True

    @property
    def module(self) -> str:
        return self.name.split()[0]

    @property
    def prefix(self) -> list[str]:
        """The sub-command, if any (what follows the module on the command line)."""
        return self.name.split()[1:]

    def kinds(self) -> dict[str, tuple[str, int]]:
        """flag -> (kind, how many values)."""
        out = {}
        for word in self.flags.split():
            flag, kind = word.split("=")
            kind, _, count = kind.partition("*")
            out[flag] = (kind, int(count or 1))
        return out


_LRA_TRAIN_FLAGS = (
    "--out=out --depth=int[1,] --d-model=int[1,] --d-state=int[1,] --steps=int[1,] "
    "--batch-size=int[1,] --lr=float(0,] --lr-factor=float(0,] --weight-decay=float[0,] "
    "--dropout=float[0,1) --warmup-fraction=float[0,1] --r-min=float[0,1) --r-max=float[0,1) "
    "--max-phase=float(0,] --seed=int[0,] --max-examples=int[1,] --blocks=int[1,] "
    "--dt-min=float(0,] --dt-max=float(0,] --data-root=in --cache-dir=out "
    "--eval-every=int[1,] --checkpoint-every=int[1,] --log-every=int[1,] "
    "--eval-batch-size=int[1,] --sequence-parallel=int[1,] --save-signals=text "
    "--stop-at=int[1,] --time-limit=float(0,]"
)
_LM_TRAIN_FLAGS = (
    "--out=out --stop-at=int[1,] --time-limit=float(0,] --depth=int[1,] --d-model=int[1,] "
    "--d-state=int[1,] --r-min=float[0,1) --r-max=float[0,1) --max-phase=float(0,] "
    "--dropout=float[0,1) --streams=int[1,] --chunk=int[1,] --steps=int[1,] --lr=float(0,] "
    "--lr-factor=float(0,] --weight-decay=float[0,] --warmup-fraction=float[0,1] "
    "--seed=int[0,] --train-bytes=int[1,] --val-bytes=int[1,] --test-bytes=int[1,] "
    "--eval-streams=int[1,] --eval-chunk=int[1,] --corpus=in --eval-every=int[1,] "
    "--log-every=int[1,] --checkpoint-every=int[1,] --save-signals=text"
)
_LADDER_FLAGS = (
    "--out=out --seeds=int[1,] --seed=int[0,] --rungs=text --data-seed=int[0,] "
    "--n-train=int[1,] --n-test=int[1,] --length=int[1,] --min-length=int[1,] "
    "--max-length=int[1,] --depth=int[1,] --d-model=int[1,] --d-state=int[1,] "
    "--steps=int[1,] --batch-size=int[1,] --lr=float(0,] --log-every=int[1,] "
    "--lr-factor=float(0,] --weight-decay=float[0,] --warmup-fraction=float[0,1]"
)
_FIGURE = "--out=out --seed=int[0,]"


def _figure(module: str) -> Command:
    """A figure script of `experiments/paper` or `experiments/ldstack`: NAME.png and
    NAME.json under --out."""
    name = module.rsplit(".", 1)[1]
    return Command(module, "--fast --out {out}", _FIGURE, writes=f"{{out}}/{name}.png")


COMMANDS: tuple[Command, ...] = (
    Command("experiments.lra.train", "--task listops --data-root {run} --out {out}",
            _LRA_TRAIN_FLAGS, writes="{out}/config.json", run_folder=True, owner="harness",
            slow=True),
    Command("experiments.lra.generate", "--task listops --out {out}",
            "--out=out --size=int[1,] --seed=int[0,] --min-length=int[0,] --max-length=int[1,] "
            "--max-depth=int[1,] --max-args=int[2,] --split-sizes=int[1,]*3 "
            "--resolution=int[16,] --images-per-batch=int[1,] --workers=int[1,]",
            writes="{out}/listops-1000/basic_train.tsv"),
    Command("experiments.lra.memory", "",
            "--time-length=int[1,] --time-batch=int[1,] --repeats=int[1,] "
            "--sequence-parallel=int[1,] --length=int[1,] --batch=int[1,]"),
    Command("experiments.lm train", "--out {out}", _LM_TRAIN_FLAGS, writes="{out}/config.json",
            run_folder=True, owner="lm", slow=True),
    Command("experiments.lm sample", "--run {run}",
            "--run=in --prompt=text --length=int[1,] --temperature=float[0,] "
            "--top-k=int[1,256] --seed=int[0,] --samples=int[1,]", owner="lm", slow=True),
    Command("experiments.lm export", "--run {run} --format onnx", "--run=in --dest=out",
            writes="?", owner="lm", slow=True),
    Command("experiments.lm.plot", "--run {run} --out {out}/curve.png",
            "--run=in --out=out --title=text", writes="{out}/curve.png", owner="lm"),
    Command("experiments.export", "--run {run} --format onnx", "--run=in --dest=out",
            writes="?", owner="harness", slow=True),
    Command("experiments.demo", "--out {out}",
            "--seed=int[0,] --out=out --steps=int[1,]", writes="{out}/complex/config.json"),
    Command("experiments.bench", "--grid quick --out {out}/results.md",
            "--out=out --json=out", writes="{out}/results.md", slow=True),
    Command("experiments.bench.streaming", "--quick --out {out}/streaming.md",
            "--out=out --json=out", writes="{out}/streaming.md", owner="perf", slow=True),
    Command("experiments.bench.streams", "--quick --out {out}/streams.md",
            "--out=out --json=out --onnx=in", writes="{out}/streams.md", owner="perf", slow=True),
    Command("experiments.bench.streams_claims", "--quick --out {out}/claims.md",
            "--rounds=int[1,] --out=out", writes="{out}/claims.md", owner="perf", slow=True),
    Command("experiments.bench.floor", "--lengths 16 --rounds 1",
            "--lengths=int[1,] --rounds=int[1,]", owner="floor"),
    Command("experiments.gpu_check", "--dry-run --out {out}",
            "--budget=float[10,86400] --out=out --parts=text", writes="{out}/report.json"),
    Command("experiments.paper.ladder", "--fast --out {out}", _LADDER_FLAGS,
            writes="{out}/ladder.json", slow=True),
    Command("experiments.statetracking.train", "--steps 1",
            "--seed=int[0,] --steps=int[1,] --train-length=int[1,4096] --d-model=int[1,] "
            "--d-state=int[1,] --depth=int[1,] --batch=int[1,] --test-sequences=int[1,] "
            "--learning-rate=float(0,] --weight-decay=float[0,] --label-smoothing=float[0,1) "
            "--out=out",
            writes="?", owner="blocks"),
    Command("experiments.statetracking.table", "--seeds 1 --out {out}/table.md",
            "--seeds=int[1,] --steps=int[1,] --train-length=int[1,4096] --d-model=int[1,] "
            "--d-state=int[1,] --depth=int[1,] --batch=int[1,] --learning-rate=float(0,] "
            "--weight-decay=float[0,] --label-smoothing=float[0,1) --results=out --out=out",
            writes="{out}/table.md", owner="blocks"),
    *map(_figure, (
        "experiments.paper.conv_kernel", "experiments.paper.forward_blowup",
        "experiments.paper.impulse_response", "experiments.paper.parameterization",
        "experiments.paper.ring_init", "experiments.paper.spectrum",
        "experiments.ldstack.projections", "experiments.ldstack.stack",
    )),
)  # fmt: skip

#: Modules with a `__main__` block that are not commands: children their parent command
#: starts with a JSON argument (the bench's measurements, the GPU check's parts).
WORKERS = (
    "experiments.bench.extras",
    "experiments.bench.interleave",
    "experiments.bench.measure",
    "experiments.bench.model",
    "experiments.gpu_check._launch",
    "experiments.gpu_check._worker",
)

#: What Python makes of the byte 0xff in `sys.argv` (a surrogate escape).
NOT_UTF8 = "\udcff"
_HUGE = ("1" + "0" * 30, str(2**63))
_INTERVAL = re.compile(r"(int|float)([\[(])([^,]*),([^\])]*)([\])])$")


def bad_values(kind: str) -> list[str]:
    """The values a flag of `kind` must refuse: out of its range on both sides, zero and
    negative where the range excludes them, huge, not a number, not UTF-8, a path under a
    regular file (written) or missing (read)."""
    if kind == "text":
        return [NOT_UTF8]
    if kind == "out":
        return [NOT_UTF8, "{file}/sub"]
    if kind == "in":
        return [NOT_UTF8, "{missing}"]
    match = _INTERVAL.match(kind)
    assert match is not None, f"unknown kind {kind!r}"
    number, left, low_text, high_text, right = match.groups()
    low = float(low_text) if low_text else None
    high = float(high_text) if high_text else None
    bad = ["abc", "nan", "inf", "-inf", "1e400", *(_HUGE if number == "int" else ())]
    if number == "int":
        bad.append("1.5")
    if low is not None:
        bad.append(_text(low if left == "(" else low - 1))
        bad += [v for v in ("0", "-4") if float(v) < low or (v == "0" and left == "(" and low == 0)]
    if high is not None:
        bad.append(_text(high if right == ")" else (high + 1 if number == "int" else high * 1.5)))
    return list(dict.fromkeys(bad))


def _text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


# --------------------------------------------------------------------------- the probe


class _Timeout(BaseException):
    """A case ran past its time (raised by SIGALRM; not an `Exception`, so that the
    command's own handlers let it through)."""


def _on_alarm(signum, frame):
    raise _Timeout


def _actions(parser) -> list[dict]:
    """What the tests check of each option of the parser that printed `--help`."""
    import argparse

    return [
        dict(
            flags=a.option_strings,
            help=a.help,
            required=a.required,
            nargs=a.nargs,
            choices=a.choices is not None,
            suppressed=a.help == argparse.SUPPRESS,
            is_help=isinstance(a, argparse._HelpAction),
        )
        for a in parser._actions
        if a.option_strings
    ]


def _run_case(module: str, argv: list[str], timeout: int) -> dict:
    """`python -m module *argv` in this process: its status (or "timeout"), stderr and
    stdout (their ends), and whether JAX is imported after it."""
    import contextlib
    import io
    import runpy
    import signal
    import sys
    import traceback

    sys.argv = [module, *argv]
    err, out = io.StringIO(), io.StringIO()
    status: int | str = 0
    signal.alarm(timeout)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if isinstance(e.code, str):
            err.write(e.code + "\n")
    except _Timeout:
        status = "timeout"
    except BaseException:  # a traceback is what the tests look for
        status = 1
        err.write("Traceback (most recent call last):\n" + traceback.format_exc())
    finally:
        signal.alarm(0)
    return dict(
        argv=argv,
        status=status,
        err=err.getvalue()[-4000:],
        out=out.getvalue()[-4000:],
        jax="jax" in sys.modules,
    )


def _probe() -> None:
    """Run each case of the JSON on stdin as `python -m MODULE ARGS...` in this process;
    after a case that timed out, the rest are skipped (unless `stop_at_timeout` is false)."""
    import argparse
    import json
    import os
    import signal
    import sys
    import warnings

    warnings.simplefilter("ignore")
    request = json.load(sys.stdin)
    real_stdout, real_stderr = os.fdopen(os.dup(1), "w"), os.fdopen(os.dup(2), "w")
    recorded: list[argparse.ArgumentParser] = []
    print_help = argparse.ArgumentParser.print_help

    def recording_print_help(self, file=None):
        recorded.append(self)
        print_help(self, file)

    argparse.ArgumentParser.print_help = recording_print_help  # type: ignore[method-assign]
    signal.signal(signal.SIGALRM, _on_alarm)
    results = []
    for argv in request["cases"]:
        if request.get("stop_at_timeout", True) and any(r["status"] == "timeout" for r in results):
            results.append(dict(argv=argv, status="skipped after a timeout", err="", jax=None))
            continue
        print("case:", argv, file=real_stderr, flush=True)  # where a hung probe stopped
        result = _run_case(request["module"], argv, request["timeout"])
        result["actions"] = _actions(recorded.pop()) if recorded else []
        results.append(result)
    json.dump(results, real_stdout)
    real_stdout.flush()


if __name__ == "__main__":
    _probe()

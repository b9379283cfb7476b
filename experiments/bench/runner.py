"""Running the benchmark's measurements: `Runner` (child processes, or this one for the
quick grid, each result kept in the JSON file as it comes, written atomically, so an
interrupted run can `--resume`) and `run`, the order of the measurements."""

import json
import os
import subprocess
import sys
import time

from experiments.runs.atomic import write_atomic

from .grids import SECTIONS

__all__ = ["Runner", "run", "model_specs", "spec_key", "log"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HUGETLB = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def spec_key(spec):
    return json.dumps(spec, sort_keys=True)


def _child(module, *argv, env_extra=None, timeout=3600):
    """Run `python -m experiments.bench.<module> argv...` and return its last JSON line."""
    proc = subprocess.run(
        [sys.executable, "-m", f"experiments.bench.{module}", *argv],
        cwd=ROOT,
        env=dict(os.environ, **(env_extra or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [x for x in proc.stdout.splitlines() if x[:1] in "[{"]
    if proc.returncode or not lines:
        # The exception's own line only: the traceback above it names this machine's paths.
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    return json.loads(lines[-1])


class Runner:
    """Runs measurements (in child processes, or in this one for `--quick`) and keeps them
    in a JSON file, keyed by their spec, so that an interrupted run can `--resume`."""

    def __init__(self, path, *, in_process, resume):
        self.path, self.in_process = path, in_process
        self.data = {section: {} for section in SECTIONS}
        if resume and path and os.path.exists(path):
            with open(path) as f:
                saved = json.load(f)
            for section in SECTIONS:
                self.data[section].update(saved.get(section, {}))

    def get(self, section, spec, compute):
        key = spec_key(spec)
        cached = self.data[section].get(key)
        if cached is not None and "error" not in cached:
            return cached
        start = time.time()
        result = compute()
        self.data[section][key] = result
        if self.path:
            write_atomic(self.path, json.dumps(self.data, indent=1).encode())
        log(f"  {section} {spec} -> {_summary(result)} [{time.time() - start:.0f} s]")
        return result

    # --- the measurements ---------------------------------------------------------------

    def memory(self, case):
        """Peak RSS (and temp, one timed call) of one case in its own process."""
        from .measure import run_case

        return self.get(
            "memory",
            case,
            lambda: run_case(case) if self.in_process else _child("measure", json.dumps(case)),
        )

    def interleaved(self, section, spec):
        from . import interleave

        return self.get(
            section,
            spec,
            lambda: (
                interleave.run(spec) if self.in_process else _child("interleave", json.dumps(spec))
            ),
        )

    def hugetlb(self, case, pairs):
        """`pairs` alternating child processes without and with glibc huge pages."""

        def compute():
            runs = []
            for _ in range(pairs):
                for tunable in (False, True):
                    r = _child("measure", json.dumps(case), env_extra=HUGETLB if tunable else None)
                    runs.append(dict(r, hugetlb=tunable))
            return {"case": case, "runs": runs}

        return self.get("hugetlb", case, compute)

    def model(self, spec):
        from . import model

        return self.get(
            "model",
            spec,
            lambda: model.measure(spec) if self.in_process else _child("model", json.dumps(spec)),
        )

    def extra(self, section, args):
        from . import extras

        def compute():
            if not self.in_process:
                return _child("extras", section, json.dumps(args))
            if section == "step":
                return extras.step_cost(args["sizes"], tokens=args["tokens"], calls=args["calls"])
            return extras.precision(args["configs"], batch=args["batch"])

        return self.get(section, args, compute)


def _summary(result):
    if isinstance(result, dict) and "error" in result:
        return f"ERROR {result['error']}"
    if isinstance(result, dict) and "times_ms" in result and isinstance(result["times_ms"], dict):
        return ", ".join(f"{n} {ms:,.0f} ms" for n, ms in result["ms"].items())
    if isinstance(result, dict) and "ms" in result:
        peak = f", peak {result['peak_mb']:,.0f} MB" if result.get("peak_mb") else ""
        return f"{result['ms']:,.0f} ms, temp {result['temp_mb']:,.0f} MB{peak}"
    return f"{len(result)} rows" if isinstance(result, list) else "done"


def run(grid, runner, *, quick, backend):
    """Every measurement of `grid`, in order (each kept by `runner` as it comes)."""
    from . import impls

    B, N = grid["B"], grid["N"]
    kH, kN, kL = grid["key"]
    largest = grid["L"][-1]
    names = impls.variants(backend, autodiff=grid["autodiff"])

    def config(mode, H, L, **extra):
        return {"mode": mode, "H": H, "N": N, "L": L, "B": B, **extra}

    # Times and XLA temp: every implementation of one configuration in one process,
    # interleaved.
    variants = [{"impl": impl} for impl in names]
    for L in grid["L"]:
        for H in grid["H"]:
            for mode in ("fwd", "grad"):
                key = (mode, H, N, L) == ("grad", kH, kN, kL)
                rounds = grid["key_rounds"] if key else grid["rounds"]
                runner.interleaved("grid", config(mode, H, L, variants=variants, rounds=rounds))
    # One training step per LRA task.
    for spec in model_specs(grid):
        runner.model(spec)
    # Peak memory: one process per case, at the longest length (and a process that only
    # imports JAX and makes the data).
    for H in grid["H"] if grid["peak_rss"] or quick else ():
        data_only = dict(config("-", H, largest), impl="data_only", reps=0)
        if quick:  # no RSS in-process; one child still exercises the path
            runner.get(
                "memory",
                data_only,
                lambda data_only=data_only: _child("measure", json.dumps(data_only)),
            )
            continue
        runner.memory(data_only)
        for mode in ("fwd", "grad"):
            for impl in names:
                runner.memory(dict(config(mode, H, largest), impl=impl, reps=1))
    for mode in ("fwd", "grad") if grid["unroll"] else ():
        unrolls = [{"impl": "real-sequential", "unroll": u} for u in grid["unroll"]]
        runner.interleaved("unroll", config(mode, kH, kL, variants=unrolls, rounds=grid["rounds"]))
    for impl, L in grid["hugetlb"]["cases"] if backend == "cpu" else ():  # glibc: CPU only
        case = dict(config("grad", kH, L), impl=impl, reps=grid["hugetlb"]["reps"])
        runner.hugetlb(case, grid["hugetlb"]["pairs"])
    runner.extra("step", grid["step"])
    runner.extra("precision", grid["precision"])


def _model_rows(calls: int, real: str) -> list[tuple]:
    """`(task, core, form, remat, timed calls)` of the training steps to measure (remat
    None: the trainer's default for the task), from the task and core registries: the LRU
    on every task (complex; real on every task if `real == "all"`, else on the first); the
    longest task, whose step without remat needs the most memory (PathX: ~29 GB of XLA
    temp), compiled only without remat and timed with it; the other cores on the first
    task."""
    from experiments.lra import cores, tasks

    names = tasks.names()
    longest = max(names, key=lambda t: tasks.get_task(t).seq_len)
    lru = cores.DEFAULT
    forms = {t: ("complex", "real") if real == "all" or t == names[0] else ("complex",)
             for t in names}  # fmt: skip
    rows = [(t, lru, f, None, calls) for t in names if t != longest for f in forms[t]]
    rows += [(longest, lru, "complex", False, 0)]
    rows += [(longest, lru, f, True, calls) for f in forms[longest]]
    rows += [(names[0], c, "complex", None, calls) for c in cores.names() if c != lru]
    return rows


def model_specs(grid) -> list[dict]:
    if not grid["model"]:
        return []
    specs = []
    for task, core, form, remat, calls in _model_rows(**grid["model"]):
        remat = _default_remat(task) if remat is None else remat
        specs.append({"task": task, "core": core, "form": form, "remat": remat, "calls": calls})
    return specs


def _default_remat(task: str) -> bool:
    from experiments.lra.config import RunConfig

    return bool(RunConfig.defaults(task).remat)

"""`python -m experiments.bench [--grid full|reduced|quick] [--quick] [--out FILE] [--resume]`;
see the package docstring."""

import argparse
import json
import os
import subprocess
import sys
import time

from . import impls, report, traffic
from .extras import DEFAULT_RING, PATHX_RING

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HUGETLB = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}

FULL = {
    "B": 16,
    "N": 256,
    "H": (128, 256),
    "L": (1024, 4096, 16384),
    "rounds": 5,
    "key": (256, 256, 16384),
    "key_rounds": 7,
    "unroll": (1, 2, 4, 8, 16, 32),
    "hugetlb": {
        "cases": [
            ("app_a", 4096),
            ("real-sequential", 4096),
            ("floor", 4096),
            ("complex-sequential", 16384),
            ("real-sequential", 16384),
            ("floor", 16384),
        ],
        "pairs": 3,
        "reps": 3,
    },
    # Paper Table 9: (H, N) of the LRA models (ListOps/Text/Retrieval, Image, Pathfinder, PathX).
    "step": {
        "sizes": [(512, 384), (128, 256), (256, 192), (192, 256)],
        "tokens": 4096,
        "calls": 500,
    },
    "precision": {
        "configs": [
            (256, 256, 1024, DEFAULT_RING),
            (256, 256, 16384, DEFAULT_RING),
            (256, 256, 16384, PATHX_RING),
        ],
        "batch": 2,
    },
    "peak_rss": True,
    "autodiff": True,
    # One training step per LRA task (Table 9 sizes), the registered tasks and cores:
    # `_model_rows` (both forms on every task here).
    "model": {"calls": 2, "real": "all"},
}
# What fits in about 25 minutes on a 2-core CPU: one H, three rounds, no peak-RSS
# processes, no block-size section, one huge-pages case; one timed step per task.
REDUCED = dict(
    FULL,
    H=(256,),
    rounds=3,
    key_rounds=3,
    unroll=(),
    hugetlb={"cases": [("real-sequential", 16384)], "pairs": 2, "reps": 2},
    step={"sizes": [(128, 256), (512, 384)], "tokens": 4096, "calls": 200},
    precision={
        "configs": [(256, 256, 16384, DEFAULT_RING), (256, 256, 16384, PATHX_RING)],
        "batch": 2,
    },
    peak_rss=False,
    autodiff=False,
    model={"calls": 1, "real": "first"},
)
QUICK = {
    "B": 2,
    "N": 16,
    "H": (16,),
    "L": (128,),
    "rounds": 3,
    "key": (16, 16, 128),
    "key_rounds": 3,
    "unroll": (1, 8),
    "hugetlb": {"cases": [], "pairs": 0, "reps": 0},
    "step": {"sizes": [(16, 16)], "tokens": 32, "calls": 20},
    "precision": {"configs": [(16, 16, 128, DEFAULT_RING)], "batch": 2},
    "peak_rss": False,
    "autodiff": True,
    "model": None,
}
GRIDS = {"full": FULL, "reduced": REDUCED, "quick": QUICK}
SECTIONS = ("memory", "grid", "unroll", "hugetlb", "step", "precision", "model")


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def _key(spec):
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
        key = _key(spec)
        cached = self.data[section].get(key)
        if cached is not None and "error" not in cached:
            return cached
        start = time.time()
        result = compute()
        self.data[section][key] = result
        if self.path:
            with open(self.path, "w") as f:
                json.dump(self.data, f, indent=1)
        _log(f"  {section} {spec} -> {_summary(result)} [{time.time() - start:.0f} s]")
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
    for spec in _model_specs(grid):
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


def _model_specs(grid) -> list[dict]:
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


def _grid_entry(runner, mode, H, N, L):
    for result in runner.data["grid"].values():
        s = result.get("spec", {})
        if (s.get("mode"), s.get("H"), s.get("N"), s.get("L")) == (mode, H, N, L):
            return result
    return None


def _memory_entry(runner, impl, mode, H, N, L):
    for result in runner.data["memory"].values():
        c = result.get("case", {})
        if (c.get("impl"), c.get("mode"), c.get("H"), c.get("N"), c.get("L")) == (
            impl,
            mode,
            H,
            N,
            L,
        ):
            return result
    return None


def render(grid, runner, info, *, name, end_load) -> str:
    import eqx_lru

    backend = info["backend"]
    method = impls.default_method()
    default_unroll = eqx_lru.Sequential().unroll
    B, N = grid["B"], grid["N"]
    kH, kN, kL = grid["key"]
    largest = grid["L"][-1]
    names = impls.variants(backend, autodiff=grid["autodiff"])
    key_entry = _grid_entry(runner, "grad", kH, kN, kL)
    peaks = {
        (impl, mode, H): (_memory_entry(runner, impl, mode, H, N, largest) or {}).get("peak_mb")
        for impl in names
        for mode in ("fwd", "grad")
        for H in grid["H"]
    }
    peak_what = "peak MB" + (" (RSS)" if backend == "cpu" else " (device memory)")
    command = "python -m experiments.bench" + ("" if name == "full" else f" --grid {name}")
    lines = [
        f"# eqx_lru benchmark on `{backend}`" + ("" if name == "full" else f" ({name} grid)"),
        "",
        f"Written by `{command}`. float32 unless",
        f"said, batch {B} via `jax.vmap`, N = {N} complex modes, "
        "the parameters of one key in every",
        "row. 'fwd+bwd' is the gradient of the mean output with respect to all parameters and the",
        "input. Times are under `jax.jit` after a warm-up call; all implementations of one",
        f"configuration run in ONE process, in {grid['rounds']} interleaved rounds "
        "of one call each",
        f"({grid['key_rounds']} for the key configuration): "
        "'ms' is the median over rounds, '×' the",
        "median over rounds of the ratio within the round — "
        "robust to the load changing on a shared",
        "machine. 'temp' is XLA's `compiled.memory_analysis().temp_size_in_bytes`; "
        f"'{peak_what}' is measured in a separate process that ran only that case (at the "
        "longest length" + ("" if grid["peak_rss"] else "; not measured in this grid") + ").",
        *_method_note(backend),
        "",
        "## Machine",
        "",
        *report.machine_lines(info, end_load=end_load),
        "",
        "The machine may be shared (other jobs running), so absolute times are noisy: compare",
        "the ratios.",
        "",
        f"## Key configuration: fwd+bwd, B={B}, H={kH}, N={kN}, L={kL}",
        "",
        f'Bold: the default method on this backend (`method="auto"` → `"{method}"`).',
        "",
        *report.key_table(key_entry, peaks, names, mode="grad", H=kH, default_method=method),
        "",
        *report.target_checks(key_entry, default_method=method),
        "",
        f"## Bytes moved (a model) beside the time, fwd+bwd, B={B}, H={kH}, N={kN}, L={kL}",
        "",
        "Modelled device-memory traffic of one call (`experiments/bench/traffic.py`: passes over",
        "the sequence-long arrays each method makes) and the time it takes at the device's peak",
        "bandwidth: a memory-bound layer's floor. 'measured / model' near 1 is a method at the",
        "bandwidth limit; far above 1, latency, launches or compute dominate.",
        "",
        *traffic.traffic_table(
            key_entry, names, mode="grad", B=B, H=kH, N=kN, L=kL, device_kind=info["device"]
        ),
        "",
    ]
    if name == "quick":
        lines += [
            "(Quick grid: tiny sizes, dominated by dispatch; the targets concern the full grid.)",
            "",
        ]
    for mode, title in (("grad", "fwd+bwd"), ("fwd", "fwd")):
        for H in grid["H"]:
            entries = {L: _grid_entry(runner, mode, H, N, L) for L in grid["L"]}
            lines += [f"## {title}, H={H}, N={N}", ""]
            lines += report.grid_table(entries, peaks, names, mode=mode, H=H) + [""]
    lines += _model_lines(runner, backend, _model_specs(grid))
    data_rss = [
        e for e in (_memory_entry(runner, "data_only", "-", H, N, largest) for H in grid["H"]) if e
    ]
    if any(e.get("peak_mb") for e in data_rss):
        lines += [
            "Peak RSS of a process that only imports JAX and makes the data: "
            + ", ".join(
                f"{e['peak_mb']:,.0f} MB (H={e['case']['H']}, L={e['case']['L']})"
                for e in data_rss
                if e.get("peak_mb")
            )
            + ".",
            "",
        ]
    unroll = {r["spec"]["mode"]: r for r in runner.data["unroll"].values() if "spec" in r}
    if unroll:
        lines += [
            f"## Sequential block size, RealLRU, H={kH}, N={kN}, L={kL}",
            "",
            "Steps per iteration of the in-place `fori_loop` (`eqx_lru.Sequential(unroll=k)`, "
            f"default {default_unroll}); interleaved in one process, ratio to the default.",
            "",
            *report.unroll_table(unroll, default=default_unroll),
            "",
        ]
    if runner.data["hugetlb"]:
        lines += [
            f"## glibc huge pages (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`), fwd+bwd, H={kH}, "
            f"N={kN}",
            "",
            f"CPU only. {grid['hugetlb']['pairs']} pairs of processes (default malloc, then huge "
            f"pages), {grid['hugetlb']['reps']} timed calls each; 'ratio' is the median of the "
            "per-pair ratios.",
            "",
            *report.hugetlb_table(list(runner.data["hugetlb"].values())),
            "",
        ]
    step = next(iter(runner.data["step"].values()), [])
    precision = next(iter(runner.data["precision"].values()), [])
    lines += [
        "## Step (RNN) mode: per-token latency of `layer.step` under `jax.jit`, batch 1",
        "",
        "(H, N) of the paper's LRA models (Table 9). 'jitted call' is one Python call per token,",
        "dispatch included; 'in-graph' is the step inside one jitted `lax.scan` over "
        f"{grid['step']['tokens']} tokens.",
        "",
        *report.step_table(step if isinstance(step, list) else []),
        "",
        "## Precision: error against the same layer in float64",
        "",
        "Relative error (‖x − x₆₄‖ / ‖x₆₄‖) of the output and of the gradient of `mean(w ⊙ y)`",
        f"(w random), batch {grid['precision']['batch']}. `real bf16` is",
        "`RealLRU(..., compute_dtype=jnp.bfloat16)`: bfloat16 operands of the projections and",
        "stored states, float32 accumulation and carry. The complex form has no bfloat16 variant",
        "(there is no bfloat16 complex dtype).",
        "",
        *report.precision_table(precision if isinstance(precision, list) else []),
        "",
    ]
    return "\n".join(lines)


def _method_note(backend) -> list[str]:
    if backend != "cpu":
        return []
    return [
        "",
        "`eqx_lru.PallasScan` (the GPU kernel) is left out on the CPU: there it runs in Pallas",
        "interpret mode, an emulator for testing, whose times mean nothing.",
    ]


def _model_lines(runner, backend, specs) -> list[str]:
    rows = []
    for spec in specs:
        result = runner.data["model"].get(_key(spec))
        if result is not None:
            rows.append(result if "spec" in result else dict(result, spec=spec))
    if not rows:
        return []
    peak = (
        "peak device memory (`memory_stats()`)"
        if backend != "cpu"
        else "no peak device memory (the CPU backend reports none)"
    )
    return [
        "## One training step per LRA task (Table 9 sizes)",
        "",
        "The trainer's own jitted step (`experiments.lra.steps.compile_train_step`, settings of",
        "`train.py --task T --core C --form F`): depth, H, N, batch and full length of the paper's",
        "Table 9, on example batches of the official shapes. 'temp' is XLA's scratch memory of the",
        "compiled step (compile only: nothing of that size is allocated, so it is reported even",
        "where the step would not fit); 'steps/s' is the median of timed steps after a warm-up",
        f"(— where not timed); {peak}.",
        "",
        *report.model_table(rows),
        "",
    ]


def _parser() -> argparse.ArgumentParser:
    from experiments._flags import output_file

    parser = argparse.ArgumentParser(prog="python -m experiments.bench", description=__doc__)
    parser.add_argument(
        "--grid",
        choices=tuple(GRIDS),
        default="full",
        help="full (default), reduced (about 25 min on 2 CPU cores) or quick (seconds)",
    )
    parser.add_argument("--quick", action="store_true", help="the same as --grid quick")
    parser.add_argument(
        "--out",
        type=output_file,
        help="Markdown to write (default: RESULTS-<backend>.md here; quick: stdout)",
    )
    parser.add_argument(
        "--json", type=output_file, help="raw results (default: results-<backend>.json by --out)"
    )
    parser.add_argument("--resume", action="store_true", help="reuse measurements in the JSON file")
    return parser


def _main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)  # paths checked here, not after the measurements

    import jax

    backend = jax.default_backend()
    name = "quick" if args.quick else args.grid
    grid = GRIDS[name]
    out = args.out or (None if name == "quick" else os.path.join(HERE, f"RESULTS-{backend}.md"))
    json_path = args.json or (
        os.path.join(os.path.dirname(os.path.abspath(out)), f"results-{backend}.json")
        if out
        else None
    )
    # Every file this run writes is checked before minutes of measuring: the defaults and
    # the JSON file derived from --out too (argparse checked only the flags given).
    from . import streaming

    writes = [("--out", out), ("--json", json_path)]
    if name != "quick":
        writes.append(("the streaming table", streaming.default_out(backend)))
    report.check_writable(parser, writes)
    info = report.machine_info()
    try:
        runner = Runner(json_path, in_process=name == "quick", resume=args.resume)
    except ValueError as e:  # json.JSONDecodeError: a damaged results file
        parser.error(
            f"--resume: {json_path} is not a valid results file ({e}); delete it or drop --resume"
        )
    _log(f"benchmark ({name}) on {backend} -> {out or 'stdout'}")
    run(grid, runner, quick=name == "quick", backend=backend)
    text = render(grid, runner, info, name=name, end_load=os.getloadavg())
    if out:
        with open(out, "w") as f:
            f.write(text)
        _log(f"wrote {out}")
    else:
        print(text)
    streaming.main(["--quick"] if name == "quick" else [])  # STREAMING-<backend>.md


def main(argv=None) -> int:
    """The command line; a bad flag or path is one `error:` line (status 2)."""
    from experiments._flags import report_os_errors

    return report_os_errors(_main)(argv)


if __name__ == "__main__":
    raise SystemExit(main())

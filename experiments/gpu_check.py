"""Check a CUDA machine in one command: `./dev.sh gpu-check` (`python -m experiments.gpu_check`).

    python -m experiments.gpu_check [--work runs/gpu-check] [--report PATH]
        [--parts tests,bench,train] [--tasks listops,...] [--steps 20] [--workers 4]
        [--full-bench]

Three parts, run one after the other so each has the GPU to itself:

1. **tests**: the whole suite, `pytest -p no:benchmark -rs` (`-n WORKERS` with xdist;
   pytest-benchmark's warning would otherwise be an error under `filterwarnings=error`),
   with `XLA_PYTHON_CLIENT_PREALLOCATE=false` so the workers share the card.
2. **bench**: `python -m experiments.bench` (its `--quick` grid unless `--full-bench`;
   `--gpu` too if the benchmark has such a mode), if the benchmark is present.
3. **train**: a few steps of `experiments.lra.train` for each registered LRA task at the
   paper's Table 9 model and batch sizes, on data written here in the official formats by
   each task's writer (`Task.synthetic`, `experiments/lra/synthetic/`: ListOps and
   Pathfinder/PathX by their generators, Text, Retrieval and Image as random documents and
   pixels at full length; a few hundred examples, since only a few steps run). Each run
   reports steps/s (compilation excluded, from `results.json`) and the peak GPU memory
   (`memory_stats()["peak_bytes_in_use"]`).

It writes one Markdown report (device, driver, JAX version, pass/fail per part, the test
failures, steps/s, peak memory; logs of every command under `WORK/logs/`) and exits 0 if
every part passed, 1 otherwise. Without a CUDA GPU it says so in one line and exits 2.
"""

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._gpu_report import PartResult, parse_junit, render_report, tail

REPO = Path(__file__).resolve().parents[1]
PARTS = ("tests", "bench", "train")
#: Modules each part needs (import names); checked before it runs.
NEEDS = {
    "tests": ("pytest", "beartype", "jaxtyping", "equinox", "optax", "scipy", "hypothesis", "PIL"),
    "bench": ("equinox",),
    "train": ("equinox", "optax", "PIL", "tqdm", "matplotlib"),
}
_PROBE = """
import json, jax
devices = jax.devices()
print(json.dumps({
    "backend": jax.default_backend(),
    "jax": jax.__version__,
    "jaxlib": __import__("jaxlib").__version__,
    "platform_version": str(getattr(devices[0].client, "platform_version", "")),
    "devices": [d.device_kind for d in devices],
}))
"""


# --------------------------------------------------------------------------- the machine


def gpu_env(**extra: str) -> dict[str, str]:
    """The environment of every command: the repository importable, no preallocation."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.update(extra)
    return env


def probe() -> dict:
    """JAX's backend, version and devices (in a subprocess, so this one never holds the
    GPU), plus `nvidia-smi`'s GPU names, driver and memory when it is installed."""
    info: dict = {"python": sys.version.split()[0]}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=gpu_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode == 0:
        info.update(json.loads(result.stdout.strip().splitlines()[-1]))
    else:
        info.update(backend="unavailable", error=(result.stderr.strip().splitlines() or ["?"])[-1])
    smi = shutil.which("nvidia-smi")
    if smi:
        query = [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        out = subprocess.run(query, capture_output=True, text=True, timeout=60, check=False)
        info["nvidia_smi"] = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return info


def missing_modules(names: Sequence[str]) -> list[str]:
    """The modules of `names` that cannot be imported here."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def no_cuda_reason(info: Mapping) -> str | None:
    """Why this machine cannot be checked (one line), or None on a CUDA GPU."""
    backend = info.get("backend")
    if backend == "gpu" and "rocm" not in str(info.get("platform_version", "")).lower():
        return None
    where = f"JAX's backend is {backend}" + (f" ({info['error']})" if info.get("error") else "")
    if info.get("nvidia_smi"):
        return (
            f"no CUDA GPU for JAX: {where}, though nvidia-smi sees {info['nvidia_smi'][0]}; "
            'install JAX for CUDA (pip install -U "jax[cuda12]") and run again.'
        )
    return f"no CUDA GPU: {where}; nothing to check here."


# --------------------------------------------------------------------------- data


def synthetic_tasks() -> tuple[str, ...]:
    """The registered LRA tasks that can write synthetic data (`Task.synthetic`)."""
    from experiments.lra import tasks

    return tuple(t for t in tasks.names() if tasks.get_task(t).synthetic is not None)


def prepare_data(
    root: Path,
    counts: Mapping[str, tuple[int, int, int]] | None = None,
    *,
    tasks: Sequence[str] | None = None,
    seed: int = 0,
    workers: int = 1,
) -> dict[str, Path]:
    """Write official-format data for `tasks` (default: `synthetic_tasks()`) under `root`
    with each task's writer (`Task.synthetic`; `counts` overrides its `synthetic_counts`);
    return each task's folder.

    ListOps uses the official generator settings (500 < length < 2000), Text and Retrieval
    documents are long enough to fill l_max (4096, 4000), images are 32x32 (128x128 PathX).
    """
    from experiments.lra.tasks import get_task

    counts = dict(counts or {})
    folders = {}
    for task in synthetic_tasks() if tasks is None else tasks:
        entry = get_task(task)
        n = counts.get(task, entry.synthetic_counts)
        folders[task] = entry.synthetic(root, n, seed=seed, workers=workers)
    return folders


# --------------------------------------------------------------------------- commands


def pytest_command(workers: int, junit: Path, targets: Sequence[str] = ()) -> list[str]:
    """The test suite (or `targets`) as a user with a GPU runs it."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:benchmark", "-q", "-rs", f"--junitxml={junit}"]
    if workers > 0 and importlib.util.find_spec("xdist") is not None:
        cmd += ["-n", str(workers)]
    return cmd + list(targets)


def bench_command(out_dir: Path, *, full: bool = False) -> list[str] | None:
    """`experiments.bench` with its quick (and GPU) mode if it has them; None if absent."""
    main = REPO / "experiments" / "bench" / "__main__.py"
    if not main.is_file():
        return None
    source = main.read_text(encoding="utf-8")
    cmd = [sys.executable, "-m", "experiments.bench"]
    cmd += [flag for flag in ("--gpu",) if f'"{flag}"' in source]
    if not full and '"--quick"' in source:
        cmd.append("--quick")
    if '"--out"' in source:
        cmd += ["--out", str(out_dir / "bench.md")]
    if '"--json"' in source:
        cmd += ["--json", str(out_dir / "bench.json")]
    return cmd


def train_args(task: str, data_root: Path, out: Path, steps: int) -> list[str]:
    """Trainer flags: Table 9 model and batch (the task defaults), `steps` steps, one
    evaluation and one checkpoint at the end."""
    return [
        "--task",
        task,
        "--data-root",
        str(data_root),
        "--out",
        str(out),
        "--steps",
        str(steps),
        "--eval-every",
        str(steps),
        "--checkpoint-every",
        str(steps),
        "--log-every",
        str(steps),
        "--no-progress",
    ]


def train_command(stats: Path, args: Sequence[str]) -> list[str]:
    """Run the trainer in a process that then records its peak device memory in `stats`."""
    return [sys.executable, "-m", "experiments.gpu_check", "_train-one", str(stats), "--", *args]


def _train_one(stats: Path, args: Sequence[str]) -> int:
    """`experiments.lra.train.main(args)`, then `{"rc", "peak_bytes", "device"}` to `stats`.

    JAX's backend is first touched by the trainer, so its environment settings hold."""
    from experiments.lra import train

    try:
        rc = train.main(list(args))
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 1
    import jax

    device = jax.local_devices()[0]
    memory = device.memory_stats() or {}
    record = {"rc": rc, "peak_bytes": memory.get("peak_bytes_in_use"), "device": device.device_kind}
    stats.write_text(json.dumps(record), encoding="utf-8")
    return rc


# --------------------------------------------------------------------------- running parts


def _run_logged(
    cmd: Sequence[str], log: Path, timeout: float, **env: str
) -> tuple[int | str, float]:
    """Run `cmd` with its output in `log`; the exit status (or "timeout") and the seconds."""
    log.parent.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            rc: int | str = subprocess.run(
                cmd,
                cwd=REPO,
                env=gpu_env(**env),
                stdout=f,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return rc, time.perf_counter() - began


def run_tests(work: Path, workers: int, timeout: float, targets: Sequence[str] = ()) -> PartResult:
    junit, log = work / "tests.xml", work / "logs" / "tests.log"
    junit.unlink(missing_ok=True)
    rc, seconds = _run_logged(pytest_command(workers, junit, targets), log, timeout)
    if not junit.is_file():
        return PartResult(
            "tests",
            "fail",
            seconds,
            f"pytest exited with {rc} and wrote no results (crash or timeout)",
            f"```\n{tail(log)}\n```",
        )
    r = parse_junit(junit)
    summary = (
        f"{r['passed']} passed, {r['failures'] + r['errors']} failed, "
        f"{r['skipped']} skipped (exit status {rc})"
    )
    details = "".join(f"- FAILED `{name}`\n" for name in r["failed"])
    details += "".join(f"- skipped {n}: {reason}\n" for reason, n in r["skip_reasons"].items())
    ok = rc == 0 and not r["failed"]
    if not ok:
        details += f"\n```\n{tail(log)}\n```\n"
    return PartResult("tests", "pass" if ok else "fail", seconds, summary, details)


def run_bench(work: Path, full: bool, timeout: float) -> PartResult:
    cmd = bench_command(work, full=full)
    if cmd is None:
        return PartResult("bench", "skipped", 0.0, "experiments/bench is not present")
    log = work / "logs" / "bench.log"
    rc, seconds = _run_logged(cmd, log, timeout)
    report = work / "bench.md"
    shown = report.read_text(encoding="utf-8") if report.is_file() else tail(log, 80)
    status = "pass" if rc == 0 else "fail"
    return PartResult(
        "bench",
        status,
        seconds,
        f"`{' '.join(cmd[1:])}`: exit status {rc}",
        shown if report.is_file() else f"```\n{shown}\n```",
    )


def _train_row(task: str, out: Path, stats: Path, rc: int | str) -> dict:
    from experiments.lra.tasks import get_task

    def read(path: Path) -> dict:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    results, config, record = read(out / "results.json"), read(out / "config.json"), read(stats)
    cfg = get_task(task).config
    return {
        "task": task,
        "rc": rc,
        "status": results.get("status", "-"),
        "batch": config.get("batch_size", cfg.batch_size),
        "model": f"{config.get('depth', cfg.depth)}/{config.get('d_model', cfg.d_model)}/"
        f"{config.get('d_state', cfg.d_state)}",
        "steps": results.get("step"),
        "steps_per_sec": results.get("steps_per_sec"),
        "peak_gb": None if record.get("peak_bytes") is None else record["peak_bytes"] / 2**30,
        "ok": rc == 0 and results.get("status") == "finished",
    }


def run_train(
    work: Path,
    tasks: Sequence[str],
    steps: int,
    timeout: float,
    counts: Mapping[str, tuple[int, int, int]] | None = None,
    extra_args: Sequence[str] = (),
) -> PartResult:
    began = time.perf_counter()
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    prepare_data(data, counts, tasks=tasks, workers=min(8, os.cpu_count() or 1))
    rows, logs = [], []
    for task in tasks:
        out, stats = work / "runs" / task, work / "runs" / f"{task}.stats.json"
        log = work / "logs" / f"train-{task}.log"
        shutil.rmtree(out, ignore_errors=True)
        stats.unlink(missing_ok=True)
        cmd = train_command(stats, [*train_args(task, data, out, steps), *extra_args])
        rc, _ = _run_logged(cmd, log, timeout)
        rows.append(_train_row(task, out, stats, rc))
        if not rows[-1]["ok"]:
            logs.append(f"**{task}** (exit status {rc}):\n\n```\n{tail(log, 25)}\n```\n")
    table = [
        "| task | depth/H/N | batch | steps | steps/s | peak GPU memory | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rate = "-" if r["steps_per_sec"] is None else f"{r['steps_per_sec']:.2f}"
        peak = "-" if r["peak_gb"] is None else f"{r['peak_gb']:.2f} GiB"
        result = "pass" if r["ok"] else f"FAIL ({r['status']}, exit {r['rc']})"
        table.append(
            f"| {r['task']} | {r['model']} | {r['batch']} | {r['steps']} | {rate} | "
            f"{peak} | {result} |"
        )
    ok = all(r["ok"] for r in rows)
    passed = sum(r["ok"] for r in rows)
    summary = f"{passed}/{len(rows)} tasks trained {steps} steps"
    return PartResult(
        "train",
        "pass" if ok else "fail",
        time.perf_counter() - began,
        summary,
        "\n".join(table) + "\n\n" + "\n".join(logs),
    )


# --------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    from experiments._flags import NATURAL, POSITIVE_INT, number

    p = argparse.ArgumentParser(
        prog="python -m experiments.gpu_check", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--work",
        type=Path,
        default=REPO / "runs" / "gpu-check",
        help="folder for data, runs and logs",
    )
    p.add_argument("--report", type=Path, help="the Markdown report [WORK/report.md]")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {PARTS}")
    p.add_argument(
        "--tasks",
        default=",".join(synthetic_tasks()),
        help="LRA tasks for the train part [every registered task that writes synthetic data]",
    )
    p.add_argument("--steps", type=POSITIVE_INT, default=20, help="trainer steps per task")
    p.add_argument("--workers", type=NATURAL, default=4, help="pytest-xdist workers (0: none)")
    p.add_argument("--full-bench", action="store_true", help="the full benchmark grid, not --quick")
    p.add_argument(
        "--timeout",
        type=number(float, low=0, open_low=True),
        default=3600,
        help="seconds per command",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_train-one"]:  # internal: see train_command
        return _train_one(Path(argv[1]), argv[3:] if argv[2:3] == ["--"] else argv[2:])
    parser = _parser()
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    tasks = [t for t in args.tasks.split(",") if t]
    for bad, allowed, flag in (
        (set(parts) - set(PARTS), PARTS, "--parts"),
        (set(tasks) - set(synthetic_tasks()), synthetic_tasks(), "--tasks"),
    ):
        if bad:
            parser.error(f"argument {flag}: unknown {sorted(bad)}; expected some of {allowed}")
    if args.steps < 2:
        parser.error("argument --steps: must be >= 2 (the first step compiles)")
    info = probe()
    reason = no_cuda_reason(info)
    if reason is not None:
        print(f"gpu-check: {reason}", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    report = args.report or args.work / "report.md"
    runners = {
        "tests": lambda: run_tests(args.work, args.workers, args.timeout),
        "bench": lambda: run_bench(args.work, args.full_bench, args.timeout),
        "train": lambda: run_train(args.work, tasks, args.steps, args.timeout),
    }
    results = []
    for name in parts:
        print(f"gpu-check: {name} ...", file=sys.stderr, flush=True)
        missing = missing_modules(NEEDS[name])
        try:
            if missing:
                results.append(
                    PartResult(
                        name,
                        "fail",
                        0.0,
                        f"not run: missing Python packages "
                        f"{missing} (pip install them, then run again)",
                    )
                )
            else:
                results.append(runners[name]())
        except Exception:
            results.append(
                PartResult(
                    name,
                    "fail",
                    0.0,
                    "the check itself failed",
                    f"```\n{traceback.format_exc()}\n```",
                )
            )
        print(f"gpu-check: {name}: {results[-1].status} ({results[-1].summary})", file=sys.stderr)
        report.write_text(render_report(info, results), encoding="utf-8")  # as it goes
    ok = all(r.status != "fail" for r in results)
    print(f"gpu-check: {'PASS' if ok else 'FAIL'}; report: {report}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

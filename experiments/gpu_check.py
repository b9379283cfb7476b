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
3. **train**: a few steps of `experiments.lra.train` for each of the six LRA tasks at the
   paper's Table 9 model and batch sizes, on data written here in the official formats
   (ListOps and Pathfinder/PathX by `experiments.lra.generate`; Text, Retrieval and Image
   as random documents and pixels at full length: a few hundred examples, since only a few
   steps run). Each run reports steps/s (compilation excluded, from `results.json`) and
   the peak GPU memory (`memory_stats()["peak_bytes_in_use"]`).

It writes one Markdown report (device, driver, JAX version, pass/fail per part, the test
failures, steps/s, peak memory; logs of every command under `WORK/logs/`) and exits 0 if
every part passed, 1 otherwise. Without a CUDA GPU it says so in one line and exits 2.
"""

import argparse
import dataclasses
import datetime
import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
PARTS = ("tests", "bench", "train")
#: Modules each part needs (import names); checked before it runs.
NEEDS = {
    "tests": ("pytest", "beartype", "jaxtyping", "equinox", "optax", "scipy", "hypothesis", "PIL"),
    "bench": ("equinox",),
    "train": ("equinox", "optax", "PIL", "tqdm", "matplotlib"),
}
#: Examples written per task: (train, val, test). Enough for a few steps at Table 9's
#: batch sizes (32, 32, 64, 50, 64, 32); Pathfinder/PathX are cut 80/10/10 by the loader.
DEFAULT_COUNTS: dict[str, tuple[int, int, int]] = {
    "listops": (96, 16, 16),
    "text": (96, 16, 16),
    "retrieval": (160, 16, 16),
    "image": (150, 0, 40),  # the loader takes val as 10% of the five train batches
    "pathfinder": (200, 0, 0),  # the total; the loader splits it
    "pathx": (80, 0, 0),
}
_CHARS = np.array(
    list("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ.,;:!?'\"()-0123456789éü")
)

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


@dataclasses.dataclass
class PartResult:
    """What one part found: `status` is "pass", "fail" or "skipped"."""

    name: str
    status: str
    seconds: float
    summary: str
    details: str = ""


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


def _random_text(rng: np.random.Generator, low: int, high: int) -> str:
    return "".join(rng.choice(_CHARS, int(rng.integers(low, high))))


def write_text_task(
    root: Path,
    counts: tuple[int, int, int],
    *,
    seed: int = 0,
    length: tuple[int, int] = (3000, 6000),
) -> Path:
    """IMDB layout `aclImdb/{train,test}/{neg,pos}/<id>_<rating>.txt` (val is test)."""
    rng = np.random.default_rng([seed, 1])
    folder = root / "aclImdb"
    for split, n in (("train", counts[0]), ("test", counts[2])):
        for label, name in enumerate(("neg", "pos")):
            (folder / split / name).mkdir(parents=True, exist_ok=True)
            for i in range((n + 1 - label) // 2):
                text = _random_text(rng, *length)
                (folder / split / name / f"{i}_{7 * label + 2}.txt").write_text(text, "utf-8")
    return folder


def write_retrieval_task(
    root: Path,
    counts: tuple[int, int, int],
    *,
    seed: int = 0,
    length: tuple[int, int] = (3000, 5000),
) -> Path:
    """AAN layout `tsv_data/new_aan_pairs.{train,eval,test}.tsv`: label id1 id2 text1 text2."""
    rng = np.random.default_rng([seed, 2])
    folder = root / "tsv_data"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in zip(("train", "eval", "test"), counts, strict=True):
        rows = [
            f"{i % 2}.0\tdoc{2 * i}\tdoc{2 * i + 1}\t{_random_text(rng, *length)}\t"
            f"{_random_text(rng, *length)}\n"
            for i in range(n)
        ]
        (folder / f"new_aan_pairs.{split}.tsv").write_text("".join(rows), "utf-8")
    return folder


def write_image_task(root: Path, counts: tuple[int, int, int], *, seed: int = 0) -> Path:
    """CIFAR-10 layout `cifar-10-batches-py/{data_batch_1..5,test_batch}` (pickles)."""
    rng = np.random.default_rng([seed, 3])
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    per_batch = -(-counts[0] // 5)
    sizes = {f"data_batch_{i}": per_batch for i in range(1, 6)} | {"test_batch": counts[2]}
    for name, n in sizes.items():
        batch = {
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            b"labels": rng.integers(0, 10, n).tolist(),
        }
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    return folder


def prepare_data(
    root: Path,
    counts: Mapping[str, tuple[int, int, int]] | None = None,
    *,
    tasks: Sequence[str] = TASKS,
    seed: int = 0,
    workers: int = 1,
) -> dict[str, Path]:
    """Write official-format data for `tasks` under `root`; return each task's folder.

    ListOps uses the official generator settings (500 < length < 2000), Text and Retrieval
    documents are long enough to fill l_max (4096, 4000), images are 32x32 (128x128 PathX).
    """
    from experiments.lra import generate as gen

    counts = {**DEFAULT_COUNTS, **(counts or {})}
    folders = {}
    for task in tasks:
        n = counts[task]
        if task == "listops":
            folders[task] = gen.write_listops(root, n, seed=seed)
        elif task == "text":
            folders[task] = write_text_task(root, n, seed=seed)
        elif task == "retrieval":
            folders[task] = write_retrieval_task(root, n, seed=seed)
        elif task == "image":
            folders[task] = write_image_task(root, n, seed=seed)
        else:
            folders[task] = gen.write_pathfinder(
                root,
                sum(n),
                seed=seed,
                resolution=128 if task == "pathx" else 32,
                images_per_batch=100,
                workers=workers,
                overwrite=True,
            )
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


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def parse_junit(path: Path) -> dict:
    """Counts and failed test ids from a pytest JUnit XML file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}
    failed, skipped = [], {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        skip = case.find("skipped")
        if skip is not None:
            reason = skip.get("message", "")
            skipped[reason] = skipped.get(reason, 0) + 1
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "failed": failed, "skip_reasons": skipped}


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
            f"```\n{_tail(log)}\n```",
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
        details += f"\n```\n{_tail(log)}\n```\n"
    return PartResult("tests", "pass" if ok else "fail", seconds, summary, details)


def run_bench(work: Path, full: bool, timeout: float) -> PartResult:
    cmd = bench_command(work, full=full)
    if cmd is None:
        return PartResult("bench", "skipped", 0.0, "experiments/bench is not present")
    log = work / "logs" / "bench.log"
    rc, seconds = _run_logged(cmd, log, timeout)
    report = work / "bench.md"
    shown = report.read_text(encoding="utf-8") if report.is_file() else _tail(log, 80)
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
            logs.append(f"**{task}** (exit status {rc}):\n\n```\n{_tail(log, 25)}\n```\n")
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


# --------------------------------------------------------------------------- report


def render_report(info: Mapping, parts: Sequence[PartResult], *, when: str | None = None) -> str:
    """The Markdown report: the machine, then one line per part, then each part's details."""
    ok = all(p.status != "fail" for p in parts)
    when = when or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    devices = info.get("devices") or []
    device = f"{len(devices)} x {devices[0]}" if devices else "-"
    smi = info.get("nvidia_smi") or []
    driver = smi[0].split(",")[1].strip() if smi and len(smi[0].split(",")) > 1 else "-"
    lines = [
        f"# GPU check: {'PASS' if ok else 'FAIL'}",
        "",
        f"- when: {when}",
        f"- device: {device}" + (f" (nvidia-smi: {'; '.join(smi)})" if smi else ""),
        f"- driver: {driver}; platform: {info.get('platform_version', '-')}",
        f"- JAX {info.get('jax', '-')}, jaxlib {info.get('jaxlib', '-')}, "
        f"Python {info.get('python', '-')}, backend {info.get('backend', '-')}",
        "- matmul precision: JAX's default (TF32 on NVIDIA) except where the tests ask for more",
        "",
        "| part | result | time | summary |",
        "|---|---|---|---|",
    ]
    lines += [f"| {p.name} | {p.status.upper()} | {p.seconds:.0f} s | {p.summary} |" for p in parts]
    for p in parts:
        if p.details:
            lines += ["", f"## {p.name}", "", p.details.rstrip()]
    return "\n".join(lines) + "\n"


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
    p.add_argument("--tasks", default=",".join(TASKS), help="LRA tasks for the train part")
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
        (set(tasks) - set(TASKS), TASKS, "--tasks"),
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

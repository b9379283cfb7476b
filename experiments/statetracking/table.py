"""Run a list of state-tracking cells and write the results table:
`python -m experiments.statetracking.table --tasks parity s3 --cores lru block2 --seeds 3
--out experiments/statetracking/RESULTS-cpu.md`.

Each cell (task, core, seed) is `train.train` with the table's settings; its result is
appended to `--results` (JSON lines) as soon as it finishes, and a cell found there with the
same settings is not run again (so a long table can be built in several runs). The table
reads every row of `--results`: per task, core and settings (one line each), the test
accuracy at 4x the training length over the seeds (mean, and min-max), beside the claim of
the paper it tests.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from experiments.runs import flags as F

from . import rungs, tasks
from .train import add_training_flags

#: What the papers say, per task (Grazzi et al. 2025; Merrill et al. 2024).
PUBLISHED = {
    "parity": "[0, 1] eigenvalues fail, [-1, 1] solve it (Grazzi et al. 2025, Thm 1, Table 2)",
    "mod3": "needs complex (or negative and non-diagonal) eigenvalues (Grazzi et al. 2025, §4)",
    "mod5": "needs complex (or negative and non-diagonal) eigenvalues (Grazzi et al. 2025, §4)",
    "s3": "needs non-commuting transitions: no diagonal LRNN (Grazzi et al. 2025, Thm 2)",
    "s5": "needs non-commuting transitions (NC1-complete: Merrill et al. 2024)",
}

SETTINGS = ("steps", "train_length", "d_model", "d_state", "depth", "batch")
#: The optimiser's settings, with the values of rows written before they were recorded.
TRAINING = dict(learning_rate=3e-3, weight_decay=0.01, label_smoothing=0.0)
#: What a table line shows of its settings.
SHOWN = ("steps", "train_length", "d_model", "d_state", "depth", *TRAINING)


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _settings(row: dict) -> tuple:
    return (*(row[k] for k in SETTINGS), *(row.get(k, v) for k, v in TRAINING.items()))


def _key(row: dict) -> tuple:
    return (row["task"], row["core"], row["seed"], *_settings(row))


def render(rows: list[dict], *, command: str) -> str:
    """The Markdown table of `rows` (results of `train.train`)."""
    lines = [
        "# State tracking on the CPU",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs ({platform.platform()}); "
        f"commit {_commit()}. Written by `{command}`.",
        "",
        "Accuracy over the positions beyond the training length (trained at length L, "
        "tested at 4L: the `extrapolated` field), mean over the seeds and [min, max]; "
        "chance is 1/classes. `in-length`: the same at positions < L.",
        "",
    ]
    by_task: dict[str, dict[tuple, list[dict]]] = {}
    for row in rows:
        line = (row["core"], _settings(row))
        by_task.setdefault(row["task"], {}).setdefault(line, []).append(row)
    order = {core: i for i, core in enumerate(rungs.RUNGS)}
    for name in [t for t in tasks.TASKS if t in by_task]:
        cells = by_task[name]
        lines += [f"## {name}", "", f"Published: {PUBLISHED[name]}.", ""]
        lines += [
            "| core | transitions | seeds | extrapolated (4L) | in-length "
            "| steps, L, H, N, depth, lr, wd, ls |",
            "|---|---|---|---|---|---|",
        ]
        known = [line for line in cells if line[0] in order]
        for core, settings in sorted(known, key=lambda line: (order[line[0]], line[1])):
            rs = cells[core, settings]
            ex = [r["extrapolated"] for r in rs]
            inl = [r["in_length"] for r in rs]
            shown = {**TRAINING, **rs[0]}
            shape = ", ".join(f"{shown[k]:g}" for k in SHOWN)
            lines.append(
                f"| {core} | {rungs.CLAIMS[core]} | {len(rs)} | "
                f"{100 * statistics.mean(ex):.1f}% [{100 * min(ex):.1f}, {100 * max(ex):.1f}] | "
                f"{100 * statistics.mean(inl):.1f}% | {shape} |"
            )
        lines.append("")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.statetracking.table",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("--tasks", nargs="+", choices=sorted(tasks.TASKS), default=["parity", "s3"],
                   help="the tasks [parity s3]")  # fmt: skip
    p.add_argument("--cores", nargs="+", choices=list(rungs.RUNGS), default=None,
                   help="the rungs [every available one]")  # fmt: skip
    p.add_argument("--seeds", type=F.POSITIVE_INT, default=3, help="seeds 0..N-1 per cell [3]")
    p.add_argument("--steps", type=F.STEPS, default=600, help="training steps per cell [600]")
    p.add_argument("--train-length", type=F.number(int, low=1, high=4096, open_high=False),
                   default=32, help="training sequence length [32]")  # fmt: skip
    p.add_argument("--d-model", type=F.POSITIVE_INT, default=32, help="d_model [32]")
    p.add_argument("--d-state", type=F.POSITIVE_INT, default=32, help="d_state [32]")
    p.add_argument("--depth", type=F.POSITIVE_INT, default=1, help="blocks [1]")
    p.add_argument("--batch", type=F.POSITIVE_INT, default=32, help="batch size [32]")
    add_training_flags(p, defaults=TRAINING)
    p.add_argument("--results", type=F.output_file,
                   default=Path("experiments/statetracking/results-cpu.jsonl"),
                   help="the cells' results, JSON lines, appended to and read back "
                   "[experiments/statetracking/results-cpu.jsonl]")  # fmt: skip
    p.add_argument("--out", type=F.output_file,
                   default=Path("experiments/statetracking/RESULTS-cpu.md"),
                   help="the table [experiments/statetracking/RESULTS-cpu.md]")  # fmt: skip
    F.add_overwrite(p)
    return p


@F.report_os_errors
def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    F.refuse_existing(p, [args.out], overwrite=args.overwrite)
    cores = args.cores or rungs.available()
    for core in cores:
        if core not in rungs.available():
            p.error(f"argument --cores: {core!r} is not available: {rungs.missing()[core]}")
    from . import train

    results = Path(args.results)
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()] \
        if results.exists() else []  # fmt: skip
    done = {_key(r) for r in rows}
    settings = {k: getattr(args, k) for k in (*SETTINGS, *TRAINING)}
    for task in args.tasks:
        for core in cores:
            for seed in range(args.seeds):
                row = dict(task=task, core=core, seed=seed, **settings)
                if _key(row) in done:
                    continue
                options = {k: v for k, v in settings.items() if k != "steps"}
                result = train.train(task, core, seed=seed, steps=args.steps, **options)
                print(json.dumps(result), flush=True)
                with results.open("a") as f:
                    f.write(json.dumps(result) + "\n")
                rows.append(result)
    command = "python -m experiments.statetracking.table " + " ".join(argv or sys.argv[1:])
    Path(args.out).write_text(render(rows, command=command.strip()) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

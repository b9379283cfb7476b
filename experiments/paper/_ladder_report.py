"""The ablation ladder's table, CSV and figure (`experiments/paper/ladder.py`)."""

import csv
import dataclasses
import math
from pathlib import Path

import matplotlib.ticker
import numpy as np

from ._ladder_setup import LISTOPS, NUM_CLASSES
from .common import plt, save_figure


@dataclasses.dataclass(frozen=True)
class Rungs:
    """What the table and figure need of the ladder's rungs (`ladder.RUNGS`): their order,
    the paper's results per rung on `paper_tasks`, the dense and the nonlinear ones."""

    order: tuple[str, ...]
    paper: dict[str, tuple]
    paper_tasks: tuple[str, ...]
    dense: tuple[str, ...]
    nonlinear: tuple[str, ...]


# --------------------------------------------------------------------------- reporting


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error (sample std / √n; NaN for one value) of the finite values;
    NaN if none is finite."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan
    se = v.std(ddof=1) / math.sqrt(v.size) if v.size > 1 else math.nan
    return float(v.mean()), float(se)


def fmt_mean_se(mean: float, se: float, scale: float = 1.0, digits: int = 1) -> str:
    if not math.isfinite(mean):
        return "—"
    text = f"{mean * scale:.{digits}f}"
    return text + (f" ± {se * scale:.{digits}f}" if math.isfinite(se) else "")


def task_description(results: dict) -> str:
    s = results["settings"]
    if s["task"] == "recall":
        data = (
            f"Delayed recall: v ~ N(0, I₁₀) at step 0, then {s['length'] - 1} steps of zeros; "
            f"class argmax v read from the last step ({s['n_train']} train / {s['n_test']} "
            "test vectors)"
        )
    else:
        data = (
            f"Generated ListOps ({s['min_length'] + 1}–{s['max_length'] - 1} tokens, mean "
            f"{results['mean_train_length']:.0f}; {s['n_train']} train / {s['n_test']} test "
            "expressions)"
        )
    return (
        f"{data}; depth {s['depth']}, H = {s['d_model']}, N = {s['d_state']}, {s['steps']} "
        f"steps of batch {s['batch_size']}, lr {s['lr']:g} (recurrent × {s['lr_factor']:g})"
    )


def _paper(result) -> str:
    return "✗" if result is None else f"{result[0]} ({result[1]})"


def markdown_table(results: dict, rungs: Rungs) -> str:
    s = results["settings"]
    lines = [
        f"{task_description(results)}; mean ± s.e. over {len(s['seeds'])} seed(s). "
        f"Majority class: {100 * results['majority_test_accuracy']:.1f}% of the test set.",
        "",
        "| rung | core | paper | test acc (%) | final train loss | train acc (%) | diverged "
        "| max \\|λ\\| init → end | paper: " + " / ".join(rungs.paper_tasks) + " (%) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rungs"]:
        paper = " / ".join(_paper(p) for p in rungs.paper[r["rung"]])
        lines.append(
            f"| `{r['rung']}` | {r['label']} | {r['section']}, Tab. {r['tables']} "
            f"| {fmt_mean_se(*mean_se(r['test_accuracy']), 100)} "
            f"| {fmt_mean_se(*mean_se(r['final_train_loss']), digits=3)} "
            f"| {fmt_mean_se(*mean_se(r['train_accuracy']), 100)} "
            f"| {int(np.sum(r['diverged']))}/{len(r['seeds'])} "
            f"| {fmt_mean_se(*mean_se(r['spectral_radius_init']), digits=3)} → "
            f"{fmt_mean_se(*mean_se(r['spectral_radius_final']), digits=3)} | {paper} |"
        )
    lines += [
        "",
        "Test accuracy after the last step (no early stopping). Final train loss: mean over "
        "the last 10% of steps; a seed whose loss became non-finite is *diverged*, left out "
        "of the loss, and its non-finite predictions count as wrong. Train accuracy on "
        f"{results['rungs'][0]['train_accuracy_examples']} training examples. max |λ|: the "
        "largest eigenvalue modulus over the layers (dense cores: of A, for tanh/ReLU the "
        "linearisation at 0), mean ± s.e. over the seeds where it is finite. Paper: full-size "
        "LRA (depth 6, H = 128–192, N = 256, 80k–500k steps), Tables 1/6 (dense), 2/7 "
        "(diagonal; unit-disk init), 8 (ring init), 3/8 (LRU); ✗ = not above chance.",
    ]
    return "\n".join(lines) + "\n"


def write_csv(results: dict, path: Path) -> None:
    names = ("test_accuracy", "train_accuracy", "final_train_loss", "diverged",
             "spectral_radius_init", "spectral_radius_final")  # fmt: skip
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["rung", "seed", *names])
        for r in results["rungs"]:
            for i, seed in enumerate(r["seeds"]):
                values = [float(r[name][i]) for name in names]
                writer.writerow([r["rung"], seed, *(f"{v:.4g}" for v in values)])


def _accuracy_panel(ax, results: dict, colors: dict, rungs: Rungs) -> None:
    records, s = results["rungs"], results["settings"]
    for x, r in enumerate(records):
        mean, se = mean_se(r["test_accuracy"])
        ax.bar(x, 100 * mean, yerr=100 * se if math.isfinite(se) else None, capsize=4,
               color=colors[r["rung"]], alpha=0.85)  # fmt: skip
        acc = 100 * np.asarray(r["test_accuracy"])
        jitter = np.linspace(-0.15, 0.15, len(acc)) if len(acc) > 1 else np.zeros(1)
        ax.plot(x + jitter, acc, "o", color="k", ms=3.5, mfc="white", zorder=3,
                label="each seed" if x == 0 else None)  # fmt: skip
        if any(r["diverged"]):
            top = 100 * (np.nan_to_num(mean) + (se if math.isfinite(se) else 0))
            ax.text(x, max(top, np.nanmax(acc)) + 2, f"{int(np.sum(r['diverged']))} diverged",
                    ha="center", va="bottom", fontsize=7, color="tab:red")  # fmt: skip
        if s["task"] == LISTOPS:
            ax.plot(x, rungs.paper[r["rung"]][0][0], "_", color="tab:red", ms=22, mew=2, zorder=4,
                    label="paper (full-size LRA ListOps)" if x == 0 else None)  # fmt: skip
    ax.axhline(100 * results["majority_test_accuracy"], color="gray", ls="--", lw=1,
               label="majority class")  # fmt: skip
    ax.set_xticks(range(len(records)), [r["rung"] for r in records], rotation=30, ha="right",
                  fontsize=8)  # fmt: skip
    ax.set_ylim(0, 105 if s["task"] == "recall" else None)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"test accuracy, mean ± s.e. over {len(s['seeds'])} seed(s)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", alpha=0.3)


def _loss_panel(ax, results: dict, colors: dict, rungs: Rungs) -> None:
    chance = math.log(NUM_CLASSES)
    for r in results["rungs"]:
        curve = np.asarray(r["loss_curve"], np.float64)  # (seeds, points)
        curve = curve[np.isfinite(curve).all(axis=1)]
        if len(curve):
            ax.plot(r["loss_curve_steps"], curve.mean(0), color=colors[r["rung"]], lw=1.3,
                    ls="--" if r["rung"] in rungs.dense else "-", label=r["rung"])  # fmt: skip
    ax.axhline(chance, color="gray", ls="--", lw=1)
    ax.set_ylim(0, 1.25 * chance)
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title(
        "training loss, mean over the seeds that did not diverge\n"
        f"(dashed: log {NUM_CLASSES}, chance; spikes above the top are cut)",
        fontsize=9,
    )  # fmt: skip
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)


def _radius_panel(ax, results: dict, colors: dict, rungs: Rungs) -> None:
    for r in results["rungs"]:
        if r["rung"] in rungs.nonlinear:
            continue
        gap = 1 - np.asarray(r["spectral_radius_init"], np.float64)
        shown = gap > 0
        ax.plot(gap[shown], 100 * np.asarray(r["test_accuracy"])[shown], "o",
                color=colors[r["rung"]], ms=5, label=r["rung"])  # fmt: skip
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("1 − max |λ| at initialisation (dense: ρ(A) ≥ 1 not shown)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("linear rungs: slowest mode at initialisation vs. result (every seed)",
                 fontsize=9)  # fmt: skip
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def plot(results: dict, out: Path, rungs: Rungs) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(16, 5), gridspec_kw=dict(width_ratios=[1.2, 1, 1]))
    shades = plt.cm.viridis(np.linspace(0, 0.92, len(rungs.order)))
    colors = dict(zip(rungs.order, shades, strict=True))
    _accuracy_panel(axes[0], results, colors, rungs)
    _loss_panel(axes[1], results, colors, rungs)
    _radius_panel(axes[2], results, colors, rungs)
    fig.suptitle(f"The ablation ladder (§3, Tables 1, 2, 7, 8) in miniature\n"
                 f"{task_description(results)}", fontsize=9)  # fmt: skip
    fig.tight_layout()
    return save_figure(fig, out, "ladder")

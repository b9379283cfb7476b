"""The main offline demo: `./dev.sh demo` (or `python -m experiments.demo`).

Part 1 builds a complex and a real LRU from one key, shows they compute the same
function (outputs and gradients), and times both under `jax.jit`.

Part 2 generates a small ListOps set (short expressions) with the LRA generator and trains
a small deep LRU on it in both forms, from the same initial parameters, with the same
trainer as the full LRA runs (`experiments.lra.train.run`); it prints the test accuracies,
each run's wall time and where the metrics, curves and checkpoints went. A few minutes on
two CPU cores (it prints how long it took); nothing is downloaded. Its times are not a
benchmark of the two forms: `python -m experiments.bench` measures them.
"""

import argparse
import collections
import sys
import time
from pathlib import Path
from typing import Any

# JAX, Equinox and eqx_lru are imported inside the functions: `--help` and a bad flag are
# answered before they load (seconds on a busy machine).


def _median_seconds(fn, *args, repeats: int = 5) -> float:
    import jax

    jax.block_until_ready(fn(*args))  # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def parity_and_speed(*, d_model: int, d_state: int, length: int, batch: int, seed: int) -> None:
    """Print the max difference between the two forms and their fwd / fwd+bwd times."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import eqx_lru

    key_layer, key_input = jax.random.split(jax.random.PRNGKey(seed))
    layers = {
        "complex": eqx_lru.ComplexLRU(d_model, d_state, r_min=0.9, r_max=0.999, key=key_layer),
        "real": eqx_lru.RealLRU(d_model, d_state, r_min=0.9, r_max=0.999, key=key_layer),
    }
    u = jax.random.normal(key_input, (batch, length, d_model))

    @eqx.filter_jit
    def forward(layer, u):
        return jax.vmap(layer)(u)

    @eqx.filter_jit
    def loss_and_grad(layer, u):
        return eqx.filter_value_and_grad(lambda m, u: jnp.mean(jax.vmap(m)(u)))(layer, u)

    outputs = {name: forward(layer, u) for name, layer in layers.items()}
    grads = {name: loss_and_grad(layer, u)[1] for name, layer in layers.items()}
    scale = float(jnp.max(jnp.abs(outputs["complex"])))
    out_diff = float(jnp.max(jnp.abs(outputs["complex"] - outputs["real"])))
    grad_diff = max(
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(
            jax.tree_util.tree_leaves(eqx.filter(grads["complex"], eqx.is_array)),
            jax.tree_util.tree_leaves(eqx.filter(grads["real"], eqx.is_array)),
            strict=False,
        )
    )
    print(
        f"One key, two forms (H={d_model}, N={d_state}, L={length}, batch={batch}, "
        f"method={eqx_lru.Auto().resolve()!r} on {jax.default_backend()}):"
    )
    print(f"  max |y_complex - y_real| = {out_diff:.2e} (max |y| = {scale:.2f})")
    print(f"  max |grad_complex - grad_real| over all parameters = {grad_diff:.2e}")
    for name, layer in layers.items():
        fwd = _median_seconds(forward, layer, u)
        bwd = _median_seconds(loss_and_grad, layer, u)
        print(f"  {name:>7}: forward {fwd * 1e3:7.1f} ms   forward+backward {bwd * 1e3:7.1f} ms")


# Part 2: short ListOps expressions (21-99 tokens; the LRA ones have 501-1999) and a
# 2-block model, so that a couple of minutes of CPU training clearly beats chance.
LISTOPS: dict[str, Any] = dict(sizes=(6000, 500, 500), min_length=20, max_length=100)
MODEL = dict(depth=2, d_model=64, d_state=64, batch_size=32)


def _majority(path: Path) -> float:
    labels = [line.rsplit("\t", 1)[1] for line in path.read_text().splitlines()[1:] if line]
    return max(collections.Counter(labels).values()) / len(labels)


def train_on_listops(out: Path, *, steps: int, seed: int) -> dict[str, dict]:
    """Generate ListOps into `out/data`, train both forms into `out/{complex,real}`."""
    from experiments.lra import synthetic, train

    t0 = time.perf_counter()
    sizes = LISTOPS["sizes"]
    folder = synthetic.write_listops(
        out / "data",
        sizes,
        seed=seed,
        min_length=LISTOPS["min_length"],
        max_length=LISTOPS["max_length"],
    )
    chance = _majority(folder / "basic_test.tsv")
    print(
        f"\nGenerated ListOps ({sizes[0]}/{sizes[1]}/{sizes[2]} train/val/test, "
        f"{LISTOPS['min_length'] + 1}-{LISTOPS['max_length'] - 1} tokens) in {folder} "
        f"in {time.perf_counter() - t0:.1f}s. Majority-class test accuracy: {100 * chance:.1f}%.",
        flush=True,
    )
    results = {}
    for form in ("complex", "real"):
        run_dir = out / form
        t0 = time.perf_counter()
        # --overwrite: the trainer replaces a run of its own there (only its files), and
        # refuses a folder of other files.
        argv = [*_train_argv(out / "data", run_dir, form, steps=steps, seed=seed), "--overwrite"]
        results[form] = train.run(argv, hard_abort=True, hint=AGAIN)
        results[form]["wall"] = time.perf_counter() - t0
        if results[form]["status"] != "finished":  # a signal: the demo stops with its run
            raise Interrupted(
                f"the demo stopped during the {form} run (a signal; its checkpoint is in "
                f"{run_dir}); {AGAIN}"
            )
    _print_results(results, chance, out, steps=steps)
    return results


#: How to go on after a signal.
AGAIN = "run it again with --overwrite (./dev.sh demo --overwrite) to start afresh"


class Interrupted(Exception):
    """A signal stopped the demo."""


def _train_argv(data: Path, run_dir: Path, form: str, *, steps: int, seed: int) -> list[str]:
    """The trainer's command line of one form's run."""
    from experiments.lra import tasks

    flags = dict(
        task=tasks.LISTOPS, data_root=data, out=run_dir, form=form, steps=steps, seed=seed,
        **MODEL, eval_every=max(1, steps // 6), checkpoint_every=max(1, steps // 2),
    )  # fmt: skip
    return [w for k, v in flags.items() for w in (f"--{k.replace('_', '-')}", str(v))]


def _print_results(results: dict[str, dict], chance: float, out: Path, *, steps: int) -> None:
    print(
        f"\nListOps, deep LRU (depth {MODEL['depth']}, H={MODEL['d_model']}, N={MODEL['d_state']}, "
        f"batch {MODEL['batch_size']}, {steps} steps, the same initial parameters in both forms):"
    )
    print(f"  {'form':<8} {'test acc':>9} {'best val (step)':>16} {'wall':>7}")
    for form, r in results.items():
        best = f"{100 * r['best_val_accuracy']:.1f}% ({r['best_step']})"
        print(f"  {form:<8} {100 * r['test_accuracy']:>8.1f}% {best:>16} {r['wall']:>6.0f}s")
    print(f"  {'chance':<8} {100 * chance:>8.1f}%   (majority class)")
    print(
        "  wall: each run's time, its compiles, evaluations and checkpoints included, on a\n"
        "  machine that may be busy: not a speed comparison of the two forms (that is\n"
        "  python -m experiments.bench)."
    )
    print(
        f"  Outputs: {out / 'complex'}/ and {out / 'real'}/ — metrics.jsonl, curves.png, "
        "results.json, best.eqx (best val), last.eqx (resumable with --resume)."
    )


#: What part 2 writes under --out.
OUTPUTS = ("data", "complex", "real")


def _parser() -> argparse.ArgumentParser:
    from experiments.runs.flags import NATURAL, POSITIVE_INT, add_overwrite, text

    parser = argparse.ArgumentParser(
        prog="python -m experiments.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--seed", type=NATURAL, default=0, help="the layers' and the runs' PRNG seed [0]"
    )
    parser.add_argument(
        "--out",
        type=lambda value: Path(text(value)),
        default=Path("demo_out"),
        help="where part 2 writes its data and two runs [demo_out]",
    )
    parser.add_argument(
        "--steps", type=POSITIVE_INT, default=1500, help="training steps per form in part 2 [1500]"
    )
    parser.add_argument("--skip-training", action="store_true", help="part 1 only [off]")
    add_overwrite(parser)
    return parser


def _earlier_demo(out: Path) -> bool:
    """A demo's folder written before its record (`runs.outputs`): a trainer's run in
    `complex/`, by its content."""
    from experiments.runs.outputs import trainer_run

    return trainer_run(("task", "batch_size"))(out / "complex")


def _check_out(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Part 2's --out: a writable folder, without the demo's outputs unless --overwrite
    (each then replaced by the command that wrote it), and no other files at their names."""
    from experiments.runs.flags import output_folder

    try:
        output_folder(str(args.out))
    except argparse.ArgumentTypeError as e:
        parser.error(f"argument --out: {e}")
    from experiments.runs.errors import UsageError
    from experiments.runs.outputs import RunFiles

    try:  # the demo's folder by its record, not by the names of its parts
        RunFiles(args.out, "demo", OUTPUTS, exports=False, legacy=_earlier_demo).claim(
            resume=False, overwrite=args.overwrite
        )
    except UsageError as e:
        parser.error(str(e).replace("Pass --resume to continue it, ", "Pass "))


def main(argv=None) -> int:
    """The demo; a bad flag or an unusable --out is one `error:` line (status 2) before any
    work, a failed training run one line (status 1)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.skip_training:
        _check_out(parser, args)
    from experiments.runs.signals import exit_on_signal

    # A signal outside the trainer's runs (which save and stop) ends the demo at once.
    with exit_on_signal(AGAIN if not args.skip_training else "run it again", what="demo stopped"):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    from experiments.lra import train

    t0 = time.perf_counter()
    try:
        parity_and_speed(d_model=128, d_state=256, length=1024, batch=8, seed=args.seed)
        if not args.skip_training:
            train_on_listops(args.out, steps=args.steps, seed=args.seed)
    except (train.UsageError, train.RunError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if isinstance(e, train.UsageError) else 1
    except Interrupted as e:
        print(f"\n{e}.", file=sys.stderr)
        return 130
    except OSError as e:
        if e.filename is None:
            raise
        print(f"error: {e.filename}: {e.strerror or e}. Choose another --out.", file=sys.stderr)
        return 2
    print(f"\nDemo finished in {time.perf_counter() - t0:.0f}s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The streaming claims of the docs' performance page, re-measured interleaved.

    python -m experiments.bench.streams_claims [--quick] [--rounds N] [--out FILE]

The model and steps are `streaming.py`'s (the ListOps model of Table 9; `LRUModel.step`
under `jax.jit` and `jax.vmap`, one call per token, waited for; the ONNX step in
onnxruntime with one intra-op thread). Unlike `streaming.py`, which measures one
configuration after the other, every configuration here runs in each round, back to
back, and each claim is a ratio of CPU times (`time.process_time`, every thread) taken
within a round: its median over rounds and its spread (lowest and highest round).

- the step at position 4,096 against position 0 (batch 1, each form);
- the complex step against the real one (batch 1);
- re-running the parallel call on a prefix of 1,024 / 4,096 tokens against one step;
- onnxruntime's step against JAX's real-form step (batch 1 and 64).
"""

import argparse
import os
import sys
import time

import numpy as np

from .streaming import _model, onnx_step_session, vocabulary_size

FULL = {"depth": 6, "d_model": 128, "d_state": 256, "rounds": 15, "tokens": 5}
FULL |= {"position": 4096, "prefixes": (1024, 4096), "batches": (1, 64)}
QUICK = {"depth": 2, "d_model": 16, "d_state": 16, "rounds": 2, "tokens": 2}
QUICK |= {"position": 64, "prefixes": (64,), "batches": (1, 4)}


def _step_runner(grid, form, batch, position):
    """`step_once` of `batch` jitted streams advanced to `position`."""
    import jax
    import jax.numpy as jnp

    model, state = _model(grid, form)
    vocab = vocabulary_size(model)
    step = jax.jit(jax.vmap(lambda c, x: model.step(c, x, state)))
    rng = np.random.default_rng(0)
    box = {"carry": jax.vmap(lambda _: model.init_carry())(jnp.arange(batch)), "t": 0}
    if position:
        xs = jnp.asarray(rng.integers(0, vocab, (position, batch)), jnp.int32)
        scan = jax.jit(lambda c, xs: jax.lax.scan(lambda c, x: (step(c, x)[0], None), c, xs)[0])
        box["carry"] = jax.block_until_ready(scan(box["carry"], xs))
    tokens = [jnp.asarray(rng.integers(0, vocab, batch), jnp.int32) for _ in range(8)]

    def step_once():
        box["carry"], y = step(box["carry"], tokens[box["t"] % len(tokens)])
        box["t"] += 1
        y.block_until_ready()

    return step_once


def _prefix_runner(grid, form, length):
    """`call_once` of the whole-sequence model on `length` tokens (batch 1)."""
    import jax
    import jax.numpy as jnp

    model, state = _model(grid, form)
    x = np.random.default_rng(1).integers(0, vocabulary_size(model), (1, length))
    x = jnp.asarray(x, jnp.int32)
    call = jax.jit(jax.vmap(lambda x: model(x, state, inference=True)[0]))
    return lambda: jax.block_until_ready(call(x))


def _onnx_runner(session, batch, vocab):
    session, names, carry_zeros = session
    rng = np.random.default_rng(0)
    box = {"carry": carry_zeros(batch)}

    def step_once():
        x_t = rng.integers(0, vocab, batch).astype(np.int32)
        _, *box["carry"] = session.run(None, dict(zip(names, [x_t, *box["carry"]], strict=True)))

    return step_once


def runners(grid) -> dict:
    model, state = _model(grid, "complex")
    out = {}  # ONNX first: exporting clears JAX's caches
    session = onnx_step_session(model, state)
    for b in grid["batches"]:
        out["onnx", b] = _onnx_runner(session, b, vocabulary_size(model))
    for form in ("complex", "real"):
        for b in grid["batches"]:
            out[form, b, 0] = _step_runner(grid, form, b, 0)
        out[form, 1, grid["position"]] = _step_runner(grid, form, 1, grid["position"])
        for n in grid["prefixes"]:
            out[form, "prefix", n] = _prefix_runner(grid, form, n)
        _log(f"  built {form}")
    return out


def measure(grid) -> dict:
    """CPU ms per call of every configuration, one median per round."""
    calls = runners(grid)
    for f in calls.values():
        f()  # compile
    cpu = {key: [] for key in calls}
    load = [os.getloadavg()]
    for r in range(grid["rounds"]):
        for key, f in calls.items():
            f()
            f()
            ms = []
            for _ in range(1 if key[1] == "prefix" else grid["tokens"]):
                start = time.process_time()
                f()
                ms.append(1e3 * (time.process_time() - start))
            cpu[key].append(float(np.median(ms)))
        load.append(os.getloadavg())
        _log(f"  round {r + 1}/{grid['rounds']}")
    return {"cpu": cpu, "load": load}


def claims(grid, cpu) -> list[tuple[str, np.ndarray]]:
    """`(claim, per-round ratios)`."""
    r = lambda a, b: np.asarray(cpu[a]) / np.asarray(cpu[b])  # noqa: E731
    p, rows = grid["position"], []
    for form in ("complex", "real"):
        rows.append(
            (f"{form} step at position {p:,} ÷ at 0 (batch 1)", r((form, 1, p), (form, 1, 0)))
        )
    rows.append(("complex step ÷ real step (batch 1)", r(("complex", 1, 0), ("real", 1, 0))))
    for n in grid["prefixes"]:
        for form in ("complex", "real"):
            label = f"{form}: parallel call on a {n:,}-token prefix ÷ one step (batch 1)"
            rows.append((label, r((form, "prefix", n), (form, 1, 0))))
    for b in grid["batches"]:
        for form in ("real", "complex"):
            label = f"onnxruntime step ÷ JAX {form} step (batch {b})"
            rows.append((label, r(("onnx", b), (form, b, 0))))
    return rows


def render(grid, results, info) -> str:
    from . import report

    lines = [
        "# The streaming claims, re-measured interleaved",
        "",
        "Written by `python -m experiments.bench.streams_claims`; see its docstring. Model: "
        f"depth {grid['depth']}, H = {grid['d_model']}, N = {grid['d_state']}.",
        f"{grid['rounds']} interleaved rounds; CPU-time ratios within each round: median "
        "[lowest, highest round].",
        "",
        *report.machine_lines(info, end_load=results["load"][-1]),
        "",
        "| claim | CPU-time ratio |",
        "|---|---|",
    ]
    for label, ratios in claims(grid, results["cpu"]):
        lines.append(
            f"| {label} | {np.median(ratios):.2f} [{ratios.min():.2f}, {ratios.max():.2f}] |"
        )
    lines += ["", "| configuration | CPU ms per call |", "|---|---|"]
    for key, v in results["cpu"].items():
        lines.append(f"| {_label(key)} | {np.median(v):,.3f} [{min(v):,.3f}, {max(v):,.3f}] |")
    return "\n".join(lines) + "\n"


def _label(key) -> str:
    if key[0] == "onnx":
        return f"onnxruntime step, batch {key[1]}"
    if key[1] == "prefix":
        return f"JAX {key[0]}, parallel call on {key[2]:,} tokens"
    return f"JAX {key[0]} step, batch {key[1]}, at position {key[2]:,}"


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    """The command line; a bad flag or an existing --out (without --overwrite) is one
    `error:` line, status 2, before anything is measured."""
    from ..runs.atomic import write_atomic
    from ..runs.flags import POSITIVE_INT, add_overwrite, output_file, refuse_existing

    parser = argparse.ArgumentParser(
        prog="python -m experiments.bench.streams_claims", description=__doc__
    )
    parser.add_argument("--quick", action="store_true", help="a tiny model, two rounds [off]")
    parser.add_argument("--rounds", type=POSITIVE_INT, help="rounds [15; quick: 2]")
    parser.add_argument("--out", type=output_file, help="Markdown to write [stdout]")
    add_overwrite(parser)
    args = parser.parse_args(argv)
    refuse_existing(parser, [args.out], overwrite=args.overwrite)
    from . import report

    grid = dict(QUICK if args.quick else FULL)
    if args.rounds:
        grid["rounds"] = args.rounds
    text = render(grid, measure(grid), report.machine_info())
    if args.out:
        write_atomic(args.out, text.encode())
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

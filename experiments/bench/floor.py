"""`python -m experiments.bench.floor [--lengths 1024 4096 16384] [--rounds N ...]`:
both LRU forms' forward+backward against the projections-only floor, in CPU time.

Every variant (`impls.make`: `floor`, `real-sequential`, `complex-sequential`) is compiled
in THIS process at B = 16, H = N = 256; then every round calls each once, in an order
shuffled per round, and takes the process's CPU time (`time.process_time`, all
threads) of each call. A variant's ratio is its time over the floor's within the same round;
the table gives the median over rounds and the spread [min, max] of the per-round ratios.
Prints one Markdown table per length and a JSON line of every time.
"""

import argparse
import json
import random
import time

import numpy as np


def _compiled(name, length, *, batch, width):
    import jax
    import jax.numpy as jnp

    from . import impls

    key = jax.random.PRNGKey(0)
    fn, params = impls.make(name, width, width, key=key)
    batched = jax.vmap(fn, in_axes=(None, 0))
    grad = jax.grad(lambda p, u: jnp.mean(batched(p, u)), argnums=(0, 1))
    u = jax.random.normal(jax.random.fold_in(key, 1), (batch, length, width))
    compiled = jax.jit(grad).lower(params, u).compile()
    jax.block_until_ready(compiled(params, u))  # warm-up
    return compiled, params, u


def measure(length, names, *, rounds, batch=16, width=256, seed=0) -> dict:
    """CPU and wall times (ms) of every round, per variant."""
    import jax

    fns = {n: _compiled(n, length, batch=batch, width=width) for n in names}
    cpu = {n: [] for n in names}
    wall = {n: [] for n in names}
    order = list(names)
    rng = random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for n in order:
            fn, params, u = fns[n]
            c0, w0 = time.process_time(), time.perf_counter()
            jax.block_until_ready(fn(params, u))
            cpu[n].append(1e3 * (time.process_time() - c0))
            wall[n].append(1e3 * (time.perf_counter() - w0))
    return {"L": length, "cpu_ms": cpu, "wall_ms": wall}


def table(result) -> str:
    cpu = {n: np.asarray(t) for n, t in result["cpu_ms"].items()}
    wall = {n: np.asarray(t) for n, t in result["wall_ms"].items()}
    lines = [
        f"L = {result['L']}, {len(cpu['floor'])} rounds",
        "",
        "| variant | CPU ms (median) | × floor, CPU: median [min, max] | × floor, wall: median |",
        "|---|---|---|---|",
    ]
    for n in cpu:
        r = cpu[n] / cpu["floor"]
        w = wall[n] / wall["floor"]
        lines.append(
            f"| {n} | {np.median(cpu[n]):,.0f} | {np.median(r):.3f} "
            f"[{r.min():.3f}, {r.max():.3f}] | {np.median(w):.3f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    from experiments.runs.flags import POSITIVE_INT

    parser = argparse.ArgumentParser(prog="python -m experiments.bench.floor", description=__doc__)
    parser.add_argument(
        "--lengths",
        type=POSITIVE_INT,
        nargs="+",
        default=[1024, 4096, 16384],
        help="[1024 4096 16384]",
    )
    parser.add_argument(
        "--rounds", type=POSITIVE_INT, nargs="+", default=[20], help="per length [20]"
    )
    args = parser.parse_args(argv)
    names = ["floor", "real-sequential", "complex-sequential"]
    rounds = args.rounds * len(args.lengths) if len(args.rounds) == 1 else args.rounds
    if len(rounds) != len(args.lengths):
        parser.error("--rounds: expected one count, or one per --lengths entry")
    for length, n in zip(args.lengths, rounds, strict=True):
        result = measure(length, names, rounds=n)
        print(table(result), flush=True)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

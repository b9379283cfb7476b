"""Serving many streams at once: tokens per second and memory per stream against the
number of streams.

    python -m experiments.bench.streams [--quick] [--out FILE] [--json FILE] [--sessions]
        [--onnx FILE ...]

writes `STREAMS-<backend>.md` here. The model is `streaming.py`'s (the ListOps one of the
paper's Table 9: depth 6, H = 128, N = 256, batch norm, mean pooling; inference mode),
serving 1 to 256 streams, each at its own position:

- **JAX step**: one position of every slot of an `eqx_lru.StreamPool` (`jax.vmap` of
  `LRUModel.step` with a per-slot reset, what a server runs), under `jax.jit`, in both
  forms; one call per token from Python, each waited for (dispatch included).
- **onnxruntime step**: the same model's step exported to ONNX (real form, batch norm
  folded; `streaming.onnx_step_session`), batch = streams, one intra-op thread.

Everything is measured in one process, in interleaved rounds: each round runs every
configuration for a few tokens (after two untimed ones: the caches held the previous
configuration's arrays, which made the one-stream rows after the 256-stream ones
1.6-2.7x slower), back to back, so a change of load on a shared machine
hits all alike. Each token is timed in wall time (`time.perf_counter`) and in the
process's CPU time (`time.process_time`, every thread: XLA's intra-op threads count,
onnxruntime runs one); per round the time of a token is the median over its tokens; the
table gives the median over rounds and the spread (lowest and highest round). The
comparison of the runtimes takes the ratio of CPU times *within* each round (the
runtimes ran seconds apart, under the same load) and reports its median and spread.

`--sessions` adds, at the most streams, onnxruntime with other session options (the
graph optimisation level, two intra-op threads; `SESSION_VARIANTS`), and `--onnx FILE`
an ONNX step exported elsewhere (e.g. at an earlier commit, to measure a change of the
lowering against the current one in the same rounds).

Memory per stream: the carry (bytes, fixed by the shapes), and XLA's temp buffer of the
compiled step divided by the streams.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

from .streaming import NO_ONNXRUNTIME, _model, onnx_step_session, vocabulary_size

HERE = os.path.dirname(os.path.abspath(__file__))

FULL = {
    "depth": 6,
    "d_model": 128,
    "d_state": 256,
    "streams": (1, 4, 16, 64, 256),
    "rounds": 15,
    "tokens": 5,
}
QUICK = {"depth": 2, "d_model": 16, "d_state": 16, "streams": (1, 4), "rounds": 2, "tokens": 2}


def jax_runner(grid, form, streams):
    """`(step_once, info)`: one position of a full `StreamPool` of `streams` slots, in
    `form`, jitted; `info` the carry bytes per stream and XLA's temp."""
    import jax
    import jax.numpy as jnp

    import eqx_lru

    model, state = _model(grid, form)
    vocab = vocabulary_size(model)
    pool = eqx_lru.StreamPool(model, streams)
    for slot in range(streams):
        pool = pool.admit(slot)
    step = jax.jit(lambda pool, x: pool.step(model, x, state))
    rng = np.random.default_rng(0)
    tokens = [jnp.asarray(rng.integers(0, vocab, streams), jnp.int32) for _ in range(8)]
    temp = step.lower(pool, tokens[0]).compile().memory_analysis()
    for _ in range(2):  # warm-up: the second call's input is a jit output, as later ones
        pool = jax.block_until_ready(step(pool, tokens[0])[0])
    box = {"pool": pool, "t": 0}

    def step_once():
        box["pool"], out = step(box["pool"], tokens[box["t"] % len(tokens)])
        box["t"] += 1
        out.block_until_ready()

    carry = sum(x.nbytes for x in jax.tree_util.tree_leaves(pool.carry)) / streams
    return step_once, {
        "carry_bytes": carry,
        "temp_bytes_per_stream": None if temp is None else temp.temp_size_in_bytes / streams,
    }


def onnx_runner(session, streams, vocab):
    """`(step_once, info)`: onnxruntime's step for `streams` streams."""
    session, names, carry_zeros = session
    rng = np.random.default_rng(0)
    box = {"carry": carry_zeros(streams)}

    def step_once():
        x_t = rng.integers(0, vocab, streams).astype(np.int32)
        _, *box["carry"] = session.run(None, dict(zip(names, [x_t, *box["carry"]], strict=True)))

    step_once()  # warm-up
    carry = sum(c.nbytes for c in carry_zeros(streams)) / streams
    return step_once, {"carry_bytes": carry, "temp_bytes_per_stream": None}


#: onnxruntime session options measured against the default (`--sessions`): the graph
#: optimisation level and the intra-op threads (spinning, onnxruntime's default, or not).
SESSION_VARIANTS = {
    "optimisation basic": {"level": "ORT_ENABLE_BASIC"},
    "optimisation off": {"level": "ORT_DISABLE_ALL"},
    "2 threads": {"threads": 2},
    "2 threads, no spinning": {"threads": 2, "spin": False},
}


def variant_sessions(model, state, files=(), *, options=True) -> dict:
    """`{label: session triple}` as `streaming.onnx_step_session`'s, for each of
    `SESSION_VARIANTS` (with `options`) and each ONNX step file in `files` (e.g. exported
    at another commit; default session options)."""
    import onnxruntime as ort

    import eqx_lru.export

    exported = eqx_lru.export.export(model, state, format="onnx", program="step")
    carry = exported.program.carry or []

    def carry_zeros(batch):
        return [np.zeros((batch, *c["shape"][1:]), c["dtype"]) for c in carry]

    def session(data, level=None, threads=1, spin=True):
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        if level is not None:
            options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        if not spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        s = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        return s, [i.name for i in s.get_inputs()], carry_zeros

    variants = SESSION_VARIANTS.items() if options else ()
    out = {label: session(exported.data, **v) for label, v in variants}
    for path in files:
        with open(path, "rb") as f:
            out[f"file {os.path.basename(path)}"] = session(f.read())
    return out


def measure(grid, sessions=False, files=()) -> dict:
    """Every configuration built first, then `rounds` interleaved rounds; with `sessions`
    (or `files`) the variants of `variant_sessions` too, at the most streams."""
    runners = {}
    try:  # first: exporting clears JAX's caches (`experiments.export`), compiled steps too
        model, state = _model(grid, "complex")
        session = onnx_step_session(model, state)
        vocab = vocabulary_size(model)
        for n in grid["streams"]:
            runners["onnxruntime", n] = onnx_runner(session, n, vocab)
        if sessions or files:
            n = max(grid["streams"])
            for label, triple in variant_sessions(model, state, files, options=sessions).items():
                runners[f"onnxruntime ({label})", n] = onnx_runner(triple, n, vocab)
        onnx_error = None
    except ImportError:
        onnx_error = NO_ONNXRUNTIME
    for form in ("complex", "real"):
        for n in grid["streams"]:
            runners[f"jax-{form}", n] = jax_runner(grid, form, n)
            _log(f"  compiled jax {form} x{n}")
    times = {key: [] for key in runners}
    cpu = {key: [] for key in runners}
    load = [os.getloadavg()]
    for r in range(grid["rounds"]):
        for key, (step_once, _) in runners.items():
            for _ in range(2):  # untimed: the caches still hold the previous configuration's
                step_once()
            ms, cpu_ms = [], []
            for _ in range(grid["tokens"]):
                start, start_cpu = time.perf_counter(), time.process_time()
                step_once()
                cpu_ms.append(1e3 * (time.process_time() - start_cpu))
                ms.append(1e3 * (time.perf_counter() - start))
            times[key].append(float(np.median(ms)))
            cpu[key].append(float(np.median(cpu_ms)))
        load.append(os.getloadavg())
        _log(f"  round {r + 1}/{grid['rounds']}")
    rows = [
        {"runtime": runtime, "streams": n, "ms": times[runtime, n], "cpu_ms": cpu[runtime, n]}
        | info
        for (runtime, n), (_, info) in sorted(runners.items(), key=lambda kv: kv[0])
    ]
    return {"rows": rows, "onnx_error": onnx_error, "load": load}


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def _spread(values, fmt="{:,.3f}") -> str:
    """`median [lowest, highest]` of `values`."""
    v = np.asarray(values, float)
    return f"{fmt.format(np.median(v))} [{fmt.format(v.min())}, {fmt.format(v.max())}]"


def onnx_ratios(results) -> list[dict]:
    """Per number of streams: onnxruntime's CPU time over each JAX form's, the ratio taken
    within each round (`ratios[form]`, one per round)."""
    by = {(r["runtime"], r["streams"]): r for r in results["rows"]}
    out = []
    for (runtime, n), row in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if not runtime.startswith("onnxruntime"):
            continue
        ratios = {}
        for form in ("complex", "real"):
            jax_row = by.get((f"jax-{form}", n))
            if jax_row is not None and row.get("cpu_ms") and jax_row.get("cpu_ms"):
                pairs = zip(row["cpu_ms"], jax_row["cpu_ms"], strict=True)
                ratios[form] = [a / b for a, b in pairs]
        out.append({"runtime": runtime, "streams": n, "ratios": ratios})
    return out


def render(grid, results, info) -> str:
    from . import report

    lines = [
        f"# Many streams at once on `{info['backend']}`",
        "",
        "Written by `python -m experiments.bench.streams`; see its docstring. Model: depth "
        f"{grid['depth']}, H = {grid['d_model']}, N = {grid['d_state']}, ListOps vocabulary,",
        "batch norm, mean pooling, inference mode, float32. One call advances every stream by",
        f"one token. {grid['rounds']} interleaved rounds of {grid['tokens']} tokens per "
        "configuration: 'ms per call' (wall) and 'CPU ms per call' (the process's CPU time,",
        "every thread) are the medians over rounds of each round's median, with the lowest and",
        "highest round in brackets; tokens/s is streams / (wall ms per call).",
        "",
        "## Machine",
        "",
        *report.machine_lines(info, end_load=results["load"][-1]),
        "- The machine was shared with other jobs during the run (other agents' test suites",
        "  on its cores): absolute times are noisy upwards; compare within the table",
        "  (ratios), which the interleaving keeps fair.",
        "",
        "| runtime | streams | ms per call [low, high] | CPU ms per call [low, high] | "
        "tokens/s [low, high] | tokens/s ÷ one stream's | carry per stream | "
        "XLA temp per stream |",
        "|---|---|---|---|---|---|---|---|",
    ]
    one = {r["runtime"]: np.median(r["ms"]) for r in results["rows"] if r["streams"] == 1}
    for r in results["rows"]:
        ms, n = np.asarray(r["ms"]), r["streams"]
        rate = n / (np.median(ms) / 1e3)
        speedup = (n / np.median(ms)) / (1 / one[r["runtime"]]) if r["runtime"] in one else None
        temp = r["temp_bytes_per_stream"]
        cpu = _spread(r["cpu_ms"]) if r.get("cpu_ms") else "—"
        lines.append(
            f"| {r['runtime']} | {n} | {_spread(ms)} | {cpu} "
            f"| {rate:,.0f} [{n / ms.max() * 1e3:,.0f}, {n / ms.min() * 1e3:,.0f}] | "
            + ("—" if speedup is None else f"{speedup:,.1f}×")
            + f" | {r['carry_bytes'] / 1024:,.1f} KB | "
            + ("—" if temp is None else f"{temp / 1024:,.1f} KB")
            + " |"
        )
    if results["onnx_error"]:
        lines.append(f"| onnxruntime | — | {results['onnx_error']} | | | | | |")
    ratios = onnx_ratios(results)
    if ratios:
        lines += [
            "",
            "## onnxruntime's step against JAX's",
            "",
            "CPU time of the ONNX step over the jitted `StreamPool` step's, the ratio taken "
            "within each round:",
            "median over rounds [lowest, highest round].",
            "",
            "| runtime | streams | ÷ jax-complex | ÷ jax-real |",
            "|---|---|---|---|",
        ]
        for r in ratios:
            cells = [
                _spread(r["ratios"][f], "{:.2f}×") if f in r["ratios"] else "—"
                for f in ("complex", "real")
            ]
            lines.append(f"| {r['runtime']} | {r['streams']} | {cells[0]} | {cells[1]} |")
    lines.append("")
    return "\n".join(lines)


def _onnx_file(value: str) -> str:
    """`--onnx`: an existing file (UTF-8 path), checked when the flag is parsed."""
    from ..runs.flags import text

    if not os.path.isfile(text(value)):
        what = "is not a file" if os.path.exists(value) else "does not exist"
        raise argparse.ArgumentTypeError(f"{value!r} {what}")
    return value


def main(argv=None) -> int:
    """The command line; a bad flag or an existing output (without --overwrite) is one
    `error:` line, status 2, before anything is measured."""
    from ..runs.atomic import write_atomic
    from ..runs.flags import add_overwrite, output_file, refuse_existing

    parser = argparse.ArgumentParser(
        prog="python -m experiments.bench.streams", description=__doc__
    )
    parser.add_argument(
        "--quick", action="store_true", help="a tiny model, few rounds (seconds) [off]"
    )
    parser.add_argument(
        "--out",
        type=output_file,
        help="Markdown to write [STREAMS-<backend>.md here; quick: stdout]",
    )
    parser.add_argument("--json", type=output_file, help="also write the raw results here [none]")
    parser.add_argument(
        "--sessions",
        action="store_true",
        help="also onnxruntime with other session options (SESSION_VARIANTS), at the most "
        "streams [off]",
    )
    parser.add_argument(
        "--onnx",
        action="append",
        type=_onnx_file,
        default=[],
        metavar="FILE",
        help="also this exported ONNX step (e.g. from another commit), at the most streams; "
        "repeatable [none]",
    )
    add_overwrite(parser)
    args = parser.parse_args(argv)
    refuse_existing(parser, [args.out, args.json], overwrite=args.overwrite)
    import jax

    default = os.path.join(HERE, f"STREAMS-{jax.default_backend()}.md")
    out = args.out or (None if args.quick else default)
    if out == default:
        refuse_existing(parser, [out], flag="the default --out", overwrite=args.overwrite)
    from . import report

    grid = QUICK if args.quick else FULL
    info = report.machine_info()
    results = measure(grid, sessions=args.sessions, files=args.onnx)
    text = render(grid, results, info)
    if args.json:
        write_atomic(args.json, json.dumps(results, indent=1).encode())
    if out:
        write_atomic(out, text.encode())
        _log(f"wrote {out}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

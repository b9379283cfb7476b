"""Streaming a deep LRU token by token: the step against re-running the parallel call.

    python -m experiments.bench.streaming [--quick] [--out FILE]

(also run by `python -m experiments.bench` / `./dev.sh bench`, which writes
`STREAMING-<backend>.md` here). The model is the ListOps one of the paper's Table 9
(depth 6, H = 128, N = 256, token embedding of the ListOps vocabulary, batch norm, mean
pooling; `experiments.lra.steps.build_model`), in inference mode.

- **JAX step**: `LRUModel.step` under `jax.jit`, one call per token from Python, each
  waited for (what a generation loop pays, dispatch included), for a batch of 1 and of 64
  streams (`jax.vmap`), in both forms. Timed in three windows of the same stream — at
  positions 0, 2,048 and 4,096 (the stream advanced between them by a jitted `lax.scan`
  of the step) — to show that the time per token does not depend on the position.
- **Memory**: the carry (bytes per stream) and the XLA temp of the compiled step are
  fixed by the shapes, so they do not grow with the tokens; the process's resident memory
  is read before and after streaming the 4,096 tokens.
- **Re-running the parallel call** on the growing prefix (what a model without a
  recurrent state must do for each new token): one call of the whole-sequence model at
  L = 1,024 and 4,096 (batch 1), and its XLA temp.
- **onnxruntime's step**: the same model exported by `eqx_lru.export` (real form,
  batch norm folded) and run by onnxruntime (one intra-op thread), same windows.

Times are medians over the timed tokens of each window.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np

from .streaming_report import render

HERE = os.path.dirname(os.path.abspath(__file__))

FULL = {
    "depth": 6,
    "d_model": 128,
    "d_state": 256,
    "batches": (1, 64),
    "tokens": 100,
    "positions": (0, 2048, 4096),
    "prefix": (1024, 4096),
    "prefix_calls": 3,
}
QUICK = {
    "depth": 2,
    "d_model": 16,
    "d_state": 16,
    "batches": (1, 4),
    "tokens": 10,
    "positions": (0, 64),
    "prefix": (64,),
    "prefix_calls": 2,
}


def _rss_mb() -> float | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return None


def _model(grid, form):
    import jax

    from experiments.lra import steps, tasks
    from experiments.lra.config import RunConfig

    config = RunConfig.defaults(tasks.LISTOPS).replace(
        form=form, method="sequential", **{k: grid[k] for k in ("depth", "d_model", "d_state")}
    )
    import eqx_lru

    model, state = steps.build_model(config, steps.task_spec(tasks.LISTOPS), jax.random.PRNGKey(0))
    assert isinstance(model, eqx_lru.LRUModel), type(model)  # the LRU core: an LRUModel
    return model, state


def vocabulary_size(model) -> int:
    """The number of tokens of `model`'s embedding encoder."""
    import equinox as eqx

    assert isinstance(model.encoder, eqx.nn.Embedding), type(model.encoder)
    return model.encoder.num_embeddings


def _windows(make_stream, grid) -> dict:
    """Median per-token wall and CPU ms of one stream per window start. Every stream is
    first advanced to its start (`make_stream(start)` returns its `step_once`); then the
    streams take turns, one token each, so that a change of load on a shared machine hits
    every window alike."""
    streams = {str(p): make_stream(p) for p in grid["positions"]}
    wall = {p: [] for p in streams}
    cpu = {p: [] for p in streams}
    for _ in range(grid["tokens"]):
        for p, step_once in streams.items():
            w, c = time.perf_counter(), time.process_time()
            step_once()
            cpu[p].append(time.process_time() - c)
            wall[p].append(time.perf_counter() - w)
    return {
        "ms": {p: 1e3 * float(np.median(v)) for p, v in wall.items()},
        "cpu_ms": {p: 1e3 * float(np.median(v)) for p, v in cpu.items()},
    }


def jax_step(grid, form, batch) -> dict:
    import jax
    import jax.numpy as jnp

    model, state = _model(grid, form)
    vocab = vocabulary_size(model)
    rng = np.random.default_rng(0)

    def one(carry, x_t):
        return model.step(carry, x_t, state)

    step = jax.jit(jax.vmap(one))

    @jax.jit
    def advance_scan(carry, xs):  # xs: (n, batch)
        return jax.lax.scan(lambda c, x: (step(c, x)[0], None), carry, xs)[0]

    carry = jax.vmap(lambda _: model.init_carry())(jnp.arange(batch))
    tokens = jnp.asarray(rng.integers(0, vocab, (grid["tokens"], batch)), jnp.int32)
    compiled = step.lower(carry, tokens[0]).compile()
    temp = compiled.memory_analysis()
    jax.block_until_ready(step(carry, tokens[0]))  # warm-up
    token_list = list(tokens)  # sliced once, not per timed call

    def make_stream(start):
        box = {"carry": carry, "t": 0}
        chunk = math.gcd(*grid["positions"])  # one compilation of the advancing scan
        for _ in range(start // chunk):
            xs = jnp.asarray(rng.integers(0, vocab, (chunk, batch)), jnp.int32)
            box["carry"] = jax.block_until_ready(advance_scan(box["carry"], xs))

        def step_once():
            box["carry"], y = step(box["carry"], token_list[box["t"] % grid["tokens"]])
            box["t"] += 1
            y.block_until_ready()

        return step_once

    rss_before = _rss_mb()
    times = _windows(make_stream, grid)
    carry_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(carry)) // batch
    return {
        "form": form,
        "batch": batch,
        **times,
        "carry_bytes": int(carry_bytes),
        "temp_kb": None if temp is None else temp.temp_size_in_bytes / 1024,
        "rss_before_mb": rss_before,
        "rss_after_mb": _rss_mb(),
    }


def parallel_prefix(grid, form, length) -> dict:
    import jax
    import jax.numpy as jnp

    model, state = _model(grid, form)
    vocab = vocabulary_size(model)
    x = jnp.asarray(np.random.default_rng(1).integers(0, vocab, (1, length)), jnp.int32)
    call = jax.jit(jax.vmap(lambda x: model(x, state, inference=True)[0]))
    compiled = call.lower(x).compile()
    temp = compiled.memory_analysis()
    jax.block_until_ready(call(x))
    times = []
    for _ in range(grid["prefix_calls"]):
        t0 = time.perf_counter()
        jax.block_until_ready(call(x))
        times.append(time.perf_counter() - t0)
    return {
        "form": form,
        "length": length,
        "ms": 1e3 * float(np.median(times)),
        "temp_kb": None if temp is None else temp.temp_size_in_bytes / 1024,
    }


#: Why an ONNX measurement is missing, when onnxruntime is.
NO_ONNXRUNTIME = "onnxruntime is not installed (pip install -e '.[export]')"


def onnx_step_session(model, state):
    """The model's step exported to ONNX by `eqx_lru.export` (real form, batch norm folded,
    symbolic batch) in an onnxruntime session with one intra-op thread: `(session, input
    names, carry zeros)`, `carry_zeros(batch)` the carry of `batch` new streams. The one
    place the benchmarks reach the exporter."""
    import onnxruntime as ort

    import eqx_lru.export

    exported = eqx_lru.export.export(model, state, format="onnx", program="step")
    program = exported.program
    assert program is not None, "a step export describes its program"
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(exported.data, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    carry = program.carry or []  # the step's carry: one spec per state array

    def carry_zeros(batch):
        return [np.zeros((batch, *c["shape"][1:]), c["dtype"]) for c in carry]

    return session, names, carry_zeros


def onnx_step(grid, batch) -> dict:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return {"batch": batch, "error": NO_ONNXRUNTIME}

    model, state = _model(grid, "complex")
    vocab = vocabulary_size(model)
    session, names, carry_zeros = onnx_step_session(model, state)
    rng = np.random.default_rng(0)
    zeros = carry_zeros(batch)

    def make_stream(start):
        box: dict[str, list] = {"carry": zeros}

        def step_once():
            x_t = rng.integers(0, vocab, batch).astype(np.int32)
            feed = dict(zip(names, [x_t, *box["carry"]], strict=True))
            _, *box["carry"] = session.run(None, feed)

        for _ in range(start):
            step_once()
        return step_once

    times = _windows(make_stream, grid)
    return {"batch": batch, **times}


def measure(grid) -> dict:
    results = {"jax_step": [], "parallel": [], "onnx_step": [], "load_start": os.getloadavg()}
    for form in ("complex", "real"):
        for batch in grid["batches"]:
            results["jax_step"].append(jax_step(grid, form, batch))
            _log(f"  jax step {form} batch {batch}: {results['jax_step'][-1]['ms']}")
    for length in grid["prefix"]:
        for form in ("complex", "real"):
            results["parallel"].append(parallel_prefix(grid, form, length))
            _log(f"  parallel {form} L={length}: {results['parallel'][-1]['ms']:.1f} ms")
    for batch in grid["batches"]:
        results["onnx_step"].append(onnx_step(grid, batch))
        _log(f"  onnxruntime step batch {batch}: {results['onnx_step'][-1].get('ms')}")
    results["load_end"] = os.getloadavg()
    return results


def _log(msg):
    print(msg, file=sys.stderr, flush=True)


def default_out(backend: str) -> str:
    """Where the table goes without `--out`: `STREAMING-<backend>.md` beside this file."""
    return os.path.join(HERE, f"STREAMING-{backend}.md")


def _parser() -> argparse.ArgumentParser:
    from experiments.runs.flags import add_overwrite, output_file

    parser = argparse.ArgumentParser(
        prog="python -m experiments.bench.streaming", description=__doc__
    )
    parser.add_argument(
        "--quick", action="store_true", help="a tiny model and few tokens (seconds) [off]"
    )
    parser.add_argument(
        "--out",
        type=output_file,
        help="Markdown to write [STREAMING-<backend>.md here; quick: stdout]",
    )
    parser.add_argument("--json", type=output_file, help="also write the raw results here [none]")
    add_overwrite(parser)
    return parser


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # paths checked here, not after the measurements
    import jax

    from experiments.runs.atomic import write_atomic

    from . import report

    grid = QUICK if args.quick else FULL
    out = args.out or (None if args.quick else default_out(jax.default_backend()))
    report.check_writable(parser, [("the default --out", None if args.out else out)])
    from experiments.runs.flags import refuse_existing

    refuse_existing(parser, [out], overwrite=args.overwrite)
    refuse_existing(parser, [args.json], flag="--json", overwrite=args.overwrite)
    info = report.machine_info()
    results = measure(grid)
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

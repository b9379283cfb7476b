"""One training step of the LRA trainer at the paper's Table 9 sizes, in this process.

`python -m experiments.bench.model SPEC` prints one JSON line. A spec:
`{"task", "core" (a registered core, `experiments/lra/cores.py`), "form" ("complex" |
"real"), "remat", "calls"}`;
`calls = 0` compiles only. The step is the trainer's own program
(`experiments.lra.steps.compile_train_step` on the settings `train.resolve_config` gives for
`--task TASK --core CORE --form FORM --[no-]remat`): Table 9's depth, H, N, batch size and
full sequence length, on example batches of the official shapes (no data on disk needed).

- `temp_gb`: XLA's scratch buffers of the compiled step (`memory_analysis()`; compile only,
  nothing of that size is allocated, so any machine reports it);
- `step_s`: median of `calls` timed steps after one warm-up step;
- `peak_gb`: the device's `memory_stats()["peak_bytes_in_use"]` after the steps, where the
  backend reports it (GPUs; not the CPU).
"""

import json
import statistics
import sys
import tempfile
import time


def settings(task: str, core: str, form: str, remat: bool | None):
    """The trainer's settings of one run (Table 9 defaults for `task`; `remat=None`: the
    trainer's default)."""
    from experiments.lra import train

    argv = ["--task", task, "--core", core, "--form", form]
    if remat is not None:
        argv.append("--remat" if remat else "--no-remat")
    with tempfile.TemporaryDirectory() as out:
        args = train.parse_args([*argv, "--out", out, "--data-root", out])
        return train.resolve_config(args)


def measure(spec: dict) -> dict:
    import jax

    from experiments.lra import steps

    cfg = settings(spec["task"], spec["core"], spec["form"], spec["remat"])
    data = steps.task_spec(spec["task"])
    start = time.perf_counter()
    compiled, args = steps.compile_train_step(cfg, data)
    result = {
        "spec": spec,
        "batch": cfg.batch_size,
        "length": data.seq_len,
        "depth": cfg.depth,
        "H": cfg.d_model,
        "N": cfg.d_state,
        "bidirectional": cfg.bidirectional,
        "compile_s": time.perf_counter() - start,
        "temp_gb": compiled.memory_analysis().temp_size_in_bytes / 1e9,
        "args_gb": compiled.memory_analysis().argument_size_in_bytes / 1e9,
    }
    if spec.get("calls"):
        jax.block_until_ready(compiled(*args))  # warm-up
        times = []
        for _ in range(spec["calls"]):
            start = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            times.append(time.perf_counter() - start)
        result["step_s"] = statistics.median(times)
        stats = jax.devices()[0].memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            result["peak_gb"] = stats["peak_bytes_in_use"] / 1e9
    return result


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))), flush=True)

"""The child processes of parts (b) and (c), and the ListOps data of part (d).

    python -m experiments.gpu_check._worker PART CONFIG_JSON RECORDS DEADLINE

appends its results to the JSON-lines file RECORDS as it goes and stops starting new
measurements once `time.time()` passes DEADLINE. JAX is imported inside the parts (the
ListOps data never imports it).

- `layer`: `experiments.bench.interleave.run` for each (mode, L), fwd+bwd first and the
  longest first, every variant of one configuration interleaved in one process, with the
  bytes each moves per call (`experiments.bench.traffic.bytes_moved`, a model).
- `memory`: the trainer's step of the longest task, PathX (`experiments.lra.memory.table9`
  settings, `train.compile_train_step`), compiled, run twice, then the device's
  `memory_stats()["peak_bytes_in_use"]` beside XLA's compile-time sizes.
- `listops-data`: ListOps files in the official format, drawn in parallel processes.
"""

import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._jobs import die_with_parent, records_to

__all__ = ["layer_variants", "main"]

Emit = Callable[[dict[str, Any]], None]


def layer_variants(default: str, *, dry: bool = False) -> list[str]:
    """The rows of the layer table, in the order they compile (a cut keeps the first):
    the floor and App. A, both forms with the default method, `PallasScan`, the bfloat16
    compute dtype, then the other methods. The dry run keeps one row of each kind."""
    if dry:
        return ["floor", "app_a", f"complex-{default}", f"real-{default}-bf16"]
    methods = [default] + [m for m in ("associative", "pallas", "sequential") if m != default]
    rows = ["floor", "app_a"]
    rows += [f"{form}-{m}" for m in methods[:1] for form in ("complex", "real")]
    rows += [f"{form}-pallas" for form in ("complex", "real") if default != "pallas"]
    rows.append(f"real-{default}-bf16")
    rest = [m for m in methods[1:] if m != "pallas"]
    return rows + [f"{form}-{m}" for m in rest for form in ("complex", "real")]


def layer(config: dict[str, Any], emit: Emit, deadline: float) -> None:
    import jax

    from experiments.bench import impls, interleave, traffic

    device = jax.devices()[0].device_kind
    default = impls.default_method()
    variants = layer_variants(default, dry=bool(config.get("dry")))
    emit(
        {
            "event": "device",
            "device_kind": device,
            "bandwidth_gbs": traffic.bandwidth_gbs(device),
            "default_method": default,
            "variants": variants,
        }
    )
    B, H, N = config["B"], config["H"], config["N"]
    first = True
    for mode in ("grad", "fwd"):
        for L in config["lengths"]:
            if not first and time.time() >= deadline:
                emit({"event": "skipped", "mode": mode, "L": L})
                continue
            first = False
            spec = {"mode": mode, "H": H, "N": N, "L": L, "B": B, "rounds": config["rounds"]}
            spec["variants"] = [{"impl": v} for v in variants]
            result = interleave.run(spec, deadline=deadline)
            moved = {v: traffic.bytes_moved(v, mode, B=B, H=H, N=N, L=L) for v in result["ms"]}
            emit({"event": "spec", **result, "bytes": moved})


def _step_memory(config: dict[str, Any], form: str) -> dict[str, Any]:
    import jax

    from experiments.lra import memory, tasks, train
    from experiments.lra.steps import task_spec

    # None: the registry's longest task (PathX), whose step needs the most memory.
    task = config["task"] or max(tasks.names(), key=lambda t: tasks.get_task(t).seq_len)
    cfg = memory.table9(task, remat=config["remat"], form=form, **config["overrides"])
    spec = task_spec(task, seq_len=config["length"])
    start = time.perf_counter()
    compiled, args = train.compile_train_step(cfg, spec)
    compile_s = time.perf_counter() - start
    analysis = compiled.memory_analysis()
    jax.block_until_ready(compiled(*args))
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    step_s = time.perf_counter() - start
    stats = jax.devices()[0].memory_stats() or {}
    return {
        "event": "step",
        "task": task,
        "form": form,
        "remat": cfg.remat,
        "batch": cfg.batch_size,
        "length": spec.seq_len,
        "depth": cfg.depth,
        "H": cfg.d_model,
        "N": cfg.d_state,
        "bidirectional": cfg.bidirectional,
        "compile_s": compile_s,
        "step_s": step_s,
        "xla_temp_gb": analysis.temp_size_in_bytes / 1e9,
        "xla_args_gb": analysis.argument_size_in_bytes / 1e9,
        "xla_out_gb": analysis.output_size_in_bytes / 1e9,
        "peak_gb": stats["peak_bytes_in_use"] / 1e9 if "peak_bytes_in_use" in stats else None,
        "limit_gb": stats["bytes_limit"] / 1e9 if "bytes_limit" in stats else None,
        "device_kind": jax.devices()[0].device_kind,
    }


def memory(config: dict[str, Any], emit: Emit, deadline: float) -> None:
    for i, form in enumerate(config["forms"]):
        if i and time.time() >= deadline:
            emit({"event": "skipped", "form": form})
            continue
        try:
            emit(_step_memory(config, form))
        except Exception as e:  # e.g. RESOURCE_EXHAUSTED: a finding, not a crash of the check
            emit({"event": "error", "form": form, "error": f"{type(e).__name__}: {e}"[:2000]})


def _draw(job: tuple[int, int]) -> list[tuple[str, int]]:
    from experiments.lra.synthetic.listops import generate_listops

    n, seed = job
    return generate_listops(n, seed=seed)


def listops_data(config: dict[str, Any], emit: Emit, deadline: float) -> None:
    """`config["counts"]` (train, val, test) unique ListOps examples drawn by the LRA
    generator's settings in `config["workers"]` processes (seeds `seed * 1000 + w`), written
    as `listops-1000/basic_{train,val,test}.tsv` under `config["root"]`, the format of
    `experiments.lra.synthetic.write_listops`."""
    import concurrent.futures

    from experiments.runs.atomic import write_atomic

    start = time.perf_counter()
    counts, workers = config["counts"], max(1, config["workers"])
    total = sum(counts)
    each = -(-total * 101 // (100 * workers)) + 1  # a few more: drawn apart, some repeat
    jobs = [(each, config["seed"] * 1000 + w) for w in range(workers)]
    unique: dict[str, int] = {}
    with concurrent.futures.ProcessPoolExecutor(workers, initializer=die_with_parent) as pool:
        for drawn in pool.map(_draw, jobs):
            for expr, label in drawn:
                unique.setdefault(expr, label)
    examples = list(unique.items())[:total]
    if len(examples) < total:
        raise RuntimeError(f"drew {len(examples)} unique ListOps examples of {total}")
    folder = Path(config["root"]) / "listops-1000"
    folder.mkdir(parents=True, exist_ok=True)
    begin = 0
    for split, size in zip(("train", "val", "test"), counts, strict=True):
        rows = "".join(f"{e}\t{label}\n" for e, label in examples[begin : begin + size])
        write_atomic(folder / f"basic_{split}.tsv", ("Source\tTarget\n" + rows).encode())
        begin += size
    emit({"event": "data", "folder": str(folder), "seconds": time.perf_counter() - start})


PARTS = {"layer": layer, "memory": memory, "listops-data": listops_data}


def main(argv: list[str]) -> int:
    part, config, records, deadline = argv[0], json.loads(argv[1]), argv[2], float(argv[3])
    with records_to(records) as emit:
        try:
            PARTS[part](config, emit, deadline)
        except Exception as e:
            emit({"event": "error", "error": f"{type(e).__name__}: {e}"[:2000]})
            traceback.print_exc()
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

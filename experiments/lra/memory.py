"""Memory of one training step per LRA task at Table 9 sizes, with and without remat.

    python -m experiments.lra.memory [--tasks pathx ...] > table.md   # (see MEMORY.md)
    python -m experiments.lra.memory --time   # step time with/without remat, reduced size

**Memory** is measured compile-only: the trainer's jitted step (`steps.compile_train_step`,
the very program `train.py` runs) is lowered and compiled for the default backend at the
paper's sizes and `compiled.memory_analysis()` read; nothing of that size is allocated,
so a laptop CPU reports what the step needs. `temp` is XLA's scratch (the activations the
backward pass keeps, the scan's intermediates); `arguments` are the parameters, optimiser
state and batch. On the CPU this is a proxy for a GPU: GPU.md §4 measured PathX at 38.7 GB
peak on an H100 where the CPU compile reported 29.0 GB of temp.

**Time** (`--time`): the same step at a reduced size (Table 9 settings but `--time-length`,
`--time-batch`), median of `--repeats` calls after one warm-up, remat off and on (calls
alternating).

**Probe** (`--probe`): does `jax.checkpoint` save memory in this backend's compiled
program at all? Six residual blocks of four `tanh(h @ W)` layers (batch 8, L 512, width
128) written out one after the other, each block checkpointed or not, against the same
blocks as a `jax.lax.scan` over stacked weights with a checkpointed body.
"""

import argparse
import platform
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any

from .tasks import names

if TYPE_CHECKING:
    from .config import RunConfig

# JAX and the trainer are imported inside the functions: `--help` and a bad flag are
# answered before they load.

TASKS = names()  # every registered task


def table9(task: str, *, remat: bool, method: str = "auto", **overrides) -> "RunConfig":
    """The trainer's settings of `task` (Table 9 defaults) with `remat` and overrides."""
    from .config import RunConfig

    config = RunConfig.defaults(task).replace(remat=remat, method=method, **overrides)
    return config.replace(eval_batch_size=config.batch_size)


def measure_memory(task: str, *, remat: bool, method: str = "auto") -> dict:
    from . import train
    from .steps import task_spec

    cfg = table9(task, remat=remat, method=method)
    t0 = time.perf_counter()
    compiled, _ = train.compile_train_step(cfg, task_spec(task))
    mem = compiled.memory_analysis()
    return {
        "task": task,
        "remat": remat,
        "batch": cfg.batch_size,
        "length": task_spec(task).seq_len,
        "temp_gb": mem.temp_size_in_bytes / 1e9,
        "args_gb": mem.argument_size_in_bytes / 1e9,
        "compile_s": time.perf_counter() - t0,
    }


def measure_sequence_parallel(
    task: str, devices: int, *, length: int | None = None, batch: int | None = None
) -> dict:
    """Compile-only XLA temp per device of `task`'s Table 9 step (remat as the trainer sets
    it) with each sequence split over `devices` devices (`--sequence-parallel`, the whole
    batch on every device: a mesh of 1 x `devices`)."""
    import jax

    from ..runs import parallel as par
    from . import train
    from .config import RunConfig
    from .steps import task_spec

    overrides: dict[str, Any] = {} if batch is None else {"batch_size": batch}
    cfg = table9(task, remat=RunConfig.defaults(task).remat, sequence_parallel=devices, **overrides)
    spec = task_spec(task, seq_len=length)
    mesh = par.make_mesh(jax.devices()[:devices], sequence=devices)
    t0 = time.perf_counter()
    compiled, _ = train.compile_train_step(cfg, spec, mesh=mesh)
    mem = compiled.memory_analysis()
    return {
        "task": task,
        "devices": devices,
        "batch": cfg.batch_size,
        "length": spec.seq_len,
        "remat": cfg.remat,
        "temp_gb": mem.temp_size_in_bytes / 1e9,
        "args_gb": mem.argument_size_in_bytes / 1e9,
        "compile_s": time.perf_counter() - t0,
    }


def measure_time(task: str, *, length: int, batch: int, repeats: int) -> tuple[float, float]:
    """Median step time without and with remat; the calls alternate, so a change in the
    machine's load hits both alike."""
    import jax

    from . import train
    from .steps import task_spec

    programs = []
    for remat in (False, True):
        cfg = table9(task, remat=remat, batch_size=batch)
        compiled, args = train.compile_train_step(cfg, task_spec(task, seq_len=length))
        jax.block_until_ready(compiled(*args))  # warm-up
        programs.append((compiled, args))
    times: list[list[float]] = [[], []]
    for _ in range(repeats):
        for i, (compiled, args) in enumerate(programs):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(*args))
            times[i].append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def remat_probe() -> dict[str, float]:
    """XLA temp (MB) of the gradient of the toy of `--probe`, four ways."""
    import functools

    import jax
    import jax.numpy as jnp

    def block(w, h):
        for _ in range(4):
            h = jnp.tanh(h @ w)
        return h

    def unrolled(ws, x, remat):
        f = jax.checkpoint(block) if remat else block
        for w in ws:
            x = x + f(w, x)
        return x.sum()

    def scanned(ws, x, remat):
        f = jax.checkpoint(block) if remat else block
        return jax.lax.scan(lambda h, w: (h + f(w, h), None), x, ws)[0].sum()

    ws, x = jnp.full((6, 128, 128), 0.01), jnp.ones((8, 512, 128))
    out = {}
    for name, fn in (("unrolled", unrolled), ("scan", scanned)):
        for remat in (False, True):
            c = jax.jit(jax.grad(functools.partial(fn, remat=remat))).lower(ws, x).compile()
            mem = c.memory_analysis()
            assert mem is not None  # the CPU and GPU backends report it
            out[f"{name}, remat {'on' if remat else 'off'}"] = mem.temp_size_in_bytes / 1e6
    return out


def machine() -> str:
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    dev = jax.devices()[0]
    return (
        f"{cpu}; {jax.device_count()} {dev.platform} device(s) ({dev.device_kind}); "
        f"JAX {jax.__version__}"
    )


def _parser() -> argparse.ArgumentParser:
    from experiments.runs.flags import POSITIVE_INT

    p = argparse.ArgumentParser(
        prog="python -m experiments.lra.memory", description=str(__doc__).split("\n\n")[0]
    )
    p.add_argument(
        "--tasks", nargs="+", choices=TASKS, default=list(TASKS), help="the tasks to measure [all]"
    )
    p.add_argument(
        "--method",
        default="auto",
        choices=("auto", "sequential", "associative"),
        help="the layers' scan method [auto]",
    )
    p.add_argument(
        "--time", action="store_true", help="time the step with/without remat instead [off]"
    )
    p.add_argument(
        "--probe", action="store_true", help="does jax.checkpoint save memory here? (a toy) [off]"
    )
    p.add_argument(
        "--time-length", type=POSITIVE_INT, default=1024, help="with --time: sequence length [1024]"
    )
    p.add_argument("--time-batch", type=POSITIVE_INT, default=4, help="with --time: batch size [4]")
    p.add_argument(
        "--repeats", type=POSITIVE_INT, default=5, help="with --time: timed calls per setting [5]"
    )
    p.add_argument(
        "--sequence-parallel",
        type=POSITIVE_INT,
        nargs="+",
        metavar="N",
        help="XLA temp per device with each sequence split over N devices, for each N "
        "(set XLA_FLAGS=--xla_force_host_platform_device_count=max N on a CPU) [off]",
    )
    p.add_argument(
        "--length",
        type=POSITIVE_INT,
        help="with --sequence-parallel: this sequence length [the task's]",
    )
    p.add_argument(
        "--batch", type=POSITIVE_INT, help="with --sequence-parallel: this batch size [Table 9's]"
    )
    return p


def _check_devices(parser: argparse.ArgumentParser, wanted: list[int]) -> None:
    """`--sequence-parallel N` needs N devices: one `error:` line (status 2) otherwise."""
    import jax

    have = jax.device_count()
    if max(wanted) > have:
        parser.error(
            f"argument --sequence-parallel: {max(wanted)} devices asked for, this machine "
            f"has {have} ({jax.default_backend()}); on a CPU, set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={max(wanted)} first, or give "
            f"N <= {have}"
        )


def _sequence_parallel_table(args: argparse.Namespace) -> int:
    """`--sequence-parallel`'s table on stdout; status 2 (one line) for a split the mesh
    cannot make."""
    print(
        "| task | batch | L | remat | devices (N) | temp GB per device | vs N = first | "
        "arguments GB |\n|---|---|---|---|---|---|---|---|",
        flush=True,
    )
    for task in args.tasks:
        first = None
        for n in args.sequence_parallel:
            try:
                m = measure_sequence_parallel(task, n, length=args.length, batch=args.batch)
            except ValueError as e:  # a length or batch the mesh cannot split
                print(f"error: --sequence-parallel {n} on {task}: {e}", file=sys.stderr)
                return 2
            first = first or m["temp_gb"]
            print(
                f"| {task} | {m['batch']} | {m['length']} | {'on' if m['remat'] else 'off'} "
                f"| {n} | {m['temp_gb']:.2f} | {m['temp_gb'] / first:.2f}x "
                f"| {m['args_gb']:.3f} |",
                flush=True,
            )
            print(f"<!-- compile {m['compile_s']:.0f}s -->", file=sys.stderr, flush=True)
    return 0


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # every flag checked here, before any work
    if args.sequence_parallel:
        _check_devices(parser, args.sequence_parallel)
    print(f"# {machine()}", flush=True)
    if args.probe:
        print("| toy (6 blocks x 4 layers) | XLA temp MB |\n|---|---|")
        for name, mb in remat_probe().items():
            print(f"| {name} | {mb:.1f} |")
        return 0
    if args.sequence_parallel:
        return _sequence_parallel_table(args)
    if args.time:
        print(
            "| task | batch | L | step, no remat (s) | step, remat (s) | ratio |\n"
            "|---|---|---|---|---|---|",
            flush=True,
        )
        for task in args.tasks:
            off, on = measure_time(
                task, length=args.time_length, batch=args.time_batch, repeats=args.repeats
            )
            print(
                f"| {task} | {args.time_batch} | {args.time_length} | {off:.3f} | {on:.3f} | "
                f"{on / off:.2f}x |",
                flush=True,
            )
        return 0
    print(
        "| task | batch | L | temp GB, no remat | temp GB, remat | arguments GB |\n"
        "|---|---|---|---|---|---|",
        flush=True,
    )
    for task in args.tasks:
        off, on = (measure_memory(task, remat=r, method=args.method) for r in (False, True))
        print(
            f"| {task} | {off['batch']} | {off['length']} | {off['temp_gb']:.2f} | "
            f"{on['temp_gb']:.2f} | {off['args_gb']:.3f} |",
            flush=True,
        )
        print(
            f"<!-- compile {off['compile_s']:.0f}s / {on['compile_s']:.0f}s -->",
            file=sys.stderr,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    from experiments.runs.signals import exit_on_signal

    with exit_on_signal("run the same command again"):  # a signal: one line, status 130
        code = main()
    raise SystemExit(code)

"""Data parallelism over every visible device with `jax.sharding`, on one host or many.

The design is the plain SPMD one: a 1-D `Mesh` named `"data"` over `jax.devices()` (all
devices of all processes), the batch axis sharded over it with
`NamedSharding(mesh, P("data"))`, and the model, BatchNorm state and optimiser state
replicated (`P()`). The train step is one `jit`-compiled function of these global arrays:
XLA inserts the all-reduce of the gradients, and the batch-norm statistics (a `psum`
over the `jax.vmap` axis, i.e. over the *global* batch axis) become cross-device sums too.
So the maths is that of one device with the whole batch, whatever the device count.

**Several hosts.** Call `initialize_distributed` before touching any device: it runs
`jax.distributed.initialize()` when asked (`mode="on"`) or, with `mode="auto"`, when the
environment says this is one process of many (`JAX_COORDINATOR_ADDRESS`, or a cluster
launch of more than one process that JAX's own auto-detection finds: Slurm, Open MPI).
Each process then loads only its rows of each global batch (`process_rows`) and
`shard_batch` assembles the global array with `jax.make_array_from_process_local_data`.

Tested for real (tests/experiments/test_distributed.py) as two processes of two CPU devices each on
one machine, e.g. for process `i` of 2:

    JAX_COORDINATOR_ADDRESS=127.0.0.1:12345 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=i \
    XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu \
    python -m experiments.lra.train --distributed on --task listops ... --out SHARED

Only process 0 writes to `--out` (which all processes must see for `--resume`). The
processes check that they agree (settings, invocation, code, data) and fail together
(`multiprocess.py`); a process that dies, freezes or never connects ends the others with
one line after `LRA_HEARTBEAT_TIMEOUT` (default 100) or `LRA_INIT_TIMEOUT` (default 300)
seconds (`watchdog.py`).

**Sequence parallel.** `--sequence-parallel N` makes the mesh 2-D, `("data", "seq")`:
each sequence split over the N devices of a row (`eqx_lru.SequenceParallel`), the batch
over the rows. Keep N within the devices of one process (rows are consecutive devices).
"""

import os
import socket
import sys
from collections.abc import Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .env import jax_option
from .errors import UsageError

__all__ = [
    "AXIS",
    "SEQ_AXIS",
    "initialize_distributed",
    "CLUSTERS",
    "cluster",
    "distributed_env",
    "make_mesh",
    "data_size",
    "sequence_size",
    "check_batch_size",
    "process_rows",
    "replicate",
    "shard_batch",
]

AXIS = "data"
#: The mesh axis a sequence is split over with `--sequence-parallel N` (N > 1).
SEQ_AXIS = "seq"

#: Seconds without a heartbeat after which the distributed runtime declares a process
#: dead and stops the others with an error (JAX's default: 100).
HEARTBEAT_ENV = "LRA_HEARTBEAT_TIMEOUT"
#: Seconds the processes have to connect to the coordinator (JAX's default: 300).
INIT_ENV = "LRA_INIT_TIMEOUT"


#: The launchers `--distributed auto` recognises, by JAX's names: Open MPI's `mpirun` and
#: Slurm's `srun` (the other clusters JAX knows, Kubernetes and Cloud TPU, are found by
#: querying their services: `--distributed on` asks for them).
CLUSTERS = ("ompi", "slurm")


def cluster() -> tuple[str, int] | None:
    """The launch of `CLUSTERS` that `jax.distributed.initialize()` detects by itself, as
    `(its name, its process count)`, or None outside one. It is JAX's own detection
    (`jax._src.clusters`, not a public API: where a JAX version lacks it, None), so the
    trainer starts `jax.distributed` exactly where JAX finds the coordinator and ranks."""
    try:
        from jax._src.clusters import ClusterEnv

        kinds = [k for k in ClusterEnv._cluster_types if k.name in CLUSTERS]
    except (ImportError, AttributeError):
        return None
    for kind in kinds:
        try:
            if kind.is_env_present():
                return kind.name, int(kind.get_process_count())
        except Exception:  # an environment JAX cannot read: JAX would not start either
            return None
    return None


def distributed_env() -> str | None:
    """What marks a multi-process launch: `"JAX_COORDINATOR_ADDRESS"`, or the name of the
    cluster JAX detects (`cluster()`, e.g. `"slurm"`) when it runs more than one process;
    None otherwise."""
    if os.environ.get("JAX_COORDINATOR_ADDRESS"):
        return "JAX_COORDINATOR_ADDRESS"
    found = cluster()
    return found[0] if found is not None and found[1] > 1 else None


def say(text: str) -> None:
    """One line on stderr at once (a process that waits says so)."""
    print(text, file=sys.stderr, flush=True)


def _check_coordinator() -> None:
    """`--distributed on` needs a coordinator or a cluster launch: one line otherwise."""
    if distributed_env() is None and cluster() is None:
        raise UsageError(
            "--distributed on: no coordinator to connect to: set JAX_COORDINATOR_ADDRESS "
            "(host:port of process 0) with JAX_NUM_PROCESSES and JAX_PROCESS_ID on every "
            "process, or launch under SLURM or Open MPI; for one process, use --distributed "
            "off (or auto)."
        )


def _say_waiting(rank: int | None, count: int | None, where: str, connect: int) -> None:
    """What a process waits for, and how long, before it waits."""
    say(
        f"process {'?' if rank is None else rank}: waiting for the "
        f"{'' if count is None else f'{count} '}processes of this run to connect to {where}; "
        f"up to {connect} s ({INIT_ENV}), then it stops with one line."
    )


def initialize_distributed(mode: str = "auto") -> bool:
    """Start `jax.distributed` if `mode == "on"`, or if `"auto"` and `distributed_env()`.

    With `JAX_COORDINATOR_ADDRESS` set, `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID` give the
    process count and this process's rank; else JAX finds them in the cluster's
    environment (`cluster()`). Check them first (`env.check_environment`). Process 0 refuses a
    coordinator port in use; a process whose peers do not all connect within
    `LRA_INIT_TIMEOUT` seconds (default 300) stops with one line (`watchdog.before`);
    then `watchdog.Watchdog` watches the peers (`LRA_HEARTBEAT_TIMEOUT`, default 100).
    JAX's own timeouts are set 30 s longer, so the trainer's words come first. Returns
    whether it initialised.
    """
    from . import watchdog as _watchdog

    if mode not in ("auto", "on", "off"):
        raise ValueError(f"distributed mode must be 'auto', 'on' or 'off', got {mode!r}.")
    if mode == "off" or (mode == "auto" and distributed_env() is None):
        return False
    _check_coordinator()
    kwargs = {}
    for env, arg in (("JAX_NUM_PROCESSES", "num_processes"), ("JAX_PROCESS_ID", "process_id")):
        if os.environ.get(env):
            kwargs[arg] = int(os.environ[env])
    heartbeat = int(os.environ.get(HEARTBEAT_ENV) or 100)
    connect = int(os.environ.get(INIT_ENV) or 300)
    if kwargs.get("process_id") == 0:
        _check_port_free(os.environ.get("JAX_COORDINATOR_ADDRESS"))
    # The CPU backend's collectives across processes: gloo (JAX 0.10.2's default; without
    # any, a multi-process CPU run fails at its first cross-process all-reduce).
    if jax_option("jax_cpu_collectives_implementation") in (None, "", "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # Its SIGTERM handler would replace the trainer's; `multiprocess.StopVote` agrees on
    # stopping instead, for every signal.
    jax.config.update("jax_enable_preemption_service", False)
    where = os.environ.get("JAX_COORDINATOR_ADDRESS") or "the coordinator JAX found"
    message = (
        f"the processes of this run did not all connect to {where} within {connect} s "
        f"({INIT_ENV}): one did not start, stopped before connecting (see its output), or "
        "has another JAX_COORDINATOR_ADDRESS or JAX_NUM_PROCESSES. Start every process "
        "with the same values."
    )
    _say_waiting(kwargs.get("process_id"), kwargs.get("num_processes"), where, connect)
    with _watchdog.before(connect, message):
        jax.distributed.initialize(
            initialization_timeout=connect + 30, heartbeat_timeout_seconds=heartbeat + 30, **kwargs
        )
    _watchdog.Watchdog(jax.process_index(), jax.process_count(), peer_timeout=heartbeat).start()
    # The CPU collectives connect on their first use and give every peer 30 s to arrive
    # (gloo's rendezvous, not configurable): met first at the training step, one process
    # still compiling on a loaded machine failed the run. Connect now, while the
    # processes are in step (they have just met at the coordinator).
    from . import multiprocess as _multiprocess

    _multiprocess.gather(b"connected")
    return True


def _check_port_free(address: str | None) -> None:
    """Refuse a coordinator address whose port something on this machine listens on."""
    if not address or ":" not in address:
        return
    port = int(address.rsplit(":", 1)[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as e:
            raise UsageError(
                f"JAX_COORDINATOR_ADDRESS={address!r}: port {port} is in use on this machine "
                f"({e.strerror or e}), by another program or an earlier run still alive; "
                "choose a free port for every process of the run."
            ) from None


def make_mesh(devices=None, *, sequence: int = 1) -> Mesh:
    """A 1-D mesh named `"data"` over `devices` (default: every device of every process),
    or with `sequence > 1` a 2-D mesh `("data", "seq")` of shape
    `(devices // sequence, sequence)`: each example's sequence split over `sequence`
    devices (`eqx_lru.SequenceParallel`), the batch over the rest. Consecutive devices
    (the devices of one process first) share a sequence, so the per-step exchanges of the
    scan stay within a process where they can."""
    devices = jax.devices() if devices is None else list(devices)
    if sequence == 1:
        return Mesh(np.asarray(devices), (AXIS,))
    if sequence < 1 or len(devices) % sequence:
        raise ValueError(
            f"--sequence-parallel {sequence} must divide the number of devices "
            f"({len(devices)}): the devices form a (data x sequence) grid. Use a divisor of "
            f"{len(devices)}, or limit the devices (CUDA_VISIBLE_DEVICES=...)."
        )
    grid = np.asarray(devices).reshape(len(devices) // sequence, sequence)
    return Mesh(grid, (AXIS, SEQ_AXIS))


def data_size(mesh: Mesh) -> int:
    """The number of devices the batch is split over (the `"data"` axis)."""
    return mesh.shape[AXIS]


def sequence_size(mesh: Mesh) -> int:
    """The number of devices each sequence is split over (1 without a `"seq"` axis)."""
    return mesh.shape.get(SEQ_AXIS, 1)


def check_batch_size(batch_size: int, mesh: Mesh, *, what: str = "--batch-size") -> None:
    """Raise a clear `ValueError` unless `batch_size` splits evenly over the mesh's data axis."""
    n = data_size(mesh)
    if batch_size < 1 or batch_size % n:
        lower = batch_size // n * n
        options = sorted({m for m in (lower, lower + n) if m > 0})
        raise ValueError(
            f"{what}={batch_size} must be a positive multiple of the number of devices "
            f"({n}: {mesh.devices.flat[0].platform} x{mesh.size}"
            + (f" / --sequence-parallel {sequence_size(mesh)}" if sequence_size(mesh) > 1 else "")
            + f"), because every device gets an equal share of each batch. Use e.g. {what} "
            + " or ".join(str(m) for m in options)
            + ", or limit the devices (CUDA_VISIBLE_DEVICES=...)."
        )


def process_rows(batch_size: int) -> slice:
    """The rows of a global batch that this process loads (all of them on one host)."""
    count, index = jax.process_count(), jax.process_index()
    per = batch_size // count
    if per * count != batch_size:
        raise ValueError(f"batch size {batch_size} does not split over {count} processes.")
    return slice(index * per, (index + 1) * per)


def replicate(tree, mesh: Mesh):
    """Put every array leaf of `tree` on every device of `mesh` (non-arrays untouched)."""
    sharding = NamedSharding(mesh, P())

    def leaf(x):
        if isinstance(x, np.ndarray | jax.Array):
            if jax.process_count() > 1:
                x = np.asarray(x)
                return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])
            return jax.device_put(x, sharding)
        return x

    return jax.tree_util.tree_map(leaf, tree)


def shard_batch(
    local: Mapping[str, np.ndarray], mesh: Mesh, batch_size: int
) -> dict[str, jax.Array]:
    """Assemble global arrays of leading size `batch_size`, sharded along `"data"`.

    `local` holds this process's rows (`process_rows(batch_size)`) of every field.
    """
    sharding = NamedSharding(mesh, P(AXIS))
    out = {}
    for name, x in local.items():
        x = np.asarray(x)
        global_shape = (batch_size,) + x.shape[1:]
        if jax.process_count() == 1:
            if x.shape != global_shape:
                raise ValueError(
                    f"batch field {name!r} has shape {x.shape}, expected {global_shape}."
                )
            out[name] = jax.device_put(x, sharding)
        else:
            out[name] = jax.make_array_from_process_local_data(sharding, x, global_shape)
    return out

"""The processes of one multi-process run agree, or every one of them stops with one line.

A run of several processes (`--distributed`) is one program: each process must train the
same model on the same data with the same code, take the same decisions at the same step
and fail together. What each piece does:

- `gather(blob)`: every process's bytes, on every process (JAX's
  `multihost_utils.process_allgather`, the lengths first, then the padded bytes);
  `share(blob)`: process 0's bytes on every process.
- `agree(items, what=...)`: named values compared with process 0's; the first that
  differs is refused on every process, naming it and each process's value. The trainer
  compares the settings, the invocation (`--resume`, `--stop-at`...), the code (a digest
  of the sources of `eqx_lru` and `experiments/`, and the versions of the libraries) and
  the data (the SHA-256 of every split).
- `settle(stage)`: a stage that may fail on one process only (a folder check, the data, a
  checkpoint): if it fails anywhere, every process raises that failure, naming the
  process, and exits with its status; else a barrier.
- `shared(error)`: marks an error that every process raises at once (`agree`'s and
  `settle`'s): the processes end together through JAX's shutdown barrier. An error of one
  process alone is published to the others (`Watchdog.fail`).
- `StopVote`: a signal or `--time-limit` seen by one process stops every process after
  the same step. Each process casts its wish after every step as a tiny collective, read
  two steps later (by then complete, so the host never waits for the device on it).
- `chained(value, after=...)`: `value` again, made on each device only once `after` is.
  After a collective failed on a device (a peer died), that device must launch no other
  collective: CPU collectives (gloo) can then read the failed one's unread bytes and
  abort the process ("collective mismatch") before the trainer can say which peer died.
  So each program with collectives takes an output of the one before it (the vote the
  last step's, the step the vote's, each evaluation batch the previous one's): once one
  fails on a device, every later one is skipped there with its error.
- `Watchdog` (`watchdog.py`): a peer that dies or stops, and a peer that never connects,
  end every process with one line within a bounded time.

Orbax's multi-host checkpointing was not used: only process 0 writes (checkpoints are
replicated, a few MB), and the store's guarantees (`checkpoint/`) would have to be
rebuilt on Orbax's format, which would break resuming old runs. JAX's preemption service
(`reached_preemption_sync_point`) handles SIGTERM only and replaces the trainer's SIGTERM
handler, so it is turned off (`parallel.initialize_distributed`) and `StopVote` does its
job for every signal and the time limit.
"""

import collections
import hashlib
import importlib.metadata
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .errors import RunError, UsageError

__all__ = [
    "gather",
    "share",
    "agree",
    "shared",
    "settle",
    "code_digest",
    "StopVote",
    "chained",
]

T = TypeVar("T")


def _multi() -> bool:
    return jax.process_count() > 1


def gather(blob: bytes) -> list[bytes]:
    """Every process's `blob`, in process order (a collective: every process calls it)."""
    if not _multi():
        return [blob]
    from jax.experimental import multihost_utils as mh

    lengths = np.asarray(mh.process_allgather(np.asarray(len(blob), np.int32))).reshape(-1)
    padded = np.zeros(max(1, int(lengths.max())), np.uint8)
    padded[: len(blob)] = np.frombuffer(blob, np.uint8)
    rows = np.asarray(mh.process_allgather(padded))
    return [rows[i, : int(n)].tobytes() for i, n in enumerate(lengths)]


def share(blob: bytes | None) -> bytes:
    """Process 0's `blob` on every process (the others pass None)."""
    blobs = gather(blob if jax.process_index() == 0 and blob is not None else b"")
    return blobs[0]


def agree(items: Sequence[tuple[str, Any]], *, what: str, fix: str) -> None:
    """Refuse, on every process, the first of `items` (name, JSON-able value) whose value
    differs from process 0's. `what`: what the items are ("settings"); `fix`: what to do.

    **Raises:** `UsageError` naming the item and each process's value (`shared`: every
    process draws it from the same gathered bytes)."""
    if not _multi():
        return
    mine = json.dumps([[k, v] for k, v in items]).encode()
    every = [dict(map(tuple, json.loads(b))) for b in gather(mine)]
    for name, _ in items:
        values = [json.dumps(p.get(name), sort_keys=True) for p in every]
        if len(set(values)) > 1:
            shown = "; ".join(f"{_short(v)} on process {i}" for i, v in enumerate(values))
            raise shared(
                UsageError(
                    f"the {len(every)} processes of this run differ in {what}: {name} is "
                    f"{shown}. {fix}"
                )
            )


E = TypeVar("E", bound=BaseException)


def shared(error: E) -> E:
    """`error`, marked as raised by every process at once (it follows from bytes they all
    hold): each ends with its line and status, leaving together through JAX's shutdown
    barrier, with no need to tell the others (`train.main`). An error that one process
    alone raises is published to the others instead (`watchdog.Watchdog.fail`)."""
    error.shared = True  # type: ignore[attr-defined]
    return error


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_KINDS = {"usage": UsageError, "run": RunError}


def settle(stage: Callable[[], T]) -> T:
    """Run `stage` on every process; if it raises `UsageError` or `RunError` on any
    process, every process raises the first such failure, naming its process (marked
    `shared`: no process needs to tell the others). Another exception propagates on its
    process alone (`train.main` publishes it). With one process, just `stage()`."""
    if not _multi():
        return stage()
    result, failure = None, None
    try:
        result = stage()
    except UsageError as e:
        failure = ("usage", str(e))
    except RunError as e:
        failure = ("run", str(e))
    failures = [json.loads(b) for b in gather(json.dumps(failure).encode())]
    for index, failed in enumerate(failures):
        if failed is not None:
            kind, message = failed
            raise shared(_KINDS[kind](f"process {index} of {len(failures)}: {message}"))
    return cast(T, result)  # `stage` returned it: no process failed


_LIBRARIES = ("eqx_lru", "jax", "jaxlib", "equinox", "optax", "numpy")


def code_digest() -> list[tuple[str, Any]]:
    """The code a process runs: the SHA-256 of every `.py` file of `eqx_lru` (where it is
    imported from) and `experiments/` (by relative path), and the versions of Python and
    the libraries."""
    import eqx_lru

    digest = hashlib.sha256()
    for name, folder in (
        ("eqx_lru", Path(eqx_lru.__file__).resolve().parent),
        ("experiments", Path(__file__).resolve().parents[1]),
    ):
        for path in sorted(folder.rglob("*.py")):
            digest.update(f"{name}/{path.relative_to(folder)}".encode() + b"\0")
            digest.update(path.read_bytes())
    versions = {}
    for name in _LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    python = ".".join(map(str, sys.version_info[:3]))
    return [
        ("the sources of eqx_lru and experiments/ (SHA-256)", digest.hexdigest()[:16]),
        ("Python", python),
        *((f"{name}'s version", v) for name, v in versions.items()),
    ]


class StopVote:
    """Agree on when to stop: each process casts a wish after every step (0 go on, 1
    `--time-limit`, 2 a signal); the decision is the largest wish of all processes, cast
    `lag` steps earlier, so every process stops after the same step. With one process the
    decision is this process's wish, at once. `mesh`: the run's mesh (default: one axis
    over every device), whose replicated sharding the returned step number has."""

    def __init__(self, lag: int = 2, *, mesh: Mesh | None = None):
        self.lag = lag
        self._mesh = mesh
        self._cast: collections.deque = collections.deque()
        self._fn = None

    def decide(self, wish: int, *, step: int, after: Any = None) -> tuple[int, jax.Array]:
        """Cast `wish` before step `step + 1` and return the decision due now (0 go on, 1
        time limit, 2 signal) and `step` as a replicated int32 array for that step to
        take. With several processes the vote waits on each device for `after` (an output
        of the last program with collectives), and the returned step number is an output
        of the vote: the programs form one chain on every device (see `chained`)."""
        if not _multi():
            return wish, jnp.asarray(step, jnp.int32)
        decision, counter = self._collective(wish, step, after)
        self._cast.append(decision)
        if len(self._cast) <= self.lag:
            return 0, counter
        return int(np.asarray(self._cast.popleft().addressable_data(0))), counter

    def _collective(self, wish: int, step: int, after: Any) -> tuple[jax.Array, jax.Array]:
        if self._fn is None:
            mesh = self._mesh or Mesh(np.asarray(jax.devices()), ("processes",))
            self._sharding = NamedSharding(mesh, P(mesh.axis_names))
            replicated = NamedSharding(mesh, P())

            def vote(casts, after):
                best = casts.max(axis=0)  # every process casts the same step number
                return best[0], best[1]

            self._fn = jax.jit(vote, out_shardings=(replicated, replicated), keep_unused=True)
        local = np.tile(np.asarray([wish, step], np.int32), (jax.local_device_count(), 1))
        x = jax.make_array_from_process_local_data(self._sharding, local, (jax.device_count(), 2))
        return self._fn(x, after)


def chained(value: T, *, after: Any) -> T:
    """`value` (a pytree of arrays) as made by a program that starts on each device only
    once `after` (arrays, or None) is made there, and that is skipped there, with its
    error, if `after`'s program failed there. A program that takes the result starts after
    `after`'s on every device, and never after a failed one. With one process, or `after`
    None, `value` itself."""
    if not _multi() or after is None:
        return value
    return _CHAIN(value, after)


def _copy(value, after):
    del after  # kept (`keep_unused`): only its readiness matters
    # Computed (`+ 0`), not returned as given: a jit may hand back an unchanged input
    # without running the program (JAX 0.10.2 does not; the test checks new buffers).
    return jax.tree.map(lambda v: v + jnp.zeros((), v.dtype), value)


_CHAIN = jax.jit(_copy, keep_unused=True)

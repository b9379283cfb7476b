"""Train a deep LRU on one Long Range Arena task (paper §D, Table 9).

    python -m experiments.lra.train --task listops --data-root DATA --out runs/listops
    python -m experiments.lra.train --task listops --data-root DATA --out runs/listops --resume

Defaults come from the task's entry in `experiments/lra/tasks.py` (Table 9); flags
override them. The run trains with the optimiser of §D.2 (`eqx_lru.lru_optimizer`),
evaluates on val every `--eval-every` steps (keeping the best weights in `OUT/best.eqx`),
evaluates the best-val weights on test at the end, and writes to `OUT/`:

| file | content |
|---|---|
| `config.json` | the resolved settings of the run (and the backend choices: determinism, allocator) |
| `metrics.jsonl` | one JSON record per line: train (every `--log-every` steps), val, test (see `_metrics.py`) |
| `curves.png` | loss and accuracy against step |
| `last.eqx` + `last.json` | the full training state every `--checkpoint-every` steps, on Ctrl-C, `--stop-at` and `--time-limit` |
| `best.eqx` + `best.json` | `(model, bn_state)` with the best val accuracy so far (written with the next checkpoint) |
| `last.prev.*`, `best.prev.*` | the previous complete checkpoints, kept while a new one is written |
| `.lock` | held while a trainer runs: a second trainer on the same `--out` is refused |
| `results.json` | test accuracy, best val accuracy and step, speed, wall time |

**Model** (`steps.build_model`). Token tasks (ListOps, Text) embed tokens, pixel tasks
(Image, Pathfinder, PathX) encode the pixel channels linearly, Retrieval uses the two-tower
`eqx_lru.LRURetrievalModel`; Pathfinder and PathX are bidirectional and PathX uses the
"half" GLU (§D.1). Mean pooling over valid positions, BatchNorm. `--core` picks the
recurrent core: the LRU (`--form complex|real`), or the paper's S4D / S5 baselines.

**Exact resume.** Everything that determines the future of the run is a function of
`(seed, step)` plus the checkpointed state:
- the checkpoint holds the model parameters, BatchNorm state, optimiser state (moments
  and step counts, which drive the schedule), the run's RNG key and the step;
- the batch of step `s` is batch `s mod E` of epoch `s div E` (`E` = train size //
  batch size) in `batch_indices(..., seed=seed, epoch=s div E, shuffle=True,
  drop_last=True)`, a pure function of `(seed, epoch, position)`;
- the dropout keys of step `s` are `split(fold_in(run_key, s), batch)`;
- the train records not yet written at a checkpoint (their per-step losses) are kept in
  `last.json`, and `metrics.jsonl` is cut back to the checkpoint's step on resume.
So `--resume` continues with the very same losses, bit for bit, as an uninterrupted run
(same hardware, device count and data; on GPUs with the default deterministic XLA ops).

**Trust.** Each checkpoint's JSON stores the SHA-256 of its `.eqx` file, the run's id and
settings, and a fingerprint of the data (sizes and SHA-256 of every split); `--resume`
refuses, before training, a corrupt or truncated file, non-finite parameters or optimiser
state, a checkpoint (`last.*` or `best.*`) of another run or one whose settings differ from
`config.json` (an edited `config.json`), and changed data (unless `--allow-data-change`).
A non-finite training loss stops the run (status 1) without overwriting the last good
checkpoint.

**No lost run.** A checkpoint is one unit (`_checkpoint.py`): its JSON names its `.eqx`
by SHA-256, and the previous complete pair is kept as `last.prev.*` until the new one is
complete, so whatever instant the process dies (`kill -9` included) `--resume` continues
from the newest complete checkpoint, bit-exactly. `best.*` is written together with
`last.*` (each checkpoint records the digest of its `best.eqx`), so the best weights always
belong to the checkpoint resumed from. A run stopped before its first checkpoint resumes
from step 0. `OUT/.lock` keeps a second trainer off a folder in use (a dead owner's lock is
released by the kernel).

**Devices.** Data parallel over every visible device (`_parallel.py`): batch sharded on a
1-D mesh, state replicated, one jitted SPMD step. `--batch-size` must be a multiple of the
device count. Multi-host: see `--distributed`.

Ctrl-C (SIGINT), SIGTERM or SIGHUP (a closed terminal): the current step finishes,
`last.eqx` is written and the process exits with status 130 (resume with `--resume`).
A second signal aborts at once, or, while a checkpoint is being written, as soon as it is
complete. Before training starts (loading data), the first signal exits at once.

`--time-limit` counts from the start of the process (loading data and compiling count);
a limit that leaves no time for a single step is an error (status 1), so a chain of jobs
each resuming the last either progresses or fails loudly.

Exit status: 0 finished or stopped (`--stop-at`, `--time-limit`), 130 interrupted, 2 a
user error (flags, data, run folder, corrupt checkpoint, a file-system error: one `error:`
line), 1 a failed run (non-finite loss, out of memory, a checkpoint that could not be
written, a time limit too short: one `error:` line) or a bug (a traceback).
"""  # noqa: E501 -- the Markdown table's rows above cannot wrap

import argparse
import concurrent.futures
import dataclasses
import errno
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _flags
from . import _checkpoint as ckpt
from . import _env, cli, cores
from . import _parallel as par
from . import config as _config
from ._loop import Abort, Carry, Deadline, Speed, Stop, data_fingerprint, process_age
from ._metrics import MetricsLog, plot_curves, read_records
from .cli import parse_args
from .config import TRAINING_KEYS, RunConfig
from .data import DataError, TaskData, batch_indices
from .steps import (
    build_model,
    compile_train_step,
    host_batch,
    make_optimizer,
    make_steps,
    task_spec,
)
from .tasks import load_task

__all__ = [
    "UsageError",
    "RunError",
    "parse_args",
    "task_defaults",
    "resolve_config",
    "build_model",
    "make_steps",
    "compile_train_step",
    "run",
    "main",
    "TRAINING_KEYS",
]


class UsageError(Exception):
    """A bad flag, missing or malformed data, a clash with the run folder or a corrupt
    checkpoint: the CLI prints the message (which says what to do) and exits with status
    2, without a traceback."""


class RunError(Exception):
    """The run failed for a reason the user can act on (a non-finite loss, out of
    memory): the CLI prints the message and exits with status 1, without a traceback."""


def task_defaults(task: str, core: str = cores.DEFAULT) -> dict[str, Any]:
    """The settings of a new run of `core` on `task` without flags, as `config.json` holds
    them (`RunConfig.defaults(task, core).to_json()`)."""
    return RunConfig.defaults(task, core).to_json()


def resolve_config(args: argparse.Namespace) -> RunConfig:
    """The run's settings: flags, else (with `--resume`) the saved config, else the task's
    and its core's (`config.new_run`, `config.resumed_run`).

    **Raises:** `UsageError` if `--resume` would change a setting that binds the run, if
    `OUT/config.json` is missing or corrupt, or for invalid values.
    """
    out = Path(args.out)
    given = cli.given(args)
    try:
        if args.resume:
            config = _config.resumed_run(_saved_config(out), given, out=str(out))
        else:
            config = _config.new_run(args.task, given)
    except _config.ConfigError as e:
        raise UsageError(str(e)) from None
    if not config.data_root:
        raise UsageError("--data-root is required: the folder holding the task's data.")
    return config


def _saved_config(out: Path) -> dict[str, Any]:
    path = out / "config.json"
    if not path.is_file():
        raise UsageError(
            f"--resume: {path} does not exist, so there is no run to continue in {out}. "
            "Drop --resume to start one."
        )
    try:
        return ckpt.read_json(path, required=("task",))
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None


# --------------------------------------------------------------------------- the run


@dataclasses.dataclass
class _Run:
    """What the steps of `run` share: settings, folder, devices, data, model, programs."""

    args: argparse.Namespace
    cfg: RunConfig
    out: Path
    began: float
    primary: bool = True
    mesh: Any = None
    data: TaskData | None = None
    fingerprint: dict | None = None
    static: Any = None
    steps: Any = None
    log: MetricsLog | None = None
    bar: Any = None
    speed: Speed | None = None
    started: float | None = None  # the `clock` reading `--time-limit` counts from
    stop: Stop | None = None
    lock: ckpt.RunLock | None = None

    def say(self, msg: str) -> None:
        try:
            if self.bar is not None:
                self.bar.write(msg, file=sys.stderr)  # above the bar, not through it
            elif self.primary:
                print(msg, file=sys.stderr, flush=True)
        except OSError:  # a closed terminal (after SIGHUP): the run goes on, files are written
            pass


def run(
    args: argparse.Namespace | Sequence[str] | None = None,
    *,
    hook: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    started: float | None = None,
    hard_abort: bool = False,
) -> dict[str, Any]:
    """Train (or continue) one run; the body of the CLI.

    **Arguments:**

    - `args`: parsed arguments or a CLI argument list.
    - `hook`: called as `hook(step)` after each step and its logging, evaluation and
        checkpointing (tests raise `KeyboardInterrupt` or send SIGINT from it).
    - `clock`: seconds, for `--time-limit` (tests inject a fake one).
    - `started`: the `clock` reading `--time-limit` counts from (default: now; the CLI
        passes the process's start).
    - `hard_abort`: a second signal outside a checkpoint write ends the process at once
        (`os._exit(130)`, the CLI) instead of raising `Abort` (see `_loop.Stop`).

    **Returns:** a dict: `status` (`"finished"`, `"stopped"` by `--stop-at` or
    `--time-limit`, or `"interrupted"`), `step`, `steps_per_sec`, `best_val_accuracy`,
    `best_step`, and when finished `test_accuracy`, `test_loss`, `seconds`. Also written
    to `OUT/results.json`.

    **Raises:** `UsageError` for bad settings, data, run folders or checkpoints;
    `RunError` for a non-finite loss or an out-of-memory error.
    """
    started = clock() if started is None else started
    with Stop(hard_abort=hard_abort) as stop:  # signals: flags; before training they end the run
        r = _set_up(args)
        r.started, r.stop = started, stop
        try:
            _load_data(r)
            carry = _build(r)
            carry, status = _train(r, carry, hook, clock)
            return _outputs(r, carry, status)
        except Exception as e:
            if _env.is_out_of_memory(e):
                raise RunError(
                    _env.out_of_memory_message(
                        e, r.cfg.to_json(), devices=r.mesh.size if r.mesh else None
                    )
                ) from e
            raise
        finally:
            if r.log is not None:
                r.log.close()
            if r.lock is not None:
                r.lock.release()


def _set_up(args) -> _Run:
    """Settings, backend environment (before JAX touches a device), devices, run folder."""
    if not isinstance(args, argparse.Namespace):
        args = parse_args(args)
    cfg = resolve_config(args)
    cfg = cfg.replace(**_env.configure_backend(deterministic=cfg.deterministic, task=cfg.task))
    r = _Run(args, cfg, Path(args.out), time.perf_counter())
    par.initialize_distributed(args.distributed)
    r.primary = jax.process_index() == 0
    try:
        r.mesh = par.make_mesh(sequence=int(cfg.sequence_parallel or 1))
        par.check_batch_size(cfg.batch_size, r.mesh)
        par.check_batch_size(cfg.eval_batch_size, r.mesh, what="--eval-batch-size")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if r.primary:
        _writable_folder(r.out, "--out")
        try:  # before anything in the folder is read for the run or written
            r.lock = ckpt.RunLock(r.out).acquire()
        except ckpt.FolderInUse as e:
            raise UsageError(str(e)) from None
        except OSError as e:
            raise UsageError(
                f"--out {str(r.out)!r}: cannot create its lock file ({e.strerror or e})."
            ) from None
    try:
        if not args.resume and ckpt.exists(r.out, "last"):
            raise UsageError(
                f"{r.out} already holds a run (last.eqx). Pass --resume to continue it, or choose "
                "another --out."
            )
        if cfg.cache_dir is not None:
            _writable_folder(Path(cfg.cache_dir).expanduser(), "--cache-dir")
    except BaseException:
        if r.lock is not None:
            r.lock.release()
        raise
    return r


def _writable_folder(folder: Path, flag: str) -> None:
    """Create `folder` if needed and check that files can be written in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        ckpt.write_atomic(folder / ".write-test", b"")
        (folder / ".write-test").unlink()
    except OSError as e:
        raise UsageError(
            f"{flag} {str(folder)!r} is not a writable folder ({e.strerror or e})."
        ) from None


def _load_data(r: _Run) -> None:
    """Load the task, check that every split can serve its purpose, fingerprint it."""
    cfg = r.cfg
    root = Path(cfg.data_root).expanduser()
    if not root.is_dir():
        raise UsageError(
            f"--data-root {str(root)!r} is not a folder. Point it at the folder holding "
            f"the {cfg.task} data (see the README, 'Experiments: Long Range Arena'), or "
            "generate ListOps/Pathfinder data with `python -m experiments.lra.generate`."
        )
    user_errors = (FileNotFoundError, DataError)
    try:
        r.data = load_task(cfg.task, root, cache_dir=cfg.cache_dir, max_examples=cfg.max_examples)
    except user_errors as e:
        raise UsageError(str(e)) from None
    except OSError as e:  # permissions, a symlink loop, a full cache disk...
        if e.filename is None:
            raise
        raise UsageError(
            f"cannot read the {cfg.task} data: {e.filename}: {e.strerror or e}. Check that "
            f"--data-root {str(root)!r} (and --cache-dir, if given) can be read and written by "
            "this user."
        ) from None
    sizes = {name: len(getattr(r.data, name)) for name in ("train", "val", "test")}
    if sizes["train"] < cfg.batch_size:
        raise UsageError(
            f"The {cfg.task} train split has {sizes['train']} examples, fewer than --batch-size "
            f"{cfg.batch_size}; lower --batch-size or raise --max-examples."
        )
    for name in ("val", "test"):
        if sizes[name] == 0:
            raise UsageError(
                f"The {cfg.task} {name} split under {root} is empty (0 examples), so the run "
                f"could not {'pick its best weights' if name == 'val' else 'report a test score'}. "
                f"Provide a non-empty {name} split (e.g. generate --split-sizes with a {name} "
                "size > 0)."
            )
    r.fingerprint = data_fingerprint({n: getattr(r.data, n) for n in ("train", "val", "test")})


def _build(r: _Run) -> Carry:
    """Model, optimiser, jitted steps and the initial (or resumed) state, on the devices."""
    cfg = r.cfg
    init_key, run_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    try:
        model, bn_state = build_model(cfg, r.data, init_key)
    except ValueError as e:  # e.g. a core this eqx_lru does not have
        raise UsageError(str(e)) from None
    params, r.static = eqx.partition(model, eqx.is_inexact_array)
    r.steps = make_steps(cfg, r.static, r.mesh, task_spec(r.data))
    optim, _ = make_optimizer(cfg)
    carry = Carry(0, params, bn_state, optim.init(params), run_key)
    if r.args.resume:
        carry = _resume(r, carry)
    if r.primary:
        ckpt.write_atomic(
            r.out / "config.json", json.dumps(cfg.to_json(), indent=1, sort_keys=True).encode()
        )
    r.log = MetricsLog(r.out / "metrics.jsonl", enabled=r.primary)
    r.log.truncate(carry.step)
    on_devices = {
        f: par.replicate(getattr(carry, f), r.mesh)
        for f in ("params", "bn_state", "opt_state", "run_key")
    }
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
    core = cores.get_core(cfg.core).describe(cfg.form)
    r.say(
        f"{cfg.task}: {len(r.data.train)}/{len(r.data.val)}/{len(r.data.test)} train/val/test "
        f"examples, length {r.data.seq_len}; {core}, depth {cfg.depth}, H={cfg.d_model}, "
        f"N={cfg.d_state} ({n_params:,} parameters){', remat' if cfg.remat else ''}; "
        f"{r.mesh.size} {r.mesh.devices.flat[0].platform} device(s), batch {cfg.batch_size}; "
        f"set up in {time.perf_counter() - r.began:.1f}s."
    )
    return dataclasses.replace(carry, **on_devices)


def _resume(r: _Run, carry: Carry) -> Carry:
    """The newest complete checkpoint, verified (its JSON's fields, checksum, finiteness,
    this run's, same data, its best weights present), or step 0 if the run stopped before
    its first checkpoint."""
    try:
        pair = ckpt.locate(r.out, "last")
        if pair is not None:
            ckpt.check_last(pair.meta, pair.json_path)
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None
    if pair is None:
        r.say(
            f"Note: {r.out} holds no complete checkpoint (the run stopped before its first one was "
            "written): starting it again from step 0, with its saved settings."
        )
        return carry
    _check_run(r, pair.meta, pair.json_path)
    try:
        (p, s, o, k, step), meta = ckpt.load_pair(
            pair.json_path,
            pair.eqx_path,
            carry.tree(),
            step_of=lambda t: t[-1],
            finite=True,
            required=("pending", "best"),
        )
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None
    except FileNotFoundError as e:
        raise UsageError(
            f"--resume: {e} Restore it from a backup, or start a new run with another --out."
        ) from None
    if pair.json_path.name != "last.json":
        r.say(
            "Note: the newest checkpoint was being written when the run stopped; resuming from "
            f"the previous one ({pair.json_path.name})."
        )
    saved = meta.get("data")
    if saved is not None and saved != r.fingerprint:
        changed = [n for n in r.fingerprint if saved.get(n) != r.fingerprint[n]]
        detail = ", ".join(
            f"{n}: {saved.get(n, {}).get('examples')} -> {r.fingerprint[n]['examples']} examples"
            for n in changed
        )
        if not r.args.allow_data_change:
            raise UsageError(
                f"--resume: the data under {r.cfg.data_root} differ from those the checkpoint "
                f"{r.out / 'last.eqx'} was trained on ({detail}; contents compared by SHA-256), so "
                "the run would not continue as it started. Point --data-root at the original data, "
                "or pass --allow-data-change to continue anyway."
            )
        r.say(f"Note: continuing on changed data ({detail}), as --allow-data-change asks.")
    best_sha256 = _check_best(r, meta, (eqx.combine(carry.params, r.static), carry.bn_state))
    r.say(f"Resuming {r.out} at step {int(step)}/{r.cfg.steps}.")
    return Carry(
        int(step), p, s, o, k, tuple(map(tuple, meta["pending"])), meta["best"], None, best_sha256
    )


def _check_run(r: _Run, meta: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint of another run, or one whose settings differ from config.json
    (`ckpt.check_bound`)."""
    try:
        ckpt.check_bound(meta, path, run_id=r.cfg.run_id, settings=r.cfg.to_json())
    except ckpt.NotBound as e:
        raise _foreign(r, e) from None


def _foreign(r: _Run, e: ckpt.NotBound) -> UsageError:
    what = e.what("config.json: another run with the same settings")
    return UsageError(
        f"--resume: {e.path} does not belong to the run in {r.out / 'config.json'} ({what}); it "
        "was copied from another run, or config.json was edited. Restore the run's own files, "
        "or start a new run with another --out."
    )


def _check_best(r: _Run, meta: dict[str, Any], like) -> str | None:
    """Verify the `best.eqx` the checkpoint refers to (`ckpt.trusted_best`), before training
    (the test score at the end comes from it); put it back in place if a crash left it as
    `best.prev.*`. Returns its SHA-256."""
    best = meta.get("best")
    if best is None:
        return None
    expected = f"the weights of step {best.get('step')} (val accuracy {best.get('val_accuracy')})"
    try:
        pair = ckpt.trusted_best(r.out, meta, run_id=r.cfg.run_id, settings=r.cfg.to_json())
    except ckpt.NotBound as e:
        raise _foreign(r, e) from None
    except ckpt.NoTrustedBest as e:
        raise UsageError(
            f"--resume: the checkpoint's best weights are not in {r.out}: {e.why()}; the "
            f"checkpoint expects {expected}. The test score at the end would come from other "
            "weights. Restore the run's own best.eqx and best.json, or start a new run with "
            "another --out."
        ) from None
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None
    try:
        tree, best_meta = ckpt.load_pair(pair.json_path, pair.eqx_path, like, finite=True)
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None
    if best_meta.get("step") != best.get("step"):
        raise UsageError(
            f"--resume: {pair.json_path} holds the weights of step {best_meta.get('step')}, but "
            f"the checkpoint expects {expected}. Restore the run's own best.eqx and best.json, or "
            "start a new run with another --out."
        )
    if r.primary and (pair.json_path.name, pair.eqx_path.name) != ("best.json", "best.eqx"):
        # A crash between writing best.* and last.*: the checkpoint's best is the previous one.
        meta = {k: v for k, v in best_meta.items() if k != "sha256"}
        return _write_checkpoint(r, lambda: ckpt.save(r.out, "best", tree, meta))
    return pair.meta.get("sha256")


def _write_checkpoint(r: _Run, write: Callable[[], Any]):
    """Run `write` (a checkpoint save): a second signal waits for it; file-system errors
    become one line that says the previous checkpoint is kept."""
    try:
        if r.stop is None:
            return write()
        with r.stop.saving():
            return write()
    except OSError as e:
        where = e.filename or r.out
        raise RunError(
            f"could not write a checkpoint in {r.out}: {where}: {e.strerror or e}. The previous "
            "complete checkpoint is kept; free space or make the folder writable, then continue "
            "with --resume."
        ) from None


# --------------------------------------------------------------------------- the loop


class _Loop:
    """The training loop: steps, then logging, evaluation and checkpoints as they fall due."""

    def __init__(self, r: _Run, stop_at: int, hook, deadline: Deadline):
        self.r, self.cfg, self.stop_at, self.hook, self.deadline = r, r.cfg, stop_at, hook, deadline
        self.per_epoch = len(r.data.train) // r.cfg.batch_size
        self.rows = par.process_rows(r.cfg.batch_size)
        self.speed, self.postfix, self.saved_step = Speed(), {}, None
        self.complete: Carry | None = None  # see `_steps`
        self._epoch: tuple[int, list[np.ndarray]] | None = None

    def batch(self, step: int) -> dict[str, jax.Array]:
        """The batch of `step`: a pure function of (seed, epoch, position)."""
        epoch, position = divmod(step, self.per_epoch)
        if self._epoch is None or self._epoch[0] != epoch:
            order = batch_indices(
                len(self.r.data.train),
                self.cfg.batch_size,
                seed=self.cfg.seed,
                epoch=epoch,
                shuffle=True,
                drop_last=True,
            )
            self._epoch = (epoch, order)
        idx = self._epoch[1][position][self.rows]
        host = host_batch(self.r.data, self.r.data.train, idx, padded=False)
        return par.shard_batch(host, self.r.mesh, self.cfg.batch_size)

    def step(self, c: Carry, batch) -> Carry:
        p, s, o, metrics = self.r.steps.train(
            c.params, c.bn_state, c.opt_state, batch, c.run_key, jnp.asarray(c.step, jnp.int32)
        )
        c = dataclasses.replace(
            c, step=c.step + 1, params=p, bn_state=s, opt_state=o, pending=c.pending + (metrics,)
        )
        if not self.speed.running:  # the first step of this process compiles: not timed
            jax.block_until_ready(metrics)
            self.speed.resume(c.step)
        return c

    def after_step(self, c: Carry) -> Carry:
        """Log, evaluate and checkpoint as due after step `c.step`; returns the new carry."""
        done, total = c.step, self.cfg.steps
        if done % self.cfg.log_every == 0 or done == total:
            c = self.log_train(c)
        if done % self.cfg.eval_every == 0 or done == total:
            c = self.validate(c)
        if done % self.cfg.checkpoint_every == 0 or done == self.stop_at:
            self.speed.pause(done)
            c = self.save(c)
        if self.r.bar is not None:
            self.r.bar.update(done - self.r.bar.n)
            self.r.bar.set_postfix(self.postfix, refresh=False)
        if not self.speed.running:
            self.speed.resume(done)
        return c

    def log_train(self, c: Carry) -> Carry:
        values = np.asarray(ckpt.to_host(list(c.pending)), np.float64)
        _check_finite(self.r, values, c.step)
        self.r.log.write(
            {
                "split": "train",
                "step": c.step,
                "epoch": (c.step - 1) // self.per_epoch,
                "loss": float(values[:, 0].mean()),
                "accuracy": float(values[:, 1].mean()),
                "lr": float(values[-1, 2]),
                "steps_per_sec": self.speed.interval(c.step),
            }
        )
        self.postfix.update(loss=f"{values[:, 0].mean():.3f}", acc=f"{values[:, 1].mean():.3f}")
        return dataclasses.replace(c, pending=())

    def validate(self, c: Carry) -> Carry:
        jax.block_until_ready(c.params)
        self.speed.pause(c.step)
        val = _evaluate(self.r, c.params, c.bn_state, self.r.data.val)
        self.r.log.write({"split": "val", "step": c.step, **val})
        if c.best is None or val["accuracy"] > c.best["val_accuracy"]:
            # Kept on the host and written with the next checkpoint (`save`): `best.*` and
            # `last.*` then always belong together.
            tree = (
                ckpt.to_host((eqx.combine(c.params, self.r.static), c.bn_state))
                if self.r.primary
                else None
            )
            best = {"val_accuracy": val["accuracy"], "val_loss": val["loss"], "step": c.step}
            c = dataclasses.replace(c, best=best, best_tree=tree, best_sha256=None)
        self.postfix.update(val=f"{val['accuracy']:.3f}")
        rate = self.speed.rate
        self.r.say(
            f"step {c.step}/{self.cfg.steps}: train loss {self.postfix.get('loss', '-')} acc "
            f"{self.postfix.get('acc', '-')}; val loss {val['loss']:.4f} acc "
            f"{val['accuracy']:.4f} (best "
            f"{c.best['val_accuracy']:.4f} at step {c.best['step']}); "
            f"{'-' if rate is None else f'{rate:.2f}'} steps/s"
        )
        return c

    def save(self, c: Carry) -> Carry:
        """Write `best.*` (if it changed) and then `last.*` (refusing non-finite state: the
        previous stays); returns the carry with the best weights marked as written."""
        if c.pending:
            _check_finite(self.r, np.asarray(ckpt.to_host(list(c.pending)), np.float64), c.step)
        if self.r.primary:
            tree = ckpt.to_host(c.tree())
            bad = ckpt.nonfinite_leaves(tree[:3])
            if bad:
                raise RunError(
                    _diverged(self.r, c.step, f"the parameters or optimiser state ({bad[0]})")
                )
            meta = {
                "step": c.step,
                "epoch": c.step // self.per_epoch,
                "position": c.step % self.per_epoch,
                "best": c.best,
                "pending": [list(map(float, x)) for x in ckpt.to_host(c.pending)],
                "config": self.cfg.to_json(),
                "data": self.r.fingerprint,
                "run_id": self.cfg.run_id,
            }

            def write():
                digest = c.best_sha256
                if c.best_tree is not None:
                    digest = ckpt.save(
                        self.r.out,
                        "best",
                        c.best_tree,
                        {**c.best, "config": self.cfg.to_json(), "run_id": self.cfg.run_id},
                    )
                ckpt.save(self.r.out, "last", tree, {**meta, "best_sha256": digest})
                return digest

            digest = _write_checkpoint(self.r, lambda: self.deadline.timed_save(write))
            c = dataclasses.replace(c, best_tree=None, best_sha256=digest)
        self.saved_step = c.step
        return c


def _check_finite(r: _Run, values: np.ndarray, step: int) -> None:
    """Stop the run if a logged loss is NaN or infinite."""
    bad = np.flatnonzero(~np.isfinite(values[:, 0]))
    if bad.size:
        first = step - len(values) + int(bad[0]) + 1
        raise RunError(_diverged(r, first, f"the training loss ({values[bad[0], 0]})"))


def _diverged(r: _Run, step: int, what: str) -> str:
    try:
        pair = ckpt.locate(r.out, "last")
    except (ckpt.CheckpointError, OSError):
        pair = None
    last = pair.meta.get("step") if pair is not None and pair.intact else None
    kept = (
        f"the last checkpoint {r.out / 'last.eqx'} (step {last}) is kept"
        if last is not None
        else "no checkpoint was written"
    )
    return (
        f"{what} became non-finite at step {step}: the run diverged and was stopped; {kept}. "
        f"Start again with a lower --lr (now {r.cfg.lr:g}) or --lr-factor (now "
        f"{r.cfg.lr_factor:g}) and a fresh --out; resuming would repeat the same steps."
    )


def _train(r: _Run, carry: Carry, hook, clock) -> tuple[Carry, str]:
    """Run steps until the end, `--stop-at`, `--time-limit` or a signal; returns the last
    complete carry and the status."""
    total, args = r.cfg.steps, r.args
    stop_at = total if args.stop_at is None else min(max(args.stop_at, carry.step), total)
    loop = _Loop(r, stop_at, hook, Deadline(args.time_limit, clock, started=r.started))
    status = "finished" if stop_at == total else "stopped"
    if r.primary and not args.no_progress and carry.step < stop_at:
        from tqdm import tqdm

        # disable=None: a bar on a terminal only, not in log files.
        r.bar = tqdm(
            total=total,
            initial=carry.step,
            unit="step",
            dynamic_ncols=True,
            desc=f"{r.cfg.task} {r.cfg.core}",
            file=sys.stderr,
            disable=None,
        )
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lra-data")
    stopper = r.stop if r.stop is not None else Stop()
    stopper.training = True  # from now on a signal stops the run after a checkpoint
    try:
        try:
            carry, timed_out = _steps(loop, carry, pool, stopper)
        except KeyboardInterrupt:
            carry, timed_out = loop.complete, False
            status = "interrupted"
        if timed_out:
            status = "stopped"
            r.say(f"--time-limit {args.time_limit:g} min: stopping before the deadline.")
        if status != "finished" and loop.saved_step != carry.step:
            carry = loop.save(carry)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if r.bar is not None:
            r.bar.close()
    loop.speed.pause(carry.step)
    r.speed = loop.speed
    return carry, status


def _steps(loop: _Loop, carry: Carry, pool, stopper) -> tuple[Carry, bool]:
    """The loop proper; `loop.complete` is the last carry whose step, logging, evaluation
    and checkpoint all finished (what an interrupt saves)."""
    loop.complete, first = carry, carry.step
    future = pool.submit(loop.batch, carry.step) if carry.step < loop.stop_at else None
    while carry.step < loop.stop_at:
        if stopper.reason is not None:
            raise KeyboardInterrupt
        if loop.deadline.expired():
            if carry.step == first:  # not one step: a chain of such jobs would never progress
                d = loop.deadline
                used = d.clock() - d.started
                raise RunError(
                    f"--time-limit {loop.r.args.time_limit:g} min is too short for one step: "
                    f"{used:.0f} s of it went to starting the process, loading the data and "
                    "building the model, and what is left cannot fit a step and its checkpoint. "
                    "The run made no progress (its checkpoint, if any, is unchanged at step "
                    f"{carry.step}). Raise --time-limit."
                )
            return carry, True
        loop.deadline.start_iteration()
        batch = future.result()
        future = pool.submit(loop.batch, carry.step + 1) if carry.step + 1 < loop.stop_at else None
        carry = loop.complete = loop.after_step(loop.step(carry, batch))
        if loop.hook is not None:
            loop.hook(carry.step)
        loop.deadline.end_iteration()
    return carry, False


# --------------------------------------------------------------------------- evaluation and outputs


def _evaluate(r: _Run, params, bn_state, split) -> dict[str, Any]:
    """Loss and accuracy over a whole split (the last batch padded with weight 0)."""
    t0, bs, sums = time.perf_counter(), r.cfg.eval_batch_size, None
    rows = par.process_rows(bs)
    for idx in batch_indices(len(split), bs, seed=0, epoch=0, shuffle=False, drop_last=False):
        weight = (np.arange(bs) < len(idx)).astype(np.float32)
        idx = np.concatenate([idx, np.zeros(bs - len(idx), idx.dtype)])
        host = host_batch(r.data, split, idx[rows], padded=True)
        host["weight"] = weight[rows]
        part = r.steps.eval(params, bn_state, par.shard_batch(host, r.mesh, bs))
        sums = part if sums is None else sums + part
    nll, correct, count = (float(v) for v in ckpt.to_host(sums))
    return {
        "loss": nll / count,
        "accuracy": correct / count,
        "examples": int(count),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _test(r: _Run, carry: Carry) -> dict[str, Any]:
    """Evaluate the best-val weights, read back from `OUT/best.eqx`, on test."""
    template = (eqx.combine(carry.params, r.static), carry.bn_state)
    pair = ckpt.locate(r.out, "best", sha256=carry.best_sha256) if carry.best_sha256 else None
    if pair is not None:  # the run's own best.eqx, by digest
        (model, bn_state), meta = ckpt.load_pair(pair.json_path, pair.eqx_path, template)
    else:  # another host (it does not write), or a checkpoint from before digests
        (model, bn_state), meta = ckpt.load(r.out, "best", template)
    params = par.replicate(eqx.filter(model, eqx.is_inexact_array), r.mesh)
    test = _evaluate(r, params, par.replicate(bn_state, r.mesh), r.data.test)
    r.log.write(
        {
            "split": "test",
            "step": carry.step,
            "checkpoint": "best",
            "checkpoint_step": meta["step"],
            **test,
        }
    )
    return {
        "test_accuracy": test["accuracy"],
        "test_loss": test["loss"],
        "test_examples": test["examples"],
    }


def _outputs(r: _Run, carry: Carry, status: str) -> dict[str, Any]:
    """Test score (when finished), results.json, curves.png and the closing line."""
    cfg, best, rate = r.cfg, carry.best or {}, r.speed.rate
    results = {
        "status": status,
        "task": cfg.task,
        "core": cfg.core,
        "form": cfg.form,
        "step": carry.step,
        "steps": cfg.steps,
        "best_val_accuracy": best.get("val_accuracy"),
        "best_step": best.get("step"),
        "steps_per_sec": rate,
        "devices": r.mesh.size,
        "platform": r.mesh.devices.flat[0].platform,
        "out": str(r.out),
    }
    if status != "finished":
        r.say(
            f"Stopped at step {carry.step}/{cfg.steps} ({status}); checkpoint "
            f"{r.out / 'last.eqx'} saved. Continue with the same command plus --resume."
        )
    else:
        results.update(_test(r, carry))
        results["seconds"] = round(time.perf_counter() - r.began, 1)
        if r.primary:
            ckpt.write_atomic(r.out / "results.json", json.dumps(results, indent=1).encode())
        r.say(
            f"{cfg.task} ({cfg.core}, {cfg.form}): test accuracy "
            f"{100 * results['test_accuracy']:.2f}% "
            f"(best val {100 * best['val_accuracy']:.2f}% at step {best['step']}), "
            f"{'n/a' if rate is None else f'{rate:.2f}'} steps/s; outputs in {r.out}/"
        )
    r.log.close()
    if r.primary:
        plot_curves(
            read_records(r.out / "metrics.jsonl"),
            r.out / "curves.png",
            title=f"{cfg.task} · {cfg.core} {cfg.form} · depth {cfg.depth}, "
            f"H={cfg.d_model}, N={cfg.d_state} · batch {cfg.batch_size}",
        )
    return results


#: File-system errors that are the environment's, not the program's: one line, status 2.
_USER_ERRNOS = _flags.USER_ERRNOS | {errno.ENOTEMPTY}


def main(
    argv: Sequence[str] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    started: float | None = None,
    hard_abort: bool = False,
) -> int:
    """The CLI: `run(argv)`, with user errors as one `error:` line; returns the exit status.
    `started`, `hard_abort`: see `run` (`python -m` passes the process's start and True)."""
    try:
        results = run(argv, clock=clock, started=started, hard_abort=hard_abort)
    except OSError as e:  # a file or folder the user can fix; anything else is a bug
        if e.errno not in _USER_ERRNOS or e.filename is None:
            raise
        print(
            f"error: {e.filename}: {e.strerror or e}. Fix the path, its permissions or the free "
            "space, then run again (with --resume if the run had started).",
            file=sys.stderr,
        )
        return 2
    except SystemExit as e:  # argparse: it printed "error: argument --flag: ..."
        return e.code if isinstance(e.code, int) else 2
    except (UsageError, ckpt.CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RunError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Abort as e:
        print(f"Aborted ({e}).", file=sys.stderr)
        return 130
    return 130 if results["status"] == "interrupted" else 0


if __name__ == "__main__":
    raise SystemExit(main(started=time.monotonic() - process_age(), hard_abort=True))

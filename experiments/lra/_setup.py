"""Setting a run up: its settings (`resolve_config`), the backend, devices and run folder
(`set_up`), the data (`load_data`) and the model, programs and initial or resumed state
(`build`)."""

import argparse
import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
from jax.sharding import Mesh

from ..runs import checkpoint as ckpt
from ..runs import env as _env
from ..runs import multiprocess as mp
from ..runs import parallel as par
from ..runs.atomic import write_atomic
from ..runs.errors import UsageError
from ..runs.metrics import MetricsLog
from ..runs.outputs import CHECKPOINT_FILES, RunFiles, trainer_run
from ..runs.resume import saved_settings
from ..runs.signals import Stop
from . import cli, cores, tasks
from . import config as _config
from ._carry import Carry, data_fingerprint
from ._resume import resume
from ._run import Loaded, Run, Session
from .cli import parse_args
from .config import RunConfig, flag
from .data import DataError
from .steps import (
    build_model,
    make_optimizer,
    make_steps,
    task_spec,
)
from .tasks import load_task

__all__ = ["task_defaults", "resolve_config", "set_up", "load_data", "agree_on_data", "build"]


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
            config = _config.resumed_run(
                saved_settings(out, required=("task",)), given, out=str(out)
            )
        else:
            config = _config.new_run(args.task, given)
    except _config.ConfigError as e:
        raise UsageError(str(e)) from None
    if not config.data_root:
        raise UsageError("--data-root is required: the folder holding the task's data.")
    return config


def set_up(
    args,
    *,
    started: float,
    stop: Stop | None = None,
    on_record: Callable[[dict[str, Any]], Any] | None = None,
) -> Session:
    """Settings, environment and backend (before JAX touches a device), the processes'
    agreement, devices, run folder. `started`, `stop`, `on_record`: see `train.run`."""
    if not isinstance(args, argparse.Namespace):
        args = parse_args(args)
    cfg = resolve_config(args)
    _env.check_environment(os.environ, distributed=args.distributed != "off")
    cfg = cfg.replace(
        **_env.configure_backend(
            deterministic=cfg.deterministic, task=cfg.task, on_demand=tasks.on_demand
        )
    )
    out, began = Path(args.out), time.perf_counter()
    par.initialize_distributed(args.distributed)
    _env.start_backend()
    primary = jax.process_index() == 0
    cfg = _agree(cfg, args)
    prepared: list[tuple[Mesh, ckpt.RunLock | None]] = []
    try:
        mp.settle(lambda: prepared.append(_prepare(cfg, args, out, primary)))
    except BaseException:
        if prepared and prepared[0][1] is not None:
            prepared[0][1].release()
        raise
    mesh, lock = prepared[0]
    return Session(
        args=args,
        cfg=cfg,
        out=out,
        began=began,
        primary=primary,
        mesh=mesh,
        lock=lock,
        started=started,
        stop=stop,
        on_record=on_record,
    )


def _agree(cfg: RunConfig, args: argparse.Namespace) -> RunConfig:
    """Refuse a run whose processes differ in settings, invocation or code; a new run's id
    is process 0's. Returns the config (with that id)."""
    if jax.process_count() == 1:
        return cfg
    fix = "Start every process with the same flags."
    invocation = [(f"--{k.replace('_', '-')}", getattr(args, k)) for k in _INVOCATION]
    mp.agree(invocation, what="their flags", fix=fix)  # first: what follows depends on them
    if not args.resume:  # each process drew its own id: process 0's binds the run
        assert cfg.run_id is not None  # `config.new_run` draws it
        cfg = cfg.replace(run_id=mp.share(cfg.run_id.encode()).decode())
    # Paths may differ between hosts (the same data elsewhere): the data are compared
    # by digest once loaded (`agree_on_data`).
    local = ("data_root", "cache_dir", "xla_flags", "allocator")
    settings = [(flag(k), v) for k, v in cfg.to_json().items() if k not in local]
    mp.agree(settings, what="their settings", fix=fix)
    mp.agree(mp.code_digest(), what="their code", fix="Install the same code everywhere.")
    return cfg


#: The flags of the invocation that every process must share.
_INVOCATION = ("resume", "overwrite", "allow_data_change", "stop_at", "time_limit", "distributed")


def _prepare(
    cfg: RunConfig, args: argparse.Namespace, out: Path, primary: bool
) -> tuple[Mesh, ckpt.RunLock | None]:
    """The mesh, the run folder (process 0: writable, locked, no other run there) and
    the cache folder; returns the mesh and the lock (process 0's); raises `UsageError`."""
    lock = None
    assert cfg.eval_batch_size is not None  # `config.new_run` defaults it to `batch_size`
    try:
        mesh = par.make_mesh(sequence=int(cfg.sequence_parallel or 1))
        par.check_batch_size(cfg.batch_size, mesh)
        par.check_batch_size(cfg.eval_batch_size, mesh, what="--eval-batch-size")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if primary:
        _writable_folder(out, "--out")
        lock = ckpt.take_lock(out)  # before anything in the folder is read for the run or written
    try:
        if primary:  # it holds the lock: no other trainer writes there
            run_files(out).claim(resume=args.resume, overwrite=args.overwrite)
        if cfg.cache_dir is not None:
            _writable_folder(Path(cfg.cache_dir).expanduser(), "--cache-dir")
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return mesh, lock


#: The files of a run in its folder that `--overwrite` removes (with the exports in
#: `OUT/export/`; others stay): checkpoints first, so that a folder left half-cleaned by a
#: crash holds none to resume.
_RUN_FILES = CHECKPOINT_FILES("last", "best") + (
    "config.json",
    "metrics.jsonl",
    "results.json",
    "curves.png",
)


def run_files(out: Path) -> RunFiles:
    """The LRA trainer's files in `out` (`runs.outputs`)."""
    return RunFiles(out, "lra.train", _RUN_FILES, legacy=trainer_run(("task", "batch_size")))


def _writable_folder(folder: Path, flag: str) -> None:
    """Create `folder` if needed and check that files can be written in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / ".write-test", b"")
        (folder / ".write-test").unlink()
    except OSError as e:
        raise UsageError(
            f"{flag} {str(folder)!r} is not a writable folder ({e.strerror or e})."
        ) from None


def load_data(s: Session) -> Loaded:
    """Load the task, check that every split can serve its purpose, fingerprint it."""
    cfg = s.cfg
    assert cfg.data_root  # `resolve_config` refuses a run without it
    root = Path(cfg.data_root).expanduser()
    if not root.is_dir():
        raise UsageError(
            f"--data-root {str(root)!r} is not a folder. Point it at the folder holding "
            f"the {cfg.task} data (see the README, 'Experiments: Long Range Arena'), or "
            "generate ListOps/Pathfinder data with `python -m experiments.lra.generate`."
        )
    user_errors = (FileNotFoundError, DataError)
    try:
        data = load_task(cfg.task, root, cache_dir=cfg.cache_dir, max_examples=cfg.max_examples)
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
    sizes = {name: len(getattr(data, name)) for name in ("train", "val", "test")}
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
    return Loaded(data, data_fingerprint({n: getattr(data, n) for n in ("train", "val", "test")}))


def agree_on_data(loaded: Loaded) -> None:
    """Refuse data that differ between the processes (by split: size and SHA-256)."""
    mp.agree(
        [(f"the {name} split", value) for name, value in loaded.fingerprint.items()],
        what="their data",
        fix="Give every process the same files (--data-root), or rebuild its --cache-dir.",
    )


def build(s: Session, loaded: Loaded) -> tuple[Run, Carry]:
    """Model, optimiser, jitted steps and the initial (or resumed) state, on the devices;
    returns the built run and that state."""
    cfg, data = s.cfg, loaded.data
    init_key, run_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    try:
        model, bn_state = build_model(cfg, data, init_key)
    except ValueError as e:  # e.g. a core this eqx_lru does not have
        raise UsageError(str(e)) from None
    params, static = eqx.partition(model, eqx.is_inexact_array)
    steps = make_steps(cfg, static, s.mesh, task_spec(data))
    log = MetricsLog(s.out / "metrics.jsonl", enabled=s.primary, on_record=s.on_record)
    r = Run.built(s, loaded, static=static, steps=steps, log=log)
    optim, _ = make_optimizer(cfg)
    carry = Carry(0, params, bn_state, optim.init(params), run_key)
    if r.args.resume:
        carry = resume(r, carry)
    if r.primary:
        write_atomic(
            r.out / "config.json", json.dumps(cfg.to_json(), indent=1, sort_keys=True).encode()
        )
    if s.stop is not None:  # the run's settings are saved: it can be continued
        s.stop.go_on("continue with the same command plus --resume")
    r.log.truncate(carry.step)
    on_devices = {
        f: par.replicate(getattr(carry, f), r.mesh)
        for f in ("params", "bn_state", "opt_state", "run_key")
    }
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
    core = cores.get_core(cfg.core).describe(cfg.form)
    r.say(
        f"{cfg.task}: {len(data.train)}/{len(data.val)}/{len(data.test)} train/val/test "
        f"examples, length {data.seq_len}; {core}, depth {cfg.depth}, H={cfg.d_model}, "
        f"N={cfg.d_state} ({n_params:,} parameters){', remat' if cfg.remat else ''}; "
        f"{r.mesh.size} {r.mesh.devices.flat[0].platform} device(s), batch {cfg.batch_size}; "
        f"set up in {time.perf_counter() - r.began:.1f}s."
    )
    return r, dataclasses.replace(carry, **on_devices)

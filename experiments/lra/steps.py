"""The model and the jitted train/eval steps of an LRA run, from its settings.

Public, so that other tools (the benchmark, `experiments/lra/memory.py`) time or compile
exactly the program the trainer runs:

- `build_model(config, data, key)`: the model of a run's `config.RunConfig` (or of a saved
  `config.json` mapping) for a task, and its BatchNorm state.
- `make_steps(config, static, mesh)`: the jitted `train_step` and `eval_step`.
- `compile_train_step(config, data)`: one training step at the sizes of `config`,
  compiled, with example arguments: `compiled(*args)` runs one step and
  `compiled.memory_analysis()` reports XLA's buffers.

`data` is a loaded `TaskData` or a `TaskSpec` (`task_spec(task)`: the sizes alone, so
nothing has to be on disk).
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import eqx_lru

from ..runs import parallel as par
from . import cores
from .config import PROGRAM_KEYS, RunConfig
from .data import TaskData
from .tasks import get_task

__all__ = [
    "AXIS_NAME",
    "TaskSpec",
    "task_spec",
    "as_config",
    "sequence_parallel",
    "make_core",
    "build_model",
    "make_optimizer",
    "Steps",
    "make_steps",
    "host_batch",
    "example_batch",
    "compile_train_step",
]

AXIS_NAME = "batch"  # the jax.vmap axis batch norm reduces over


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """What a model needs to know about a task's data: its sizes."""

    task: str
    num_classes: int
    seq_len: int
    vocab_size: int | None  # token tasks
    in_channels: int | None  # pixel tasks


def task_spec(task: str | TaskData | TaskSpec, seq_len: int | None = None) -> TaskSpec:
    """The `TaskSpec` of loaded data, or of the official data of `task` (full length)."""
    if isinstance(task, TaskSpec):
        return task if seq_len is None else dataclasses.replace(task, seq_len=seq_len)
    if isinstance(task, TaskData):
        vocab = None if task.vocab is None else len(task.vocab)
        return TaskSpec(
            task.task, task.num_classes, seq_len or task.seq_len, vocab, task.in_channels
        )
    t = get_task(task)
    return TaskSpec(task, t.num_classes, seq_len or t.seq_len, t.vocab_size, t.in_channels)


def as_config(config: RunConfig | Mapping[str, Any]) -> RunConfig:
    """`config`, or the `RunConfig` a saved `config.json` mapping describes."""
    return config if isinstance(config, RunConfig) else RunConfig.from_json(config)


def sequence_parallel(config: RunConfig) -> int:
    """The number of devices each sequence is split over (`--sequence-parallel`, 1 if unset)."""
    return int(config.sequence_parallel or 1)


def make_core(config: RunConfig) -> Callable:
    """The recurrent-core factory `(d_model, d_state, *, key) -> core` of the run's core
    (its record in `cores.REGISTRY`), with the scan method the run asks for: `method`, or
    with `--sequence-parallel N > 1` the sequence-parallel scan running it on each
    device's chunk."""
    record = cores.get_core(config.core)
    method = config.method if record.scan else None
    if sequence_parallel(config) > 1:
        if not record.scan:
            raise ValueError(
                f"--sequence-parallel needs a core that runs on the scan; --core {config.core} "
                f"{record.unused_reason}."
            )
        assert config.method is not None  # set for every scan core (`RunConfig.defaults`)
        method = eqx_lru.SequenceParallel(par.SEQ_AXIS, config.method)
    return record.factory(config, method)


def build_model(
    config: RunConfig | Mapping[str, Any], data: TaskData | TaskSpec, key
) -> tuple[eqx.Module, eqx.nn.State]:
    """The model of `config` (a `RunConfig`, or a saved `config.json` mapping) for `data`,
    and its BatchNorm state.

    Token tasks embed tokens, pixel tasks encode pixels linearly, Retrieval uses the
    two-tower `eqx_lru.LRURetrievalModel` around an `LRUModel` encoder; every block is an
    `eqx_lru.LRUBlock` around the core of `make_core(config)`.
    """
    return eqx.nn.make_with_state(_build)(as_config(config), task_spec(data), key)


def _build(config: RunConfig, spec: TaskSpec, key):
    tokens = spec.vocab_size is not None
    if spec.vocab_size is not None:
        in_size = spec.vocab_size
    else:
        assert spec.in_channels is not None  # a pixel task (`tasks.Task`'s check)
        in_size = int(spec.in_channels)
    sizes = (config.d_model, config.d_state, config.depth)
    block = functools.partial(
        eqx_lru.LRUBlock,
        core=make_core(config),
        norm=config.norm,
        bidirectional=config.bidirectional,
        dropout=config.dropout,
        glu=config.glu,
        axis_name=AXIS_NAME,
    )
    model = functools.partial(
        eqx_lru.LRUModel,
        encoder="embedding" if tokens else "linear",
        pooling=config.pooling,
        block=block,
        remat=bool(config.remat),
    )
    if get_task(spec.task).model != "retrieval":
        return model(in_size, spec.num_classes, *sizes, key=key)
    enc_key, head_key = jax.random.split(key)
    encoder = model(in_size, None, *sizes, key=enc_key)
    return eqx_lru.LRURetrievalModel(encoder, spec.num_classes, key=head_key)


def make_optimizer(config: RunConfig):
    """`(optimiser, schedule)` of §D.2 for `config`, with its core's official optimiser
    options for its task (`cores.optimizer_kwargs`: S4D puts no weight decay on biases,
    norms and embeddings)."""
    optim = eqx_lru.lru_optimizer(**cores.optimizer_kwargs(config))
    schedule = eqx_lru.lru_schedule(config.lr, config.steps, warmup_fraction=config.warmup_fraction)
    return optim, schedule


class Steps(NamedTuple):
    """`train(params, bn_state, opt_state, batch, run_key, step) -> (params, bn_state,
    opt_state, [loss, accuracy, lr])` and `eval(params, bn_state, batch) -> [sum of nll,
    number correct, count]` (weighted by `batch["weight"]`), both jitted over `mesh`."""

    train: jax.stages.Wrapped
    eval: jax.stages.Wrapped


#: Jitted steps per configuration, so that several runs in one process (the demo, the
#: tests, a sweep) compile each program once.
_CACHE: dict[tuple, Steps] = {}


def make_steps(config: RunConfig, static, mesh: Mesh, spec: TaskSpec | None = None) -> Steps:
    """The jitted train and eval steps of `config`, closed over the model's static part."""
    program = tuple(getattr(config, k) for k in PROGRAM_KEYS)
    key = (program, spec, tuple(d.id for d in mesh.devices.flat))
    if spec is None or key not in _CACHE:
        if len(_CACHE) >= 8:
            _CACHE.pop(next(iter(_CACHE)))
        optim, schedule = make_optimizer(config)
        _CACHE[key] = _jit_steps(static, optim, schedule, mesh)
    return _CACHE[key]


def _forward(params, static, bn_state, batch, keys, inference, mesh: Mesh | None = None):
    length = batch.get("length")

    def run(params, bn_state, x, length, keys, norm_axes=()):
        model = _with_norm_axes(eqx.combine(params, static), norm_axes)

        def one(x, length, key):
            return model(x, bn_state, length=length, key=key, inference=inference)

        in_axes = (0, None if length is None else 0, None if keys is None else 0)
        return jax.vmap(one, axis_name=AXIS_NAME, in_axes=in_axes, out_axes=(0, None))(
            x, length, keys
        )

    n = 1 if mesh is None else par.sequence_size(mesh)
    if n == 1:
        return run(params, bn_state, batch["x"], length, keys)
    # --sequence-parallel: every device runs the model on its rows of the batch and its
    # chunk of each sequence (`shard_map` over both mesh axes: batch norm also sums over
    # "data", the cores' `SequenceParallel` scans and the model's pooling over "seq"). The
    # sequence is padded to a multiple of the chunk count; `length` (counted over the
    # whole sequence) keeps the pads out of every result.
    x = batch["x"]
    seq_dim = 2 if length is not None and length.ndim == 2 else 1  # Retrieval: (batch, 2, length)
    size = x.shape[seq_dim]
    pad = -size % n
    if pad:
        widths = [(0, 0)] * x.ndim
        widths[seq_dim] = (0, pad)
        x = jnp.pad(x, widths)
        if length is None:
            length = jnp.full(x.shape[:seq_dim], size, jnp.int32)
    rows = P(par.AXIS)
    spec = P(par.AXIS, *([None] * (seq_dim - 1)), par.SEQ_AXIS)
    sharded = jax.shard_map(
        functools.partial(run, norm_axes=(par.AXIS,)),
        mesh=mesh,
        in_specs=(P(), P(), spec, rows, rows),
        out_specs=(rows, P()),
        check_vma=False,
    )
    return sharded(params, bn_state, x, length, keys)


def _with_norm_axes(model, axes: tuple):
    """`model` with every `MaskedBatchNorm` also reducing over the mesh axes `axes`."""
    if not axes:
        return model

    def add(node):
        if not isinstance(node, eqx_lru.MaskedBatchNorm):
            return node
        names = node.axis_name if isinstance(node.axis_name, tuple) else (node.axis_name,)
        return node.with_axis_name((*names, *axes))

    is_norm = lambda node: isinstance(node, eqx_lru.MaskedBatchNorm)  # noqa: E731
    return jax.tree_util.tree_map(add, model, is_leaf=is_norm)


def _losses(logits, labels):
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, labels[:, None], axis=-1)[:, 0]
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return nll, correct


def _jit_steps(static, optim, schedule, mesh: Mesh) -> Steps:
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P(par.AXIS))

    def train_step(params, bn_state, opt_state, batch, run_key, step):
        keys = jax.random.split(jax.random.fold_in(run_key, step), batch["label"].shape[0])

        def loss_fn(params):
            logits, new_state = _forward(params, static, bn_state, batch, keys, False, mesh)
            nll, correct = _losses(logits, batch["label"])
            return jnp.mean(nll), (new_state, jnp.mean(correct))

        (loss, (new_state, acc)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        # optax mixes Python floats with int32 step counts, which JAX's opt-in strict dtype
        # promotion rejects; trace it with standard promotion so either setting works.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optim.update(grads, opt_state, params)
            lr = jnp.asarray(schedule(step), jnp.float32)
        params = eqx.apply_updates(params, updates)
        return params, new_state, opt_state, jnp.stack([loss, acc, lr])

    def eval_step(params, bn_state, batch):
        logits, _ = _forward(params, static, bn_state, batch, None, True, mesh)
        nll, correct = _losses(logits, batch["label"])
        w = batch["weight"]
        return jnp.stack([jnp.sum(w * nll), jnp.sum(w * correct), jnp.sum(w)])

    train = jax.jit(
        train_step,
        in_shardings=(replicated, replicated, replicated, sharded, replicated, replicated),
        out_shardings=replicated,
    )
    evaluate = jax.jit(
        eval_step, in_shardings=(replicated, replicated, sharded), out_shardings=replicated
    )
    return Steps(train, evaluate)


def host_batch(
    data: TaskData, split, indices: np.ndarray, *, padded: bool
) -> dict[str, np.ndarray]:
    """Model-ready host arrays: `x`, `label`, `length` (token tasks), `weight` (eval)."""
    raw = data.batch(split, indices)
    if raw.get("inputs2") is not None:  # a pair of documents (Retrieval)
        out = {
            "x": np.stack([raw["inputs"], raw["inputs2"]], axis=1),
            "length": np.stack([raw["lengths"], raw["lengths2"]], axis=1),
        }
    else:
        out = {"x": raw["inputs"]}
        if data.vocab is not None:  # pixel tasks have no padding
            out["length"] = raw["lengths"]
    out["label"] = raw["labels"]
    if padded:
        out["weight"] = np.ones(len(indices), np.float32)
    return out


def example_batch(spec: TaskSpec, batch_size: int) -> dict[str, np.ndarray]:
    """A training batch of the shapes and dtypes of `host_batch` for `spec` (full-length
    documents, label 0)."""
    b, length = batch_size, spec.seq_len
    out: dict[str, np.ndarray]
    if spec.vocab_size is None:
        assert spec.in_channels is not None  # a pixel task (`tasks.Task`'s check)
        out = {"x": np.zeros((b, length, spec.in_channels), np.float32)}
    elif get_task(spec.task).model == "retrieval":
        out = {
            "x": np.full((b, 2, length), 3, np.int32),
            "length": np.full((b, 2), length, np.int32),
        }
    else:
        out = {"x": np.full((b, length), 3, np.int32), "length": np.full((b,), length, np.int32)}
    out["label"] = np.zeros((b,), np.int32)
    return out


def compile_train_step(
    config: RunConfig | Mapping[str, Any],
    data: TaskData | TaskSpec | str,
    *,
    mesh: Mesh | None = None,
    seed: int = 0,
) -> tuple[Any, tuple]:
    """One training step of `config` compiled for `mesh` (default: every device), and example
    arguments `(params, bn_state, opt_state, batch, run_key, step)`.

    `compiled(*args)` runs the step (returns new params, BN state, optimiser state and
    `[loss, accuracy, lr]`); `compiled.memory_analysis()` gives XLA's buffer sizes
    (`temp_size_in_bytes`: the intermediates, the backward pass's stored activations).
    """
    config, spec = as_config(config), task_spec(data)
    mesh = par.make_mesh(sequence=sequence_parallel(config)) if mesh is None else mesh
    model, bn_state = build_model(config, spec, jax.random.PRNGKey(seed))
    params, static = eqx.partition(model, eqx.is_inexact_array)
    steps = make_steps(config, static, mesh, spec)
    optim, _ = make_optimizer(config)
    args = (
        par.replicate(params, mesh),
        par.replicate(bn_state, mesh),
        par.replicate(optim.init(params), mesh),
        par.shard_batch(example_batch(spec, config.batch_size), mesh, config.batch_size),
        par.replicate(jax.random.PRNGKey(seed + 1), mesh),
        jnp.asarray(0, jnp.int32),
    )
    return steps.train.lower(*args).compile(), args

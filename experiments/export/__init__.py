"""Export a trained LRA run out of JAX: a serialized StableHLO program or an ONNX model.

    python -m experiments.export --run OUT --format stablehlo|onnx [--step] [--dest DIR]

reads the best weights of a run of `python -m experiments.lra.train` (`OUT/best.eqx`, its
settings from `OUT/best.json`) and writes, into `DIR` (default `OUT/export/`), one artifact
and a JSON manifest beside it (`<artifact>.json`: the inputs and outputs with their
shapes and dtypes, the carry of the step program, the vocabulary size, the format and
the source checkpoint with its SHA-256).

**Which weights.** Exactly those the trainer's `--resume` and test evaluation trust,
found by the same code (`experiments.lra._checkpoint.trusted_best`): the newest complete
`last` checkpoint (`last.json`, else `last.prev.json`) records the SHA-256 and step of
its best weights, and the `best` pair with that digest is read (`best.*`, or
`best.prev.*` where a crash mid-save left it there; without a `last` record, the newest
complete `best` pair). The `.eqx` is verified against its digest, must hold finite
values, and must belong to the run (its run id and training settings those of
`OUT/config.json`). A missing, damaged or foreign checkpoint is refused with one line
naming the file; a damaged newest file is not silently replaced by an older one.

**Programs.** Both in inference mode (running batch-norm statistics, no dropout), for a
batch of examples (`batch` and `length` are symbolic: one artifact serves every size):

- the whole sequence (default): `(x, length) -> out`, the model's call `jax.vmap`ped over
  the batch: `x` int32 token ids `(batch, length)` (or float32 features `(batch, length,
  in_size)`), `length` the int32 valid lengths `(batch,)`, `out` as the model returns it
  (`(batch, classes)` with pooling);
- a Retrieval run (the two-tower `eqx_lru.LRURetrievalModel`): the whole pair, `(x,
  length) -> out`, `x` int32 `(batch, 2, length)` (both documents of a pair, each padded to
  the common `length`), `length` int32 `(batch, 2)` their valid lengths, `out` the class
  logits `(batch, classes)` (the manifest's `program` is `"pair"`). It has no `--step`
  (the head needs both documents whole);
- `--step`: one position of `batch` streams, `(x_t, *carry) -> (y_t, *carry)`, the model's
  `LRUModel.step` (causal models only): `x_t` int32 `(batch,)` (or float32 `(batch,
  in_size)`), the carry a flat list of arrays (every block's recurrent state; with mean
  pooling the running sum and count), zeros at the start of a stream; `y_t` the output for
  the stream so far.

**Formats.**

- `stablehlo`: `jax.export` with symbolic `batch` and `length`; the file is
  `Exported.serialize()`, read back with `jax.export.deserialize` and run with its `.call`
  — in any Python with JAX, without eqx_lru or this repository. The model's form is kept
  (complex states stay complex).
- `onnx`: the real form (a complex-form model is converted with `eqx_lru.to_real` first:
  the same function, real arithmetic), written by `_onnx.py` (a jaxpr → ONNX translator;
  why not jax2onnx is said there) and run by onnxruntime. Constants are folded at export:
  batch norm becomes one scale and shift per channel. The whole-sequence ONNX model runs
  the step in an ONNX `Loop` over the positions (the recurrence, not the parallel scan):
  `(x, length, *carry) -> (out, *carry)`, starting from a carry (zeros for a new
  sequence, or the carry of an earlier call: chunked prefill) and returning the one after
  the last valid position; `out` is the output at position `length - 1` (with
  `pooling=None`, every position's, zero at pads). A Retrieval pair is `(x, length) ->
  out` as in StableHLO, no carry: each document runs the encoder's step in such a `Loop`
  from zeros, then the two-tower head.

The exported programs do not check their inputs: token ids must be in `[0, vocab_size)`
(out-of-range ids are clamped, as JAX does) and `1 <= length <= x.shape[1]` (`x.shape[2]`
for a pair).

The scan method of the run (`--method`) is replaced by `"sequential"` (`lax.scan`, the
one method that takes a symbolic length); the function is the same.

Exit status: 0 written, 2 a user error (missing run folder or checkpoint, a bidirectional
model or a Retrieval run with `--step`, a model ONNX cannot express...: one `error:` line).
"""

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

import eqx_lru

__all__ = [
    "ExportError",
    "FORMATS",
    "Run",
    "load_run",
    "prepare",
    "parallel_program",
    "step_program",
    "export_run",
    "main",
]

FORMATS = ("stablehlo", "onnx")
_SUFFIX = {"stablehlo": ".stablehlo", "onnx": ".onnx"}


class ExportError(ValueError):
    """A run, flag or model that cannot be exported; the message says what to do."""


# --------------------------------------------------------------------------- loading


@dataclasses.dataclass
class Run:
    """A trained model read back from a run folder."""

    model: eqx.Module
    state: eqx.nn.State
    cfg: dict[str, Any]
    meta: dict[str, Any]  # best.json
    checkpoint: Path
    in_size: int  # vocabulary size (token tasks) or input features
    tokens: bool
    pair: bool = False  # a Retrieval run: the two-tower `eqx_lru.LRURetrievalModel`


def _sequence_model(model: eqx.Module) -> eqx.Module:
    """The `LRUModel` that reads one sequence: `model` itself, or the encoder a two-tower
    `LRURetrievalModel` shares between the documents of a pair."""
    return model.encoder if isinstance(model, eqx_lru.LRURetrievalModel) else model


def load_run(run: str | Path) -> Run:
    """The best weights of a trainer run, `(model, bn_state)` read from the checkpoint the
    trainer trusts (`_trusted_best`: `run/best.eqx`, or `run/best.prev.eqx` after a crash
    mid-save; checksum verified) with the trainer's own code (`steps.build_model`,
    `_checkpoint.load_pair`), its scan method replaced by `"sequential"`.

    The vocabulary of a token task is the one of the run's data, which the model's
    embedding stores: its size is read from the checkpoint, so the data need not be at
    hand.
    """
    from experiments.lra import _checkpoint as ckpt
    from experiments.lra import steps

    run = Path(run)
    if not run.is_dir():
        raise ExportError(
            f"--run {str(run)!r} is not a folder; give the --out folder of a "
            "`python -m experiments.lra.train` run."
        )
    try:
        pair, expected = _trusted_best(run)
        meta = ckpt.read_json(pair.json_path, required=("step", "config"))
    except ckpt.CheckpointError as e:
        raise ExportError(str(e)) from None
    if not isinstance(meta["config"], dict):
        raise ExportError(
            f"{pair.json_path} is corrupt: its 'config' is not a JSON object. Restore it from "
            "a backup, or re-train."
        )
    cfg = dict(meta["config"])
    cfg.update(method="sequential", sequence_parallel=None, remat=False)
    spec = steps.task_spec(cfg["task"])
    try:
        like = steps.build_model(cfg, spec, jax.random.PRNGKey(0))
        tokens = isinstance(_sequence_model(like[0]).encoder, eqx.nn.Embedding)
        if tokens:  # the run's vocabulary: the size of the stored embedding
            embedding = _sequence_model(like[0]).encoder
            vocab = _stored_rows(pair.eqx_path, like, embedding.weight)
            spec = dataclasses.replace(spec, vocab_size=vocab)
            like = steps.build_model(cfg, spec, jax.random.PRNGKey(0))
        (model, state), meta = ckpt.load_pair(
            pair.json_path, pair.eqx_path, like, finite=True, required=("config",)
        )
    except ckpt.CheckpointError as e:
        raise ExportError(str(e)) from None
    if expected is not None and meta.get("step") != expected.get("step"):
        raise ExportError(
            f"{pair.json_path} holds the weights of step {meta.get('step')}, but the run's "
            f"checkpoint expects those of step {expected.get('step')}. Restore the run's own "
            "best.eqx and best.json, or re-train."
        )
    model = jax.tree_util.tree_map(jnp.asarray, model)
    state = jax.tree_util.tree_map(jnp.asarray, state)
    in_size = spec.vocab_size if tokens else int(spec.in_channels)
    two_tower = isinstance(model, eqx_lru.LRURetrievalModel)
    return Run(model, state, cfg, meta, pair.eqx_path, in_size, tokens, two_tower)


def _trusted_best(run: Path):
    """The `best` pair of `run` that the trainer's `--resume` and test evaluation trust,
    chosen by the rule they share (`_checkpoint.trusted_best`) from the record of the newest
    complete `last` checkpoint, both bound to the run (`_checkpoint.check_bound` against
    `OUT/config.json`; the run id, where that file is missing, the `last` record's).
    Returns `(pair, expected)`: `pair` intact, `expected` the `best` entry of the `last`
    record (its `step`), or None.

    **Raises:** `ExportError` (one line naming the file) when no such pair is there, or it
    belongs to another run; `CheckpointError` for a damaged JSON file, or a `last` record
    whose fields are malformed (`_checkpoint.check_last`, as the trainer's `--resume`).
    """
    from experiments.lra import _checkpoint as ckpt

    config = None
    if (run / "config.json").is_file():
        config = ckpt.read_json(run / "config.json", required=("task",))
    last = ckpt.locate(run, "last")
    if last is not None:  # the trainer's check of the record (types and shapes of its fields)
        ckpt.check_last(last.meta, last.json_path)
    own = (config or {}).get("run_id", last.meta.get("run_id") if last else None)
    record = last.meta if last is not None else {}
    expected, want = ckpt.recorded_best(record, last.json_path if last is not None else None)
    try:
        if last is not None:
            ckpt.check_bound(last.meta, last.json_path, run_id=own, settings=config)
        return ckpt.trusted_best(run, record, run_id=own, settings=config), expected
    except ckpt.NotBound as e:
        raise ExportError(
            f"--run: {e.path} does not belong to the run in {e.path.parent} "
            f"({e.what('the run')}); it was copied from another run, or config.json was "
            "edited. Restore the run's own files, or re-train."
        ) from None
    except ckpt.NoTrustedBest as e:
        if e.newest is None and not want:
            raise ExportError(
                f"--run {str(run)!r} has no best.eqx (with best.json), nor a complete "
                "best.prev.*: the trainer writes it at its first validation (--eval-every "
                "steps). Train longer, or point --run at a finished run."
            ) from None
        why = e.why(explain=True)
    if not want:
        raise ExportError(f"--run {str(run)!r}: {why}. Restore it from a backup, or re-train.")
    raise ExportError(
        f"--run {str(run)!r}: the best weights that {last.json_path.name} records are not "
        f"there: {why}; it expects the weights of step {expected.get('step')} (val accuracy "
        f"{expected.get('val_accuracy')}). Restore the run's own best.eqx and best.json, or "
        "re-train."
    )


def _stored_rows(path: Path, like, leaf) -> int:
    """The leading size, on disk, of the leaf of `like` that is `leaf` (the leaves of an
    `eqx.tree_serialise_leaves` file are `.npy` records in `like`'s leaf order)."""
    leaves = jax.tree_util.tree_leaves(like)
    position = next(i for i, x in enumerate(leaves) if x is leaf)
    with open(path, "rb") as f:
        for i, x in enumerate(leaves):
            if not eqx.is_array_like(x):
                continue
            stored = np.load(f)
            if i == position:
                return int(stored.shape[0])
    raise ExportError(f"{path} is truncated: it lacks the embedding. Restore it or re-train.")


# --------------------------------------------------------------------------- preparing

_NO_PAIR_STEP = (
    "--step: a Retrieval run (two-tower model) has no streaming step (its head needs both "
    "documents whole); export the whole-pair program: drop --step (--format stablehlo)."
)


class _Affine(eqx.Module):
    """Batch norm in inference mode, folded: `x * scale + shift` per channel, one
    position at a time (the block calls a norm that is not a `MaskedBatchNorm` per
    position, as it does `eqx.nn.LayerNorm`)."""

    scale: Float[Array, " channels"]
    shift: Float[Array, " channels"]

    def __call__(self, x: Float[Array, " channels"], *, key=None) -> Float[Array, " channels"]:
        del key
        return x * self.scale + self.shift


def prepare(model: eqx.Module, state: eqx.nn.State, *, real: bool = False) -> eqx.Module:
    """`model` for export: every `MaskedBatchNorm` folded into an affine map with its
    running statistics ($s = w / \\sqrt{\\sigma^2 + \\varepsilon}$, $t = \\beta - \\mu s$,
    in float64), and with `real` every `ComplexLRU` converted by `eqx_lru.to_real`."""

    def fold(node):
        if not isinstance(node, eqx_lru.MaskedBatchNorm):
            return node
        mean, var = (np.asarray(v, np.float64) for v in node.running_stats(state))
        weight, bias = np.asarray(node.weight, np.float64), np.asarray(node.bias, np.float64)
        scale = weight / np.sqrt(var + node.eps)
        dtype = node.weight.dtype
        return _Affine(jnp.asarray(scale, dtype), jnp.asarray(bias - mean * scale, dtype))

    is_norm = lambda x: isinstance(x, eqx_lru.MaskedBatchNorm)  # noqa: E731
    model = jax.tree_util.tree_map(fold, model, is_leaf=is_norm)
    return eqx_lru.to_real(model) if real else model


@dataclasses.dataclass
class Program:
    """A batched function ready for export: `fn(*inputs) -> tuple(outputs)`."""

    fn: Callable
    inputs: list[tuple[str, tuple, Any]]  # name, shape (str for symbolic dims), dtype
    outputs: list[str]
    carry: list[dict[str, Any]] | None = None


def _dims(names: str):
    return jax.export.symbolic_shape(names)


def parallel_program(model, state, *, tokens: bool, in_size: int) -> Program:
    """The whole-sequence call in inference mode, batched: `(x, length) -> (out,)`. For a
    two-tower `LRURetrievalModel` the whole pair: `x` `(batch, 2, length, ...)`, `length`
    `(batch, 2)`, `out` the logits `(batch, classes)`."""

    def fn(x, length):
        def one(x, length):
            return model(x, state, length=length, inference=True)[0]

        return (jax.vmap(one)(x, length),)

    pair = (2,) if isinstance(model, eqx_lru.LRURetrievalModel) else ()
    x_shape = ("batch", *pair, "length") + (() if tokens else (in_size,))
    x_dtype = jnp.int32 if tokens else jnp.float32
    inputs = [("x", x_shape, x_dtype), ("length", ("batch", *pair), jnp.int32)]
    return Program(fn, inputs, ["out"])


class _Streamed(eqx.Module):
    """A Retrieval model's encoder as the ONNX model runs it: one document, the step in a
    loop over its positions from a zero carry (`loop`, the `fn` of
    `_sequence_step_program`; `carry` the shapes and dtypes of its carry for one stream),
    called as `LRURetrievalModel` calls its encoder: `(x, state, length=) -> (pooled,
    state)`."""

    loop: Callable
    carry: tuple[tuple[tuple[int, ...], Any], ...] = eqx.field(static=True)

    def __call__(self, x, state, *, length, key=None, inference=None):
        del key, inference
        carry = [jnp.zeros((1, *shape), dtype) for shape, dtype in self.carry]
        return self.loop(x[None], length[None], *carry)[0][0], state


def _pair_loop_program(model, state, *, tokens: bool, in_size: int) -> Program:
    """A Retrieval model's whole pair with each document's encoder run as a recurrence
    (`_Streamed`): `(x, length) -> (out,)` as `parallel_program`, for ONNX."""
    loop = _sequence_step_program(model.encoder, state, tokens=tokens, in_size=in_size)
    carry = tuple((tuple(shape[1:]), np.dtype(dtype)) for _, shape, dtype in loop.inputs[2:])
    streamed = _Streamed(loop.fn, carry)
    return parallel_program(
        eqx.tree_at(lambda m: m.encoder, model, streamed), state, tokens=tokens, in_size=in_size
    )


def _carry_names(tree) -> list[str]:
    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]:
        parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
        names.append(".".join(["carry", *parts]))
    return names


def step_program(model, state, *, tokens: bool, in_size: int) -> Program:
    """One position of a batch of streams: `(x_t, *carry) -> (y_t, *carry)`."""
    if isinstance(model, eqx_lru.LRURetrievalModel):
        raise ExportError(_NO_PAIR_STEP)
    try:
        init = model.init_carry()
    except (TypeError, ValueError) as e:
        raise ExportError(f"--step: {e}") from None
    leaves, treedef = jax.tree_util.tree_flatten(init)
    names = _carry_names(init)
    for name, leaf in zip(names, leaves, strict=True):
        if np.any(np.asarray(leaf) != 0):
            raise ExportError(f"--step: the initial carry {name} is not zero; cannot describe it.")

    def fn(x_t, *carry):
        def one(x_t, *carry):
            carry, y_t = model.step(jax.tree_util.tree_unflatten(treedef, carry), x_t, state)
            return (y_t, *jax.tree_util.tree_leaves(carry))

        return jax.vmap(one)(x_t, *carry)

    x = ("x_t", ("batch",), jnp.int32) if tokens else ("x_t", ("batch", in_size), jnp.float32)
    carry = [(n, ("batch", *leaf.shape), leaf.dtype) for n, leaf in zip(names, leaves, strict=True)]
    info = [
        {"name": n, "shape": list(s), "dtype": str(np.dtype(d)), "init": "zeros"}
        for n, s, d in carry
    ]
    return Program(fn, [x, *carry], ["y_t", *("next_" + n for n in names)], info)


def _sequence_step_program(model, state, *, tokens: bool, in_size: int) -> Program:
    """The whole sequence as the step in a loop, from a carry: `(x, length, *carry) ->
    (out, *carry)` — `out` at the last valid position (the pooled output, or with
    `pooling=None` every position's), the carry after it. What the ONNX whole-sequence
    model runs (a `Loop`), since it cannot express the parallel scan."""
    step = step_program(model, state, tokens=tokens, in_size=in_size)
    n = len(step.carry)
    per_position = getattr(model, "pooling", "mean") is None

    def fn(x, length, *carry):
        def body(loop, x_t):
            t, last, carry = loop
            y_t, *new = step.fn(x_t, *carry)
            valid, final = t < length, t == length - 1

            def pick(mask, a, b):
                return jnp.where(mask.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)

            carry = [pick(valid, a, b) for a, b in zip(new, carry, strict=True)]
            last = pick(final, y_t, last)
            return (t + 1, last, carry), (
                pick(valid, y_t, jnp.zeros_like(y_t)) if per_position else None
            )

        y0 = jax.eval_shape(step.fn, x[:, 0], *carry)[0]
        start = (jnp.zeros((), jnp.int32), jnp.zeros(y0.shape, y0.dtype), list(carry))
        (_, last, carry), ys = jax.lax.scan(body, start, jnp.swapaxes(x, 0, 1))
        return (jnp.swapaxes(ys, 0, 1) if per_position else last, *carry)

    x_shape = ("batch", "length") if tokens else ("batch", "length", in_size)
    x_dtype = jnp.int32 if tokens else jnp.float32
    inputs = [("x", x_shape, x_dtype), ("length", ("batch",), jnp.int32), *step.inputs[1:]]
    return Program(fn, inputs, ["out", *step.outputs[1 : 1 + n]], step.carry)


# --------------------------------------------------------------------------- exporting


def _specs(program: Program):
    scope = _dims("batch, length")
    named = {"batch": scope[0], "length": scope[1]}
    return [
        jax.ShapeDtypeStruct(tuple(named.get(d, d) for d in shape), dtype)
        for _, shape, dtype in program.inputs
    ], named["batch"]


class _NoRuntimeChecks:
    """`eqx.error_if` (token ids, lengths) off while tracing: its host callback cannot be
    serialized, and `on_error="nan"` needs concrete shapes. Equinox reads the setting when
    it traces its (jitted) check, so JAX's trace caches are cleared on the way in (a check
    traced earlier in this process would be reused) and out (so later code checks again)."""

    def __enter__(self):
        from equinox import _errors

        self.module, self.saved = _errors, _errors.EQX_ON_ERROR
        _errors.EQX_ON_ERROR = "off"
        jax.clear_caches()

    def __exit__(self, *exc):
        self.module.EQX_ON_ERROR = self.saved
        jax.clear_caches()


def export_stablehlo(program: Program) -> bytes:
    """`jax.export` of `program`, serialized."""
    specs, _ = _specs(program)
    with _NoRuntimeChecks():
        exported = jax.export.export(jax.jit(program.fn))(*specs)
    return bytes(exported.serialize())


def export_onnx(program: Program, *, doc: str = "") -> bytes:
    """The ONNX model of `program` (see `_onnx.py`), serialized."""
    from . import _onnx

    specs, batch = _specs(program)
    with _NoRuntimeChecks():
        closed = jax.make_jaxpr(program.fn)(*specs)
    try:
        model = _onnx.to_onnx(
            closed, [n for n, _, _ in program.inputs], program.outputs, batch=batch, doc=doc
        )
    except (TypeError, NotImplementedError) as e:
        raise ExportError(str(e)) from None
    return model.SerializeToString()


_PAIR_NOTE = (
    "x[:, 0] and x[:, 1] are the two documents of each pair, each padded to the common "
    "length; length[:, 0] and length[:, 1] their valid lengths. "
)


def _manifest(
    run: Run,
    model,
    program: Program,
    fmt: str,
    step: bool,
    artifact: Path,
    data: bytes,
    converted: bool,
) -> dict[str, Any]:
    out_avals = None
    specs, _ = _specs(program)
    with _NoRuntimeChecks():
        out_avals = jax.eval_shape(program.fn, *specs)
    outputs = [
        {
            "name": n,
            "shape": [str(d) if not isinstance(d, int) else d for d in a.shape],
            "dtype": str(a.dtype),
        }
        for n, a in zip(program.outputs, out_avals, strict=True)
    ]
    cfg = run.cfg
    return {
        "format": fmt,
        "program": "step" if step else "pair" if run.pair else "sequence",
        "artifact": artifact.name,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "inputs": [
            {"name": n, "shape": list(s), "dtype": str(np.dtype(d))} for n, s, d in program.inputs
        ],
        "outputs": outputs,
        "carry": program.carry,
        "vocab_size": run.in_size if run.tokens else None,
        "in_features": None if run.tokens else run.in_size,
        "task": cfg.get("task"),
        "model": {
            k: cfg.get(k)
            for k in (
                "core",
                "form",
                "depth",
                "d_model",
                "d_state",
                "pooling",
                "norm",
                "bidirectional",
                "glu",
            )
        },
        "exported_form": "real" if converted or cfg.get("form") == "real" else cfg.get("form"),
        "notes": (
            "Inference mode; batch norm folded. "
            + (_PAIR_NOTE if run.pair else "")
            + "Inputs are not checked: token ids in [0, vocab_size) (others are clamped), "
            + ("1 <= length <= x.shape[2]." if run.pair else "1 <= length <= x.shape[1].")
            + (
                " The step's carry starts at zeros; feed the returned next_carry back."
                if program.carry
                else ""
            )
        ),
        "source": {
            "checkpoint": str(run.checkpoint),
            "step": run.meta.get("step"),
            "val_accuracy": run.meta.get("val_accuracy"),
            "sha256": run.meta.get("sha256"),
        },
        "jax": jax.__version__,
    }


def export_run(
    run: str | Path, fmt: str, *, step: bool = False, dest: str | Path | None = None
) -> Path:
    """Export the run in folder `run` (see the module docstring); returns the artifact's
    path (the manifest is the same path plus `.json`)."""
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}.")
    loaded = load_run(run)
    if loaded.pair and step:
        raise ExportError(_NO_PAIR_STEP)
    real = fmt == "onnx"
    converted = real and loaded.cfg.get("form") == "complex" and loaded.cfg.get("core") == "lru"
    model = prepare(loaded.model, loaded.state, real=real)
    sizes = dict(tokens=loaded.tokens, in_size=loaded.in_size)
    if step or real:
        bidirectional = [
            i
            for i, b in enumerate(getattr(_sequence_model(model), "blocks", ()))
            if getattr(b, "reverse_core", None) is not None
        ]
        if bidirectional:
            what = "--step" if step else "--format onnx (which runs the model as a recurrence)"
            raise ExportError(
                f"{what} needs a causal model, and this run's blocks are bidirectional (each "
                "output depends on later positions). Export the whole sequence with "
                "--format stablehlo instead."
            )
    if step:
        program = step_program(model, loaded.state, **sizes)
    elif real and loaded.pair:
        program = _pair_loop_program(model, loaded.state, **sizes)
    elif real:
        program = _sequence_step_program(model, loaded.state, **sizes)
    else:
        program = parallel_program(model, loaded.state, **sizes)
    if fmt == "stablehlo":
        data = export_stablehlo(program)
    else:
        name = type(loaded.model).__name__  # LRUModel, or LRURetrievalModel
        data = export_onnx(program, doc=f"eqx_lru {name} from {loaded.checkpoint}")
    folder = Path(dest) if dest is not None else Path(run) / "export"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(
            f"--dest {str(folder)!r} is not a writable folder ({e.strerror or e})."
        ) from None
    artifact = folder / (("step" if step else "model") + _SUFFIX[fmt])
    from experiments.lra import _checkpoint as ckpt

    ckpt.write_atomic(artifact, data)
    manifest = _manifest(loaded, model, program, fmt, step, artifact, data, converted)
    ckpt.write_atomic(
        artifact.with_name(artifact.name + ".json"), json.dumps(manifest, indent=1).encode()
    )
    return artifact


def _parser():
    import argparse

    from experiments._flags import output_folder

    parser = argparse.ArgumentParser(
        prog="python -m experiments.export",
        description="Export the best weights of an LRA trainer run to StableHLO or ONNX.",
    )
    parser.add_argument("--run", required=True, help="the run folder (the trainer's --out)")
    parser.add_argument("--format", required=True, choices=FORMATS, help="stablehlo or onnx")
    parser.add_argument(
        "--step",
        action="store_true",
        help="export one streaming step (state in, state out) instead of the whole sequence",
    )
    parser.add_argument(
        "--dest", type=output_folder, default=None, help="output folder (default RUN/export)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; returns the exit status (user errors: one `error:` line, status 2)."""
    from experiments._flags import report_os_errors

    return report_os_errors(_main)(argv)


def _main(argv: Sequence[str] | None = None) -> int:
    import sys

    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    try:
        artifact = export_run(args.run, args.format, step=args.step, dest=args.dest)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {artifact} and {artifact.name}.json", file=sys.stderr)
    return 0

"""`python -m experiments.export`: a trainer run's best weights out of JAX.

A run folder is written as the trainer writes it (`best.eqx` + `best.json` through
`experiments.runs.checkpoint.save`, with the trainer's config), from a tiny ListOps model
(depth 2, H = 8, N = 6, a vocabulary of 15 — not the official 18, so the exporter must
read it from the checkpoint) with non-trivial batch-norm running statistics. Then:

- StableHLO, the whole sequence and the step: reloaded and run in a fresh Python process
  that does not import eqx_lru, equal to the model's call / `LRUModel.step` (other batch
  sizes and lengths than any traced: the dimensions are symbolic);
- ONNX (the complex model converted to the real form): onnxruntime's step over a
  2,000-token stream equals JAX's `model.step` within 1e-5, and the whole-sequence model
  (an ONNX Loop) the parallel call with padding;
- a Retrieval run (the two-tower `LRURetrievalModel`, built as the trainer builds it): the
  whole-pair program in StableHLO (reloaded without eqx_lru) and ONNX equals the model's
  call for two batch sizes and lengths, documents of a pair padded to a common length;
  `--step` is refused with one line pointing to the whole-pair program;
- bad runs and flags: one `error:` line, exit status 2;
- the checkpoint exported is the one the trainer's `--resume` trusts: after a crash while
  the best weights were being replaced (every state `_checkpoint.save` can leave, and a
  crash between writing `best.*` and `last.*`), the previous pair `best.prev.*`; a
  damaged or foreign checkpoint is refused with one line naming the file.
"""

import errno
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru.export
from experiments import export
from experiments.lra import steps, train
from experiments.runs import checkpoint as ckpt

VOCAB, D_MODEL, D_STATE, DEPTH, CLASSES = 15, 8, 6, 2, 10


def _write_run(
    folder, task="listops", sizes=(CLASSES, VOCAB, D_MODEL, D_STATE, DEPTH), *, seed=0, **overrides
):
    """A run folder holding what the trainer writes at a validation: best.eqx/best.json, the
    model of `task` with `sizes` (classes, vocabulary, H, N, depth) and running batch-norm
    statistics as after some training."""
    classes, vocab, d_model, d_state, depth = sizes
    cfg = {
        **train.task_defaults(task),
        "d_model": d_model,
        "d_state": d_state,
        "depth": depth,
        **overrides,
    }
    spec = steps.TaskSpec(task, classes, 64, vocab, None)
    model: Any  # an LRUModel, or the two-tower LRURetrievalModel
    model, state = steps.build_model(cfg, spec, jax.random.PRNGKey(3 + seed))
    rng = np.random.default_rng(seed)
    sequence_model = model.encoder if task == "retrieval" else model  # the two-tower one's
    for block in sequence_model.blocks:
        mean = rng.normal(size=d_model).astype(np.float32)
        var = rng.uniform(0.5, 2.0, d_model).astype(np.float32)
        stats = (jnp.asarray(7, jnp.int32), jnp.asarray(mean), jnp.asarray(var))
        state = state.set(block.norm.state_index, stats)
    meta = {"step": 7, "val_accuracy": 0.5, "val_loss": 1.0, "config": cfg}
    ckpt.save(folder, "best", (model, state), meta)
    (folder / "config.json").write_text(json.dumps(cfg))
    return model, state


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    model, state = _write_run(folder)
    return folder, model, state


def _parallel(model, state, x, length):
    call = lambda x, n: model(x, state, length=n, inference=True)[0]  # noqa: E731
    with jax.default_matmul_precision("highest"):
        return np.asarray(jax.jit(jax.vmap(call))(x, length))


def _stream(model, state, x):
    """JAX's step over every position of a batch of streams: outputs `(batch, length, ...)`
    and the final carry."""

    def one(x):
        return jax.lax.scan(lambda c, t: model.step(c, t, state), model.init_carry(), x)

    with jax.default_matmul_precision("highest"):
        carry, ys = jax.jit(jax.vmap(one))(x)
    return np.asarray(ys), carry


def _tokens(shape, seed):
    return np.random.default_rng(seed).integers(0, VOCAB, shape).astype(np.int32)


_RELOAD = textwrap.dedent(
    """
    import sys
    import jax
    import numpy as np

    inputs = np.load(sys.argv[1])
    with open(sys.argv[2], "rb") as f:
        sequence = jax.export.deserialize(bytearray(f.read()))
    with open(sys.argv[3], "rb") as f:
        step = jax.export.deserialize(bytearray(f.read()))
    out = {"sequence": np.asarray(sequence.call(inputs["x"], inputs["length"])[0])}
    stream = inputs["stream"]
    carry = [np.zeros((stream.shape[0], *s), d) for s, d in zip(
        [tuple(a.shape[1:]) for a in step.in_avals[1:]], [a.dtype for a in step.in_avals[1:]])]
    call = jax.jit(step.call)
    ys = []
    for t in range(stream.shape[1]):
        y, *carry = call(stream[:, t], *carry)
        ys.append(np.asarray(y))
    out["stream"] = np.stack(ys, axis=1)
    for i, c in enumerate(carry):
        out[f"carry{i}"] = np.asarray(c)
    assert "eqx_lru" not in sys.modules and "experiments" not in sys.modules, sorted(sys.modules)
    np.savez(sys.argv[4], **out)
    """
)


def _run_without_eqx_lru(script: str, folder: Path, *artifacts: Path) -> None:
    """Run `script` as `script in.npz ARTIFACT... out.npz` in `folder`, in a fresh process
    whose path cannot reach eqx_lru or experiments (the script asserts it)."""
    (folder / "reload.py").write_text(script)
    subprocess.run(
        [sys.executable, str(folder / "reload.py"), str(folder / "in.npz")]
        + [str(a) for a in artifacts]
        + [str(folder / "out.npz")],
        check=True,
        cwd=folder,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"},
    )


@pytest.mark.slow
def test_stablehlo_round_trip_in_a_process_without_eqx_lru(run, tmp_path):
    folder, model, state = run
    sequence = export.export_run(folder, "stablehlo")
    step = export.export_run(folder, "stablehlo", step=True)
    assert sequence.name == "model.stablehlo" and step.name == "step.stablehlo"
    x, length = _tokens((3, 37), 1), np.array([37, 20, 1], np.int32)
    stream = _tokens((2, 23), 2)
    np.savez(tmp_path / "in.npz", x=x, length=length, stream=stream)
    _run_without_eqx_lru(_RELOAD, tmp_path, sequence, step)
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(
        out["sequence"], _parallel(model, state, x, length), rtol=1e-5, atol=1e-6
    )
    ys, carry = _stream(model, state, stream)
    np.testing.assert_allclose(out["stream"], ys, rtol=1e-5, atol=1e-6)
    for i, c in enumerate(jax.tree_util.tree_leaves(carry)):
        np.testing.assert_allclose(out[f"carry{i}"], np.asarray(c), rtol=1e-5, atol=1e-6)
    # The stream's last output is the model's call on the whole stream.
    full = _parallel(model, state, stream, np.full(2, stream.shape[1], np.int32))
    np.testing.assert_allclose(ys[:, -1], full, rtol=1e-5, atol=1e-6)

    manifest = json.loads((folder / "export" / "step.stablehlo.json").read_text())
    assert manifest["format"] == "stablehlo" and manifest["program"] == "step"
    assert manifest["vocab_size"] == VOCAB and manifest["exported_form"] == "complex"
    assert manifest["inputs"][0] == {"name": "x_t", "shape": ["batch"], "dtype": "int32"}
    shapes = {c["name"]: c["shape"] for c in manifest["carry"]}
    # ComplexLRU keeps a complex (N,) state per block; mean pooling a running sum and count.
    assert shapes == {
        "carry.blocks.0": ["batch", D_STATE],
        "carry.blocks.1": ["batch", D_STATE],
        "carry.count": ["batch"],
        "carry.sum": ["batch", D_MODEL],
    }
    assert manifest["outputs"][0] == {
        "name": "y_t",
        "shape": ["batch", CLASSES],
        "dtype": "float32",
    }
    assert manifest["source"]["checkpoint"] == str(folder / "best.eqx")
    assert manifest["source"]["step"] == 7
    seq_manifest = json.loads((folder / "export" / "model.stablehlo.json").read_text())
    assert [i["shape"] for i in seq_manifest["inputs"]] == [["batch", "length"], ["batch"]]


@pytest.mark.slow
def test_onnx_step_and_sequence_match_jax_over_2000_tokens(run, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    folder, model, state = run
    assert (
        export.main(["--run", str(folder), "--format", "onnx", "--step", "--dest", str(tmp_path)])
        == 0
    )
    assert export.main(["--run", str(folder), "--format", "onnx", "--dest", str(tmp_path)]) == 0
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    step = ort.InferenceSession(
        str(tmp_path / "step.onnx"), options, providers=["CPUExecutionProvider"]
    )
    manifest = json.loads((tmp_path / "step.onnx.json").read_text())
    assert manifest["exported_form"] == "real" and manifest["model"]["form"] == "complex"
    assert [c["shape"] for c in manifest["carry"]][:2] == [["batch", D_STATE, 2]] * 2

    stream = _tokens((2, 2000), 4)
    names = [i.name for i in step.get_inputs()]
    assert names == ["x_t", *(c["name"] for c in manifest["carry"])]
    carry = [np.zeros((2, *c["shape"][1:]), c["dtype"]) for c in manifest["carry"]]
    ys = []
    for t in range(stream.shape[1]):
        y, *carry = step.run(None, dict(zip(names, [stream[:, t], *carry], strict=True)))
        ys.append(y)
    ys = np.stack(ys, axis=1)
    expected, final = _stream(eqx_lru_real(model), state, stream)
    scale = np.abs(expected).max()
    assert np.abs(ys - expected).max() <= 1e-5 * scale
    # The complex model (as trained) gives the same outputs.
    complex_ys, _ = _stream(model, state, stream[:, :300])
    assert np.abs(ys[:, :300] - complex_ys).max() <= 1e-5 * scale

    # The whole-sequence model: a Loop over the step, with padding and a carry out.
    sequence = ort.InferenceSession(
        str(tmp_path / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    x, length = _tokens((3, 41), 5), np.array([41, 17, 1], np.int32)
    zeros = {
        n: np.zeros((3, *c["shape"][1:]), c["dtype"])
        for n, c in zip(names[1:], manifest["carry"], strict=True)
    }
    out, *carry_out = sequence.run(None, {"x": x, "length": length, **zeros})
    np.testing.assert_allclose(out, _parallel(model, state, x, length), rtol=1e-5, atol=1e-5)
    _, carry17 = _stream(eqx_lru_real(model), state, x[1:2, :17])
    for got, want in zip(carry_out, jax.tree_util.tree_leaves(carry17), strict=True):
        np.testing.assert_allclose(got[1:2], np.asarray(want), rtol=1e-5, atol=1e-6)
    del final


def eqx_lru_real(model):
    import eqx_lru

    return eqx_lru.to_real(model)


def test_onnx_graph_folds_batch_norm(run, tmp_path):
    onnx = pytest.importorskip("onnx")
    folder, _, _ = run
    artifact = export.export_run(folder, "onnx", step=True, dest=tmp_path)
    graph = onnx.load(str(artifact)).graph
    ops = {node.op_type for node in graph.node}
    # No running-statistics arithmetic (power, square root, reciprocal) and no trigonometry
    # (the transition is stored, not recomputed from nu_log / theta_log) is left.
    assert not ops & {"Pow", "Sqrt", "Reciprocal", "Cos", "Sin", "Exp"}, ops
    assert {i.name for i in graph.input} >= {"x_t", "carry.blocks.0"}


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "is not a folder"),
        ("empty", "has no best.eqx"),
        ("corrupt", "corrupt"),
        ("format", "invalid choice"),
        ("bidirectional", "needs a causal model"),
    ],
)
def test_bad_inputs_fail_with_one_line(case, message, run, tmp_path, capsys):
    folder = tmp_path / "run"
    fmt, extra = "stablehlo", []
    if case == "empty":
        folder.mkdir()
    elif case == "corrupt":
        folder.mkdir()
        for name in ("best.eqx", "best.json"):
            (folder / name).write_bytes((run[0] / name).read_bytes())
        data = bytearray((folder / "best.eqx").read_bytes())
        data[-3] ^= 0xFF
        (folder / "best.eqx").write_bytes(bytes(data))
    elif case == "format":
        folder, fmt = run[0], "tflite"
    elif case == "bidirectional":
        folder.mkdir()
        _write_run(folder, bidirectional=True)
        extra = ["--step"]
    assert export.main(["--run", str(folder), "--format", fmt, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1], err
    if case != "format":
        assert len(err) == 1 and err[0].startswith("error: ")


def test_the_cli_formats_are_the_librarys():
    from experiments.export import _cli

    assert _cli.FORMATS == tuple(eqx_lru.export.FORMATS) == export.FORMATS


def test_unknown_format_in_the_api(run):
    with pytest.raises(export.ExportError, match="--format must be one of stablehlo, onnx"):
        export.export_run(run[0], "tflite")


def test_prepare_folds_batch_norm_exactly(run):
    _, model, state = run
    folded = export.prepare(model, state)
    assert all(type(block.norm).__name__ == "_Affine" for block in folded.blocks)
    x, length = _tokens((2, 19), 6), np.array([19, 5], np.int32)
    np.testing.assert_allclose(
        _parallel(folded, state, x, length),
        _parallel(model, state, x, length),
        rtol=1e-5,
        atol=1e-6,
    )


# ------------------------------------------------ which checkpoint: the one the trainer trusts

RUN_ID = "a" * 32
_BEST = {"step": 7, "val_accuracy": 0.5, "val_loss": 1.0}


def _bound_copy(run, folder):
    """The `run` fixture's best pair and config.json copied into `folder`, bound to the run
    id `RUN_ID` as the trainer binds them (`config.json` and `best.json` record it; the
    digest covers the `.eqx` only). No model is built: copies keep the suite fast."""
    folder.mkdir(exist_ok=True)
    meta = json.loads((run[0] / "best.json").read_text())
    cfg = {**meta["config"], "run_id": RUN_ID}
    (folder / "best.json").write_text(json.dumps({**meta, "config": cfg, "run_id": RUN_ID}))
    (folder / "best.eqx").write_bytes((run[0] / "best.eqx").read_bytes())
    (folder / "config.json").write_text(json.dumps(cfg))
    return cfg, meta["sha256"]


def _crashed_run(folder, run, crash: str, *, last: bool):
    """A run folder as the trainer leaves it when killed while replacing its best weights
    A (step 7, the `run` fixture's model) by B (step 9), at the instant `crash` names (the
    steps of `_checkpoint.save`; see tests/experiments/test_reliability_kill.py):

    - `eqx_moved`: `best.eqx` moved to `best.prev.eqx`, `best.json` not yet;
    - `both_moved`: A is `best.prev.*`, nothing new in place;
    - `new_eqx`: B's `.eqx` in place as `best.eqx`, its JSON not;
    - `before_last`: B complete as `best.*`, but `last.*` (which records the best weights'
      digest) still A's: the trainer resumes from A.

    With `last`, a `last` checkpoint records A (`best` and `best_sha256`), as the trainer
    writes it. Returns A's `(model, state)`.
    """
    _, model, state = run
    cfg, digest = _bound_copy(run, folder)
    if last:
        record = {"best": _BEST, "best_sha256": digest, "config": cfg, "run_id": RUN_ID}
        ckpt.save(folder, "last", (np.zeros(3, np.float32),), {"step": 7, **record})
    if crash in ("eqx_moved", "both_moved"):
        (folder / "best.eqx").rename(folder / "best.prev.eqx")
        if crash == "both_moved":
            (folder / "best.json").rename(folder / "best.prev.json")
    else:
        newer = jax.tree_util.tree_map(
            lambda x: np.asarray(x) + 1 if eqx.is_inexact_array(x) else x, model
        )
        meta = {**_BEST, "step": 9, "config": cfg, "run_id": RUN_ID}
        ckpt.save(folder, "best", (newer, state), meta)
        if crash == "new_eqx":
            (folder / "best.json").unlink()
    return model, state


def _equal(a, b):
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize(
    "crash, last",
    [
        ("eqx_moved", False),
        ("eqx_moved", True),
        ("both_moved", False),
        ("both_moved", True),
        ("new_eqx", False),
        ("new_eqx", True),
        ("before_last", True),
        ("before_last", False),
    ],
)
def test_a_crash_mid_save_loads_the_previous_best(crash, last, run, tmp_path):
    """The old exporter read `best.*` only: it refused the first three states (a file of
    the pair missing) and exported B, weights the run never confirmed, in the fourth.
    Without a `last` record of the best weights (as the trainer's `--resume` then does):
    the newest complete pair, which in the fourth is B."""
    model, state = _crashed_run(tmp_path, run, crash, last=last)
    loaded = export.load_run(tmp_path)
    if crash == "before_last" and not last:
        assert loaded.checkpoint.name == "best.eqx" and loaded.meta["step"] == 9
        return
    assert loaded.checkpoint.name == "best.prev.eqx"
    assert loaded.meta["step"] == 7
    # (`load_run` makes every leaf an array, as `jnp.asarray` does.)
    _equal(loaded.model, jax.tree_util.tree_map(jnp.asarray, model))
    _equal(loaded.state, state)


def test_a_checkpoint_written_during_the_read_is_read_again_not_an_alarm(
    run, tmp_path, monkeypatch
):
    """An export while the run trained failed now and then with a false "holds the weights
    of step ..." alarm: the trainer replaced `best.*` and then `last.*` between the
    export's read of `last.json` and its read of `best.*`. The trainer's save is made to
    happen there, once."""
    _, model, state = run
    cfg, digest = _bound_copy(run, tmp_path)
    record = {"best": _BEST, "best_sha256": digest, "config": cfg, "run_id": RUN_ID}
    ckpt.save(tmp_path, "last", (np.zeros(3, np.float32),), {"step": 7, **record})
    real, saves = ckpt.load_pair, []

    def load_pair(*args, **kwargs):
        if not saves:  # the trainer's next checkpoint, B of step 9, lands mid-read
            newer = jax.tree_util.tree_map(
                lambda x: np.asarray(x) + 1 if eqx.is_inexact_array(x) else x, model
            )
            best = {**_BEST, "step": 9}
            saves.append(
                ckpt.save(
                    tmp_path, "best", (newer, state), {**best, "config": cfg, "run_id": RUN_ID}
                )
            )
            new = {**record, "best": best, "best_sha256": saves[0]}
            ckpt.save(tmp_path, "last", (np.zeros(3, np.float32),), {"step": 9, **new})
        return real(*args, **kwargs)

    monkeypatch.setattr(ckpt, "load_pair", load_pair)
    loaded = export.load_run(tmp_path)
    assert saves and loaded.meta["step"] == 9 and loaded.checkpoint.name == "best.eqx"


@pytest.mark.slow
def test_a_crash_mid_save_exports_the_previous_best(run, tmp_path, capsys):
    """The command, end to end, after a crash between writing `best.*` and `last.*`: the
    artifact computes A's step (B's differs everywhere), and the manifest names the
    checkpoint it came from."""
    model, state = _crashed_run(tmp_path, run, "before_last", last=True)
    assert export.main(["--run", str(tmp_path), "--format", "stablehlo", "--step"]) == 0
    assert "wrote" in capsys.readouterr().err
    with open(tmp_path / "export" / "step.stablehlo", "rb") as f:
        step = jax.export.deserialize(bytearray(f.read()))
    stream = _tokens((3, 5), 7)
    carry = [np.zeros((3, *a.shape[1:]), a.dtype) for a in step.in_avals[1:]]
    ys = []
    for t in range(stream.shape[1]):
        y, *carry = step.call(stream[:, t], *carry)
        ys.append(np.asarray(y))
    expected, _ = _stream(model, state, stream)
    np.testing.assert_allclose(np.stack(ys, axis=1), expected, rtol=1e-5, atol=1e-6)
    source = json.loads((tmp_path / "export" / "step.stablehlo.json").read_text())["source"]
    assert source["checkpoint"] == str(tmp_path / "best.prev.eqx") and source["step"] == 7
    assert source["sha256"] == cast(ckpt.Pair, ckpt.locate(tmp_path, "last")).meta["best_sha256"]


@pytest.mark.parametrize(
    "damage, message",
    [
        ("flipped", "best.eqx is missing, corrupt or truncated"),
        ("truncated", "best.eqx is missing, corrupt or truncated"),
        ("no_eqx", "best.eqx is missing, corrupt or truncated"),
        ("no_json", "best.eqx (with best.json)"),
        ("foreign", "best.json does not belong to the run"),
        ("edited", "in best.json, {} in config.json"),
    ],
)
@pytest.mark.parametrize("last", [False, True])
def test_no_valid_best_fails_with_one_line_naming_the_file(
    damage, message, last, run, tmp_path, capsys
):
    """A damaged best and no previous pair: refused (not exported from other weights), one
    `error:` line naming the file. With `last`, the line says which weights the run's
    checkpoint expects."""
    folder = tmp_path / "run"
    _, digest = _bound_copy(run, folder)
    if last:
        record = {"step": 7, "best": _BEST, "best_sha256": digest, "run_id": RUN_ID}
        ckpt.save(folder, "last", (np.zeros(3, np.float32),), record)
    data = bytearray((folder / "best.eqx").read_bytes())
    if damage == "flipped":
        data[len(data) // 2] ^= 0x01
        (folder / "best.eqx").write_bytes(bytes(data))
    elif damage == "truncated":
        (folder / "best.eqx").write_bytes(bytes(data[:-5]))
    elif damage == "no_eqx":
        (folder / "best.eqx").unlink()
    elif damage == "no_json":
        (folder / "best.json").unlink()
    elif damage == "foreign":  # copied from another run with the same settings
        meta = json.loads((folder / "best.json").read_text())
        (folder / "best.json").write_text(json.dumps({**meta, "run_id": "b" * 32}))
    else:  # config.json edited: another run's settings
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**cfg, "lr": 2 * cfg["lr"]}))
        message = f"lr: {cfg['lr']!r} " + message.format(repr(2 * cfg["lr"]))
    assert export.main(["--run", str(folder), "--format", "stablehlo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert message in err[0] and str(folder) in err[0], err
    if last and damage not in ("foreign", "edited"):
        assert "expects the weights of step 7" in err[0], err
    assert not (folder / "export").exists()


@pytest.mark.parametrize(
    "field, value, shown",
    [
        ("best", 3, "3 (a number)"),
        ("best", "x", '"x" (a string)'),
        ("best", [7, 0.5], "[7, 0.5] (a list)"),
        ("best", {"val_accuracy": 0.5}, "without 'step'"),
        ("best_sha256", 5, "5 (a number)"),
        ("pending", "x", '"x" (a string)'),
        ("step", "7", '"7" (a string)'),
        ("config", "x", '"x" (a string)'),
        ("run_id", 7, "7 (a number)"),
    ],
)
def test_malformed_last_record_fails_with_one_line(field, value, shown, run, tmp_path, capsys):
    """A `last.json` field edited by hand or written by another tool: refused with one
    line naming the file and the field, as the trainer's `--resume` refuses it (the same
    check). A `best` that is not an object used to be taken for "no record": the newest
    best pair was exported, whichever it was."""
    folder = tmp_path / "run"
    cfg, digest = _bound_copy(run, folder)
    record = {"step": 7, "best": _BEST, "best_sha256": digest, "config": cfg, "run_id": RUN_ID}
    ckpt.save(folder, "last", (np.zeros(3, np.float32),), {**record, field: value})
    assert export.main(["--run", str(folder), "--format", "stablehlo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert f"{folder / 'last.json'} is corrupt: its {field!r} is " in err[0], err
    assert shown in err[0] and "start a new run with another --out" in err[0], err
    assert not (folder / "export").exists()


def test_recorded_best_refuses_a_malformed_record():
    """`recorded_best` (used by `trusted_best`) no longer reads a `best` that is not an
    object as "none recorded"."""
    assert ckpt.recorded_best({"best": _BEST, "best_sha256": "0" * 64}) == (_BEST, "0" * 64)
    assert ckpt.recorded_best({"best": None, "best_sha256": None}) == (None, None)
    assert ckpt.recorded_best(None) == (None, None)
    with pytest.raises(ckpt.CheckpointError, match="its 'best' is 3 \\(a number\\)"):
        ckpt.recorded_best({"best": 3})


# ------------------------------------------------ Retrieval: the two-tower model, whole pairs

R_VOCAB, R_D_MODEL, R_D_STATE, R_DEPTH, R_CLASSES = 11, 7, 5, 2, 2  # AAN has 2 classes


@pytest.fixture(scope="module")
def retrieval_run(tmp_path_factory):
    """A Retrieval run folder as the trainer writes it at a validation (no training): the
    two-tower `LRURetrievalModel` (complex LRU, batch norm with non-trivial running
    statistics, a vocabulary of 11, not the task's 98, so it is read from the checkpoint)."""
    folder = tmp_path_factory.mktemp("retrieval")
    sizes = (R_CLASSES, R_VOCAB, R_D_MODEL, R_D_STATE, R_DEPTH)
    model, state = _write_run(folder, "retrieval", sizes, seed=2)
    assert type(model).__name__ == "LRURetrievalModel"
    return folder, model, state


_RELOAD_PAIR = textwrap.dedent(
    """
    import sys
    import jax
    import numpy as np

    inputs = np.load(sys.argv[1])
    with open(sys.argv[2], "rb") as f:
        pair = jax.export.deserialize(bytearray(f.read()))
    out = {}
    for name in ("a", "b"):
        out[name] = np.asarray(pair.call(inputs["x_" + name], inputs["length_" + name])[0])
    assert "eqx_lru" not in sys.modules and "experiments" not in sys.modules, sorted(sys.modules)
    np.savez(sys.argv[3], **out)
    """
)


@pytest.mark.slow
def test_retrieval_pair_stablehlo_round_trip_without_eqx_lru(retrieval_run, tmp_path):
    """The whole-pair program, reloaded where eqx_lru is not importable, equals the
    two-tower model's call in inference mode for two batch sizes and lengths, both
    documents of a pair padded to a common length (their own lengths differ)."""
    folder, model, state = retrieval_run
    artifact = export.export_run(folder, "stablehlo")
    assert artifact.name == "model.stablehlo"
    rng = np.random.default_rng(9)
    x_a = rng.integers(0, R_VOCAB, (3, 2, 29)).astype(np.int32)
    length_a = np.array([[29, 4], [13, 29], [1, 22]], np.int32)
    x_b = rng.integers(0, R_VOCAB, (5, 2, 41)).astype(np.int32)
    length_b = np.array([[41, 41], [40, 3], [7, 33], [1, 1], [26, 41]], np.int32)
    np.savez(tmp_path / "in.npz", x_a=x_a, length_a=length_a, x_b=x_b, length_b=length_b)
    _run_without_eqx_lru(_RELOAD_PAIR, tmp_path, artifact)
    out = np.load(tmp_path / "out.npz")
    for name, x, length in (("a", x_a, length_a), ("b", x_b, length_b)):
        expected = _parallel(model, state, x, length)
        assert out[name].shape == expected.shape == (x.shape[0], R_CLASSES)
        print(f"pair {name}: max abs difference {np.abs(out[name] - expected).max():.3g}")
        np.testing.assert_allclose(out[name], expected, rtol=1e-5, atol=1e-6)
    # The padding is ignored: garbage past each document's length changes nothing.
    noisy = np.where(np.arange(41) < length_b[..., None], x_b, (x_b + 5) % R_VOCAB)
    np.testing.assert_allclose(
        _parallel(model, state, noisy, length_b), out["b"], rtol=1e-5, atol=1e-6
    )

    manifest = json.loads((folder / "export" / "model.stablehlo.json").read_text())
    assert manifest["program"] == "pair" and manifest["task"] == "retrieval"
    assert manifest["inputs"] == [
        {"name": "x", "shape": ["batch", 2, "length"], "dtype": "int32"},
        {"name": "length", "shape": ["batch", 2], "dtype": "int32"},
    ]
    assert manifest["outputs"] == [
        {"name": "out", "shape": ["batch", R_CLASSES], "dtype": "float32"}
    ]
    assert manifest["vocab_size"] == R_VOCAB and manifest["carry"] is None
    assert "x.shape[2]" in manifest["notes"] and "x[:, 1]" in manifest["notes"]


@pytest.mark.slow
def test_retrieval_onnx_pair_matches_jax(retrieval_run, tmp_path):
    """ONNX (the real form; each document through the encoder's step in a Loop, then the
    head) equals the two-tower model as trained (complex form, parallel call)."""
    ort = pytest.importorskip("onnxruntime")
    folder, model, state = retrieval_run
    assert export.main(["--run", str(folder), "--format", "onnx", "--dest", str(tmp_path)]) == 0
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        str(tmp_path / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    assert [i.name for i in session.get_inputs()] == ["x", "length"]
    rng = np.random.default_rng(10)
    for batch, size in ((3, 31), (4, 18)):
        x = rng.integers(0, R_VOCAB, (batch, 2, size)).astype(np.int32)
        length = rng.integers(1, size + 1, (batch, 2)).astype(np.int32)
        length[0] = size, 1
        (out,) = session.run(None, {"x": x, "length": length})
        expected = _parallel(model, state, x, length)
        print(f"onnx pair {batch}x{size}: max abs difference {np.abs(out - expected).max():.3g}")
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    manifest = json.loads((tmp_path / "model.onnx.json").read_text())
    assert manifest["program"] == "pair" and manifest["exported_form"] == "real"
    assert [i["shape"] for i in manifest["inputs"]] == [["batch", 2, "length"], ["batch", 2]]
    assert manifest["outputs"][0]["shape"] == ["batch", R_CLASSES] and manifest["carry"] is None


@pytest.mark.parametrize("fmt", ["stablehlo", "onnx"])
def test_retrieval_step_fails_with_one_line(fmt, retrieval_run, tmp_path, capsys):
    argv = ["--run", str(retrieval_run[0]), "--format", fmt, "--step", "--dest", str(tmp_path)]
    assert export.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Retrieval" in err[0], err
    assert "has no streaming step" in err[0], err
    assert "export the whole-pair program: drop --step" in err[0], err
    assert not list(tmp_path.iterdir())


def test_files_it_did_not_write_and_a_full_disk_are_one_line(run, tmp_path, capsys, monkeypatch):
    """The command silently replaced a `model.stablehlo` it did not write, and a full disk
    was a traceback that could leave an artifact without its manifest (issue 27): now one
    `error:` line each, the files there untouched; `--overwrite` replaces them."""
    from eqx_lru.export import _files

    artifact = tmp_path / "model.stablehlo"
    artifact.write_bytes(b"the user's model")
    argv = ["--run", str(run[0]), "--format", "stablehlo", "--dest", str(tmp_path)]
    assert export.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "has no manifest beside it" in err[0] and "--overwrite" in err[0], err
    assert artifact.read_bytes() == b"the user's model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.stablehlo"]

    assert export.main([*argv, "--overwrite"]) == 0
    manifest = json.loads((tmp_path / "model.stablehlo.json").read_text())
    written = artifact.read_bytes()
    assert manifest["sha256"] == hashlib.sha256(written).hexdigest()

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_files, "_write_fd", full)
    capsys.readouterr()
    assert export.main(argv) == 2  # its own pair now: replaced without --overwrite, but
    err = capsys.readouterr().err.strip().splitlines()  # the disk is full
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "No space left on device" in err[0] and "untouched" in err[0], err
    assert artifact.read_bytes() == written
    assert json.loads((tmp_path / "model.stablehlo.json").read_text()) == manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.stablehlo", "model.stablehlo.json"]

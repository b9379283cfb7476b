"""`--core rglru` in the LRA trainer (its record in `experiments/lra/cores.py`): a run on a
small generated ListOps set trains, stops and resumes into the uninterrupted run bit for
bit, and its best weights export (StableHLO, whole sequence and step; ONNX, the whole
sequence) to programs that compute the model. The record's derived and checked settings:
`d_state` is `d_model`."""

import json
from pathlib import Path
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from listops_argv import listops_argv

import eqx_lru
from experiments import export
from experiments.lra import cores, synthetic, train
from experiments.lra.config import ConfigError, RunConfig, new_run
from experiments.runs.metrics import read_records

pytestmark = pytest.mark.usefixtures("restore_backend_env")


@pytest.fixture(scope="module")
def listops(tmp_path_factory):
    root = tmp_path_factory.mktemp("lra")
    synthetic.write_listops(root, (40, 12, 12), seed=2, min_length=8, max_length=30)
    return root


def _losses(out):
    records = read_records(Path(out) / "metrics.jsonl")
    return [(r["split"], r["step"], r["loss"]) for r in records if r["split"] != "test"]


def test_settings_follow_the_record():
    config = RunConfig.defaults("listops", "rglru")
    assert config.d_state == config.d_model  # derived: the state has the input's width
    assert (config.r_min, config.r_max) == (0.9, 0.999)  # Griffin's ring
    assert new_run("listops", {"core": "rglru", "d_model": 16}).d_state == 16
    with pytest.raises(ConfigError, match="--d-state \\(8\\) must equal --d-model \\(16\\)"):
        new_run("listops", {"core": "rglru", "d_model": 16, "d_state": 8})
    with pytest.raises(ConfigError, match="--r-min > 0"):
        new_run("listops", {"core": "rglru", "r_min": 0.0})
    assert "rglru" in cores.names()


@pytest.mark.slow
def test_trains_resumes_and_exports(listops, tmp_path):
    form = "real"  # the form every exporter takes
    argv = listops_argv(listops, tmp_path / "run", "--core", "rglru", "--form", form,
                        steps=4, d_state=8, eval_every=2)  # fmt: skip
    whole = listops_argv(listops, tmp_path / "whole", "--core", "rglru", "--form", form,
                         steps=4, d_state=8, eval_every=2)  # fmt: skip
    assert train.run(argv + ["--stop-at", "2"])["status"] == "stopped"
    resumed = train.run(argv + ["--resume"])
    uninterrupted = train.run(whole)
    assert (resumed["status"], resumed["step"], resumed["core"]) == ("finished", 4, "rglru")
    assert _losses(tmp_path / "run") == _losses(tmp_path / "whole")
    assert (tmp_path / "run" / "last.eqx").read_bytes() == (
        tmp_path / "whole" / "last.eqx"
    ).read_bytes()
    assert uninterrupted["core"] == "rglru"
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (saved["core"], saved["form"], saved["d_state"]) == ("rglru", form, 8)

    loaded = export.load_run(tmp_path / "run")
    model, state = cast(eqx_lru.LRUModel, loaded.model), loaded.state
    sequence = export.export_run(tmp_path / "run", "stablehlo")
    step = export.export_run(tmp_path / "run", "stablehlo", step=True)
    x = np.random.default_rng(0).integers(0, loaded.in_size, (2, 9)).astype(np.int32)
    length = np.array([9, 5], np.int32)
    program = jax.export.deserialize(bytearray(sequence.read_bytes()))
    got = np.asarray(program.call(x, length)[0])
    call = lambda x, n: model(x, state, length=n, inference=True)[0]  # noqa: E731
    np.testing.assert_allclose(got, jax.vmap(call)(x, length), rtol=1e-5, atol=1e-6)
    stepper = jax.export.deserialize(bytearray(step.read_bytes()))
    carry = [jnp.zeros((2, *a.shape[1:]), a.dtype) for a in stepper.in_avals[1:]]
    for t in range(x.shape[1]):
        y, *carry = stepper.call(x[:, t], *carry)
    full = jax.vmap(call)(x, np.full(2, 9, np.int32))
    np.testing.assert_allclose(np.asarray(y), full, rtol=1e-5, atol=1e-6)  # pyright: ignore[reportPossiblyUnboundVariable]

    ort = pytest.importorskip("onnxruntime")
    onnx_path = export.export_run(tmp_path / "run", "onnx")
    manifest = json.loads(onnx_path.with_name(onnx_path.name + ".json").read_text())
    zeros = [np.zeros((2, *c["shape"][1:]), c["dtype"]) for c in manifest["carry"]]
    names = [i["name"] for i in manifest["inputs"]]
    session = ort.InferenceSession(onnx_path.read_bytes(), providers=["CPUExecutionProvider"])
    got = session.run(None, dict(zip(names, [x, length, *zeros], strict=True)))[0]
    np.testing.assert_allclose(got, jax.vmap(call)(x, length), rtol=1e-5, atol=1e-5)

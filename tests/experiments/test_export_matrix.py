"""Every trainable core of the LRA trainer exports to every format it can run in, or is refused
in one line (issue 27): each core of `experiments/lra/cores.py` in each of its forms x
{stablehlo, onnx} x {sequence, step}, through `python -m experiments.export` on a run folder
as the trainer writes it (tiny ListOps models: depth 1, H = 8, N = 6 where the core allows,
causal). The artifact, read back, equals the run's model as trained (its own scan method;
S4D as an FFT convolution). S4D's whole sequence used to end in a 60-line traceback in both
formats (its FFT needs a concrete length); a core with no real form is refused for ONNX with
one line naming the core, the format and the reason."""

import functools
import importlib.util
import itertools
import json

import jax
import numpy as np
import pytest

import eqx_lru
import eqx_lru.ablation
from experiments import export
from experiments.lra import cores, steps
from experiments.lra.config import RunConfig
from experiments.runs import checkpoint as ckpt

VOCAB, CLASSES, TASK = 15, 10, "listops"
CASES = [(core, form) for core in cores.names() for form in cores.get_core(core).forms]


def _config(core: str, form: str) -> RunConfig:
    config = RunConfig.defaults(TASK, core)
    sizes = dict(form=form, depth=1, d_model=8, d_state=6, bidirectional=False, run_id="c" * 32)
    sizes.update(cores.get_core(core).derive(sizes))  # the RG-LRU: d_state is d_model
    return config.replace(**sizes, **({} if config.blocks is None else {"blocks": 1}))


def _write_run(folder, config: RunConfig):
    """`best.*` and `config.json` as the trainer writes them at a validation."""
    spec = steps.TaskSpec(TASK, CLASSES, 64, VOCAB, None)
    model, state = steps.build_model(config, spec, jax.random.PRNGKey(5))
    meta = {"step": 3, "val_accuracy": 0.5, "val_loss": 1.0, "config": config.to_json()}
    ckpt.save(folder, "best", (model, state), {**meta, "run_id": config.run_id})
    (folder / "config.json").write_text(json.dumps(config.to_json()))
    return model, state


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One run folder per (core, form), written when first asked for."""
    cache = {}

    def get(core, form):
        if (core, form) not in cache:
            folder = tmp_path_factory.mktemp(f"{core}-{form}")
            cache[core, form] = (folder, *_write_run(folder, _config(core, form)))
        return cache[core, form]

    return get


def _run(artifact, manifest, *inputs):
    if manifest["format"] == "stablehlo":
        program = jax.export.deserialize(bytearray(artifact.read_bytes()))
        return [np.asarray(o) for o in program.call(*inputs)]
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(artifact), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs, strict=True)))


def _zeros(manifest, batch):
    return [
        np.zeros([batch if d == "batch" else d for d in c["shape"]], c["dtype"])
        for c in manifest["carry"] or []
    ]


def _reference(model, state, x, length):
    """The run's model as trained: its call and one step from the start of a stream."""
    with jax.default_matmul_precision("highest"):
        call = jax.vmap(lambda x, n: model(x, state, length=n, inference=True)[0])
        step = jax.vmap(lambda t: model.step(model.init_carry(), t, state)[1])
        return {"sequence": np.asarray(call(x, length)), "step": np.asarray(step(x[:, 0]))}


@pytest.mark.slow
@pytest.mark.parametrize("core, form", CASES, ids=[f"{c}-{f}" for c, f in CASES])
def test_every_core_exports_to_every_format(core, form, runs, tmp_path):
    folder, model, state = runs(core, form)
    x = np.random.default_rng(1).integers(0, VOCAB, (2, 5)).astype(np.int32)
    length = np.array([5, 3], np.int32)
    expected = _reference(model, state, x, length)
    formats = ["stablehlo"] + (["onnx"] if importlib.util.find_spec("onnx") else [])
    for fmt, program in itertools.product(formats, ("sequence", "step")):
        argv = ["--run", str(folder), "--format", fmt, "--dest", str(tmp_path)]
        assert export.main([*argv, *(["--step"] if program == "step" else [])]) == 0
        artifact = tmp_path / (("model" if program == "sequence" else "step") + f".{fmt}")
        manifest = json.loads(artifact.with_name(artifact.name + ".json").read_text())
        assert manifest["model"]["core"] == core and manifest["model"]["form"] == form
        inputs = (x, length) if program == "sequence" else (x[:, 0],)
        (got, *_) = _run(artifact, manifest, *inputs, *_zeros(manifest, 2))
        np.testing.assert_allclose(got, expected[program], rtol=1e-4, atol=1e-5)


def test_a_core_without_a_real_form_is_refused_for_onnx_in_one_line(tmp_path, capsys):
    """A trainer core whose complex state has no real form (the ablation's diagonal RNN,
    registered as the cores docstring shows): StableHLO exports it, ONNX refuses it in one
    line that names the core, the format and the reason."""
    pytest.importorskip("onnx")
    make = functools.partial(eqx_lru.ablation.DiagonalRNN, method="sequential")
    cores.register(
        cores.Core(name="diag_rnn", label="diagonal RNN", factory=lambda c, m: make, scan=False)
    )
    try:
        _write_run(tmp_path, _config("diag_rnn", "complex"))
        argv = ["--run", str(tmp_path), "--format", "onnx", "--step"]
        assert export.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --core diag_rnn "), err
        assert "--format onnx" in err[0] and "no real form" in err[0], err
        assert not (tmp_path / "export").exists()
        assert export.main([*argv[:3], "stablehlo", "--step"]) == 0
    finally:
        cores.unregister("diag_rnn")

"""`eqx_lru.export` of RG-LRU models and of models with time steps (`dt=True`): the
StableHLO whole-sequence and step programs read back (`jax.export.deserialize`) and the
ONNX ones (real form, run by onnxruntime where the `export` extra is installed) equal the
model's call and `step` with `dt`, for other batch sizes and lengths than any traced; the
manifest names the steps; models whose cores take no steps and pairs are refused.

Sizes are distinct: IN 3, OUT 5, H = N 6 (the RG-LRU's state has its input's width),
depth 2, lengths 7 and 11, batches 2 and 3."""

import functools

import equinox as eqx
import jax
import numpy as np
import pytest

import eqx_lru
import eqx_lru.export as ex

IN, OUT, H, DEPTH = 3, 5, 6, 2


@pytest.fixture(scope="module")
def model():
    core = functools.partial(eqx_lru.RGLRU, phase=True, r_min=0.5, r_max=0.95)
    block = functools.partial(eqx_lru.LRUBlock, core=core, norm="layer")
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        IN, OUT, H, H, DEPTH, pooling=None, block=block, key=jax.random.PRNGKey(0)
    )


def _inputs(batch, length, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, length, IN)).astype(np.float32)
    dt = rng.uniform(0.2, 3.0, size=(batch, length)).astype(np.float32)
    lengths = np.array([length, length - 3, 1][:batch], np.int32)
    return x, lengths, dt


@eqx.filter_jit
def _expected(model, state, x, lengths, dt):
    """The model's call with `dt` on each padded row, and `step` with each position's step
    over the rows: outputs at every position, and the final carry."""

    def call(x, n, dt):
        return model(x, state, length=n, dt=dt, inference=True)[0]

    def stream(x, dt):
        step = lambda c, xs: model.step(c, xs[0], state, dt=xs[1])  # noqa: E731
        return jax.lax.scan(step, model.init_carry(), (x, dt))

    carry, ys = jax.vmap(stream)(x, dt)
    return jax.vmap(call)(x, lengths, dt), ys, jax.tree_util.tree_leaves(carry)


def _stepped(run, x, dt, carry_specs):
    """`run(x_t, dt_t, *carry) -> (y_t, *carry)` over every position from zero carries."""
    carry = [np.zeros((x.shape[0], *s), d) for s, d in carry_specs]
    ys = []
    for t in range(x.shape[1]):
        y, *carry = run(x[:, t], dt[:, t], *carry)
        ys.append(np.asarray(y))
    return np.stack(ys, axis=1), [np.asarray(c) for c in carry]


def test_stablehlo_programs_take_dt(model):
    model, state = model
    sequence = ex.export(model, state, format="stablehlo", program="sequence", dt=True)
    step = ex.export(model, state, format="stablehlo", program="step", dt=True)
    names = [i["name"] for i in sequence.manifest["inputs"]]
    assert (
        names == ["x", "length", "dt"]
        and "Time steps must be positive" in (sequence.manifest["notes"])
    )
    assert [i["name"] for i in step.manifest["inputs"]][:2] == ["x_t", "dt_t"]
    assert sequence.manifest["inputs"][2]["shape"] == ["batch", "length"]
    program = jax.export.deserialize(bytearray(sequence.data))
    stepper = jax.export.deserialize(bytearray(step.data))
    specs = [(tuple(c["shape"][1:]), np.dtype(c["dtype"])) for c in step.manifest["carry"]]
    for batch, length, seed in ((2, 7, 1), (3, 11, 2)):
        x, lengths, dt = _inputs(batch, length, seed)
        calls, streamed, carry = _expected(model, state, x, lengths, dt)
        got = np.asarray(program.call(x, lengths, dt)[0])
        np.testing.assert_allclose(got, calls, rtol=1e-5, atol=1e-6)
        ys, final = _stepped(jax.jit(stepper.call), x, dt, specs)
        np.testing.assert_allclose(ys, streamed, rtol=1e-5, atol=1e-6)
        for a, b in zip(final, carry, strict=True):
            np.testing.assert_allclose(a, np.asarray(b), rtol=1e-5, atol=1e-6)
    # A step that is not positive and finite at a valid position: that row is NaN (the
    # library raises there); at a pad it is ignored, as the library ignores it.
    x, lengths, dt = _inputs(3, 7, 3)
    dt[0, 2], dt[1, 6] = -1.0, np.nan  # row 1's length is 4: position 6 is a pad
    got = np.asarray(program.call(x, lengths, dt)[0])
    assert np.isnan(got[0]).all() and np.isfinite(got[1:]).all()
    zeros = [np.zeros((3, *s), d) for s, d in specs]
    y, *_ = stepper.call(x[:, 0], np.array([1.0, 0.0, np.inf], np.float32), *zeros)
    assert np.isfinite(np.asarray(y[0])).all() and np.isnan(np.asarray(y[1:])).all()
    rules = {c["check"]: c["rule"] for c in sequence.manifest["checked"]}
    assert rules["dt"] == "dt > 0 and finite at every position before length"
    assert {c["check"]: c["rule"] for c in step.manifest["checked"]}["dt"] == "dt_t > 0 and finite"


def test_onnx_programs_take_dt_in_the_real_form(model):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    model, state = model  # complex states; ONNX exports the real form, the same function
    sequence = ex.export(model, state, format="onnx", program="sequence", dt=True)
    step = ex.export(model, state, format="onnx", program="step", dt=True)
    assert sequence.manifest["exported_form"] == "real"
    run = lambda data: ort.InferenceSession(data, providers=["CPUExecutionProvider"])  # noqa: E731
    loop, stepper = run(sequence.data), run(step.data)
    carry = [(tuple(c["shape"][1:]), np.dtype(c["dtype"])) for c in step.manifest["carry"]]
    names = [i["name"] for i in step.manifest["inputs"]]
    loop_names = [i["name"] for i in sequence.manifest["inputs"]]
    for batch, length, seed in ((2, 7, 1), (3, 11, 2)):
        x, lengths, dt = _inputs(batch, length, seed)
        calls, streamed, _ = _expected(model, state, x, lengths, dt)
        zeros = [np.zeros((batch, *s), d) for s, d in carry]
        got = loop.run(None, dict(zip(loop_names, [x, lengths, dt, *zeros], strict=True)))[0]
        np.testing.assert_allclose(got, calls, rtol=1e-5, atol=1e-5)

        def one(*inputs):
            return stepper.run(None, dict(zip(names, inputs, strict=True)))

        ys, _ = _stepped(one, x, dt, carry)
        np.testing.assert_allclose(ys, streamed, rtol=1e-5, atol=1e-5)


def test_refusals():
    block = functools.partial(eqx_lru.LRUBlock, core=eqx_lru.baselines.S4D, norm="layer")
    s4d, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        IN, OUT, H, 4, 1, pooling=None, block=block, key=jax.random.PRNGKey(1)
    )
    with pytest.raises(ex.ExportError, match="S4D takes none"):
        ex.export(s4d, state, program="step", dt=True)
    encoder = eqx_lru.LRUModel(IN, None, H, 4, 1, key=jax.random.PRNGKey(2))
    pair = eqx_lru.LRURetrievalModel(encoder, 2, key=jax.random.PRNGKey(3))
    with pytest.raises(ex.ExportError, match="not supported for program='pair'"):
        ex.export(pair, eqx.nn.State(pair), program="pair", dt=True)

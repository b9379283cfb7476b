"""`eqx_lru.export` of RG-LRU models and of models with time steps (`dt=True`): in every
format (`conformance.FORMATS`: StableHLO read back with `jax.export.deserialize`, ONNX in
the real form run by onnxruntime where the `export` extra is installed) the whole-sequence
and step programs equal the model's call and `step` with `dt`, for other batch sizes and
lengths than any traced; the manifest names the steps; models whose cores take no steps
and pairs are refused.

Sizes are distinct: IN 3, OUT 5, H = N 6 (the RG-LRU's state has its input's width),
depth 2, lengths 7 and 11, batches 2 and 3."""

import functools
from typing import Any

import equinox as eqx
import jax
import numpy as np
import pytest
from conformance import FORMATS, export_formats, export_session, zero_carry

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


@pytest.mark.parametrize("fmt", export_formats())
def test_programs_take_dt(fmt, model):
    """Both programs with `dt`, read back as a user of the format reads them (ONNX: the
    real form, the same function), equal the model's call and `step` with `dt`."""
    for module in FORMATS[fmt].needs:
        pytest.importorskip(module)
    model, state = model
    sequence = ex.export(model, state, format=fmt, program="sequence", dt=True)
    step = ex.export(model, state, format=fmt, program="step", dt=True)
    names = [i["name"] for i in sequence.manifest["inputs"]]
    assert (
        names[:3] == ["x", "length", "dt"]
        and "Time steps must be positive" in (sequence.manifest["notes"])
    )
    assert names[3:] == [c["name"] for c in sequence.manifest["carry"] or []]
    assert [i["name"] for i in step.manifest["inputs"]][:2] == ["x_t", "dt_t"]
    assert sequence.manifest["inputs"][2]["shape"] == ["batch", "length"]
    program = export_session(fmt, sequence.data)
    stepper = export_session(fmt, step.data)
    specs = [(tuple(c["shape"][1:]), np.dtype(c["dtype"])) for c in step.manifest["carry"]]
    same_form = step.manifest["exported_form"] == "complex"  # the model's: its carry too
    tolerance: dict[str, Any] = dict(rtol=1e-5, atol=FORMATS[fmt].atol)
    for batch, length, seed in ((2, 7, 1), (3, 11, 2)):
        x, lengths, dt = _inputs(batch, length, seed)
        calls, streamed, carry = _expected(model, state, x, lengths, dt)
        got = program(x, lengths, dt, *zero_carry(sequence.manifest, batch))[0]
        np.testing.assert_allclose(got, calls, **tolerance)
        ys, final = _stepped(stepper, x, dt, specs)
        np.testing.assert_allclose(ys, streamed, **tolerance)
        for a, b in zip(final, carry, strict=True) if same_form else ():
            np.testing.assert_allclose(a, np.asarray(b), **tolerance)
    # A step that is not positive and finite at a valid position: that row is NaN (the
    # library raises there); at a pad it is ignored, as the library ignores it.
    x, lengths, dt = _inputs(3, 7, 3)
    dt[0, 2], dt[1, 6] = -1.0, np.nan  # row 1's length is 4: position 6 is a pad
    got = program(x, lengths, dt, *zero_carry(sequence.manifest, 3))[0]
    assert np.isnan(got[0]).all() and np.isfinite(got[1:]).all()
    zeros = [np.zeros((3, *s), d) for s, d in specs]
    y, *_ = stepper(x[:, 0], np.array([1.0, 0.0, np.inf], np.float32), *zeros)
    assert np.isfinite(y[0]).all() and np.isnan(y[1:]).all()
    rules = {c["check"]: c["rule"] for c in sequence.manifest["checked"]}
    assert (
        rules["dt"]
        == "dt >= 1.17549435e-38 (a normal number) and finite at every position before length"
    )
    assert {c["check"]: c["rule"] for c in step.manifest["checked"]}[
        "dt"
    ] == "dt_t >= 1.17549435e-38 (a normal number) and finite"


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

"""Exported programs check what the library checks (issue 27): a `length` of 0 or beyond
the padded length, or a token id outside the vocabulary at a valid position, gives NaN in
every floating-point output of that row, the same in StableHLO and ONNX. Before, the
same model gave all-zero logits from ONNX (class 0, which looks like an answer) and NaN
from StableHLO, and an out-of-range id was silently clamped to a real token.

One tiny `LRUModel` (V = 7, H = 6, N = 4, one block, mean pooling), its sequence and step
programs exported once per format (module fixture); valid rows equal JAX's call."""

import equinox as eqx
import jax
import numpy as np
import pytest
from conformance import FORMATS, export_formats, export_session, zero_carry

import eqx_lru
import eqx_lru.export

VOCAB, CLASSES = 7, 3


@pytest.fixture(scope="module")
def model():
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, CLASSES, 6, 4, 1, encoder="embedding", key=jax.random.PRNGKey(0)
    )


def _runner(exported):
    """`(*inputs) -> outputs` of the artifact, read back as a user of the format would."""
    return export_session(exported.format.name, exported.data)


def _zeros(exported, batch):
    return zero_carry(exported.manifest, batch)


def _export(model, fmt, program):
    for module in FORMATS[fmt].needs:
        pytest.importorskip(module)
    return eqx_lru.export.export(*model, format=fmt, program=program)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", export_formats(slow=True))
def test_invalid_rows_are_nan_and_valid_rows_exact(fmt, model):
    exported = _export(model, fmt, "sequence")
    x = np.random.default_rng(0).integers(0, VOCAB, (7, 9)).astype(np.int32)
    length = np.array([9, 0, 10, 5, 5, -3, 1], np.int32)
    x[3, 2] = VOCAB  # an id out of range at a valid position: invalid
    x[4, 7] = -1  # ... at a pad (past length 5): the row is valid
    out, *carry = _runner(exported)(x, length, *_zeros(exported, 7))
    invalid = np.array([False, True, True, True, False, True, False])
    assert np.isnan(out[invalid]).all() and np.isfinite(out[~invalid]).all()
    for c in carry:  # ONNX's loop returns the carry: NaN for the invalid rows too
        if c.dtype.kind == "f":
            assert np.isnan(c[invalid]).all() and np.isfinite(c[~invalid]).all()
    m, state = model
    call = jax.vmap(lambda x, n: m(x, state, length=n, inference=True)[0])
    with jax.default_matmul_precision("highest"):
        expected = np.asarray(call(np.where(x < 0, 0, x)[~invalid], length[~invalid]))
    np.testing.assert_allclose(out[~invalid], expected, rtol=1e-5, atol=1e-5)
    checked = {c["check"]: c for c in exported.manifest["checked"]}
    assert set(checked) == {"length", "token_ids"} and exported.manifest["unchecked"] == []
    assert "NaN" in checked["length"]["on_failure"]


@pytest.mark.parametrize("fmt", export_formats(slow=True))
def test_a_stream_fed_an_invalid_token_is_nan_until_reset(fmt, model):
    exported = _export(model, fmt, "step")
    run = _runner(exported)
    carry = _zeros(exported, 2)
    y, *carry = run(np.array([3, 1], np.int32), *carry)
    assert np.isfinite(y).all()
    y, *carry = run(np.array([VOCAB, 2], np.int32), *carry)  # stream 0: an id out of range
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()
    y, *carry = run(np.array([3, 4], np.int32), *carry)  # stream 0 stays NaN
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all()
    fresh = [z[:1] for z in _zeros(exported, 1)]  # its carry reset: a new stream
    y, *_ = run(np.array([3], np.int32), *fresh)
    assert np.isfinite(y).all()
    assert [c["check"] for c in exported.manifest["checked"]] == ["token_ids"]
    assert exported.manifest["checked"][0]["rule"] == f"0 <= x_t < {VOCAB}"

"""Every core of the library exports to every format (`conformance.FORMATS`) or is
refused in one line (issue 27). The LRA trainer's cores are covered through its command
(tests/experiments/test_export_matrix.py); here the RG-LRU, which the trainer does not
train yet, with complex states (`phase=True`: StableHLO keeps them, ONNX exports its real
2x2 form), in both formats and both programs, read back equal to JAX (its variant with
real states runs the same gates; one variant keeps the suite's time down). Its ONNX
export used to stop at `expm1`, which ONNX lacks. A model that cannot be traced with a
symbolic length is one `ExportError` line naming the format, the program and the reason
(it was a traceback from deep inside JAX)."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import FORMATS, export_formats, export_session, zero_carry

import eqx_lru
import eqx_lru.export
from eqx_lru.export import ExportError, Tokens

VOCAB, CLASSES = 7, 3


@pytest.mark.slow
@pytest.mark.parametrize("fmt", export_formats())
def test_rglru_exports_to_every_format(fmt):
    _exports_and_reads_back(fmt, functools.partial(eqx_lru.RGLRU, phase=True))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", export_formats())
def test_selective_lru_exports_to_every_format(fmt):
    """The complex form: StableHLO keeps its complex state, ONNX exports its real form
    (`RealSelectiveLRU.from_complex`), so both forms are exported."""
    _exports_and_reads_back(fmt, eqx_lru.ComplexSelectiveLRU)


def _exports_and_reads_back(fmt, core):
    for module in FORMATS[fmt].needs:
        pytest.importorskip(module)
    block = functools.partial(eqx_lru.LRUBlock, core=core)
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, CLASSES, 8, 8, 1, encoder="embedding", block=block, key=jax.random.PRNGKey(0)
    )
    x = np.random.default_rng(0).integers(0, VOCAB, (2, 6)).astype(np.int32)
    length = np.array([6, 4], np.int32)
    with jax.default_matmul_precision("highest"):
        call = jax.vmap(lambda x, n: model(x, state, length=n, inference=True)[0])
        step = jax.vmap(lambda t: model.step(model.init_carry(), t, state)[1])
        expected = {"sequence": np.asarray(call(x, length)), "step": np.asarray(step(x[:, 0]))}
    for program in ("sequence", "step"):
        exported = eqx_lru.export.export(model, state, format=fmt, program=program)
        inputs = (x, length) if program == "sequence" else (x[:, 0],)
        run = export_session(fmt, exported.data)
        got = run(*inputs, *zero_carry(exported.manifest, 2))[0]
        np.testing.assert_allclose(got, expected[program], rtol=1e-4, atol=1e-5)


class _FixedLength(eqx.Module):
    """A model whose call needs a concrete length (a NumPy array of that size); its step
    is fine, so ONNX's loop over it reaches the call too (for the output's shape)."""

    embedding: eqx.nn.Embedding

    def __call__(self, x, state, *, length=None, inference=None, key=None):
        ones = np.ones(x.shape[0], np.float32)  # not traceable with a symbolic length
        return jax.vmap(self.embedding)(x).sum(0) * ones.sum(), state

    def init_carry(self):
        return jnp.zeros(4)

    def step(self, carry, x_t, state):
        carry = carry + self.embedding(x_t)
        return carry, carry


@pytest.mark.parametrize("fmt", export_formats())
def test_a_model_that_needs_a_concrete_length_is_refused_in_one_line(fmt):
    model = _FixedLength(eqx.nn.Embedding(VOCAB, 4, key=jax.random.PRNGKey(0)))
    with pytest.raises(ExportError) as e:
        eqx_lru.export.export(model, format=fmt, reads=Tokens(VOCAB))
    message = str(e.value)
    assert "\n" not in message and f"format {fmt!r}" in message, message
    assert "'sequence' program of this model (_FixedLength)" in message, message
    assert "symbolic batch and length failed (TypeError:" in message, message
    assert "the symbolic dimension `length`" in message and "jnp, not np" in message, message

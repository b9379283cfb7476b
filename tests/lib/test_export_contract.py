"""What `eqx_lru.export.export` takes (issue 34): the manifest's own entries, which
`metadata=` cannot replace and `write` checks; notes written from the manifest's lists;
the batch-norm state asked for in one line; and the model contract of the `sequence`
program, the same in every format (`conformance.FORMATS`): the call traced at a symbolic
length with `length=` given, a model that indexes with `x.shape[0] - 1` refused in one
line naming the symbolic length and what to write instead.

The library's own checks of argument kinds are called through `inspect.unwrap`, as a user
meets them (the suite's jaxtyping import hook would refuse a wrong kind first)."""

import inspect
import json

import equinox as eqx
import jax
import numpy as np
import pytest
from conformance import export_formats, export_session, zero_carry

import eqx_lru
import eqx_lru.export
from eqx_lru.export import ExportError, Tokens

VOCAB, CLASSES, D_MODEL, D_STATE = 9, 3, 6, 5

#: The manifest's own entries (what `export` writes besides `metadata`).
OWN = (
    "format", "program", "artifact", "bytes", "sha256", "inputs", "outputs", "carry",
    "vocab_size", "in_features", "classes", "exported_form", "notes", "checked",
    "unchecked", "eqx_lru", "jax",
)  # fmt: skip

export = inspect.unwrap(eqx_lru.export.export)


@pytest.fixture(scope="module")
def model():
    """A classifier of token ids with batch norm (the default block): it keeps state."""
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, CLASSES, D_MODEL, D_STATE, 1, encoder="embedding", key=jax.random.PRNGKey(0)
    )


@pytest.fixture(scope="module")
def step(model):
    return eqx_lru.export.export(*model, program="step", metadata={"task": "toy"})


@pytest.mark.parametrize("key", OWN)
def test_metadata_cannot_replace_the_manifests_own_entries(key, model):
    """`metadata={"sha256": ...}` silently replaced the manifest's own entry, after which
    `write` refused the files it had written itself."""
    with pytest.raises(ExportError) as e:
        eqx_lru.export.export(*model, metadata={"task": "toy", key: "mine"})
    message = str(e.value)
    assert "\n" not in message and f"`metadata` key {key!r}" in message, message


def test_the_manifests_own_entries_are_checked_by_write(step, tmp_path):
    assert set(step.manifest) == {*OWN, "task"} and step.manifest["task"] == "toy"
    path = tmp_path / "step.stablehlo"
    eqx_lru.export.write(step, path)
    eqx_lru.export.write(step, path)  # its own pair: replaced without overwrite
    assert json.loads((tmp_path / "step.stablehlo.json").read_text())["task"] == "toy"
    for key, value in (("notes", "token ids are not checked"), ("checked", [])):
        edited = eqx_lru.export.Exported(
            step.data, {**step.manifest, key: value}, step.format, step.program
        )
        edited._own = step._own
        with pytest.raises(ExportError, match=rf"`exported.manifest\[{key!r}\]` is not what"):
            eqx_lru.export.write(edited, tmp_path / "edited.stablehlo")
    stale = eqx_lru.export.Exported(b"other bytes", dict(step.manifest), step.format, step.program)
    with pytest.raises(ExportError, match=r"`exported.manifest\['sha256'\]` is not the SHA-256"):
        eqx_lru.export.write(stale, tmp_path / "stale.stablehlo")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step.stablehlo", "step.stablehlo.json"]


def _notes_follow_the_lists(manifest):
    notes = manifest["notes"]
    for c in manifest["checked"]:
        assert f"({c['rule']}): checked" in notes, (c, notes)
    for c in manifest["unchecked"]:
        assert f"Not checked by the program: {c['check']}" in notes, (c, notes)
    if not manifest["unchecked"]:
        assert "not checked" not in notes.lower(), notes
    assert ("The carry starts at zeros" in notes) == bool(manifest["carry"])


def test_notes_are_written_from_the_manifests_lists(model, step):
    """The LM command's note said token ids were "not checked" while `checked` listed
    them: the notes are the library's only (`metadata` cannot set them), written from
    `checked`, `unchecked` and the carry."""
    sequence = eqx_lru.export.export(*model)
    assert [c["check"] for c in sequence.manifest["checked"]] == ["length", "token_ids"]
    _notes_follow_the_lists(sequence.manifest)
    _notes_follow_the_lists(step.manifest)
    from eqx_lru.export._manifest import notes_of

    checked = [{"check": "dt", "rule": "dt > 0", "on_failure": "NaN"}]
    unchecked = [{"check": "num_segments", "message": "at most 2 sequences"}]
    program = eqx_lru.export.Program("pair", lambda x: x, [], ["out"])
    notes = notes_of(program, checked, unchecked)
    _notes_follow_the_lists(
        {"notes": notes, "checked": checked, "unchecked": unchecked, "carry": None}
    )
    assert "x[:, 1]" in notes and "Time steps must be positive" in notes


def test_the_state_of_a_batch_norm_model_is_asked_for_in_one_line(model):
    """`export(model, None)` answered with equinox's "Do not call eqx.nn.State(model)
    directly"; a state of the wrong kind was an AttributeError."""
    m, _ = model
    with pytest.raises(ExportError) as e:
        eqx_lru.export.export(m, None)
    message = str(e.value)
    assert "\n" not in message and "`state`" in message and "make_with_state" in message
    with pytest.raises(TypeError, match="`state` must be the eqx.nn.State made with the model"):
        export(m, {"running": 0})
    with pytest.raises(TypeError, match="`state` must be the eqx.nn.State made with the model"):
        inspect.unwrap(eqx_lru.export.prepare)(m, None)  # was an AttributeError
    # The state of another model (a block's): a KeyError from inside equinox before.
    _, other = eqx.nn.make_with_state(eqx_lru.LRUBlock)(D_MODEL, D_STATE, key=jax.random.key(3))
    with pytest.raises(ExportError) as e:
        eqx_lru.export.export(m, other)
    message = str(e.value)
    assert "\n" not in message and "`state` holds nothing for this LRUModel's state" in message
    # An id that an int32 cannot hold: an OverflowError while tracing before.
    with pytest.raises(ValueError, match=r"`vocab_size` must be a positive integer up to 2\*\*31"):
        Tokens(2**31)


class Last(eqx.Module):
    """A classifier written by hand, as a newcomer wrote it: the head reads the last
    position, `h[x.shape[0] - 1]` when no length is given (`fallback`), or always
    (`always`, which no symbolic length can take)."""

    embedding: eqx.nn.Embedding
    block: eqx_lru.LRUBlock
    head: eqx.nn.Linear
    always: bool = eqx.field(static=True)

    def __init__(self, always, *, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.embedding = eqx.nn.Embedding(VOCAB, D_MODEL, key=k1)
        self.block = eqx_lru.LRUBlock(D_MODEL, D_STATE, core="real", norm="layer", key=k2)
        self.head = eqx.nn.Linear(D_MODEL, CLASSES, key=k3)
        self.always = always

    def __call__(self, x, state, *, length=None, inference=None, key=None):
        h, state = self.block(jax.vmap(self.embedding)(x), state, length=length)
        last = x.shape[0] if length is None or self.always else length
        return self.head(h[last - 1]), state

    def init_carry(self):
        return self.block.init_carry()

    def step(self, carry, x_t, state):
        carry, h = self.block.step(carry, self.embedding(x_t), state)
        return carry, self.head(h)


@pytest.mark.parametrize("fmt", export_formats())
def test_indexing_with_the_symbolic_length_is_refused_in_one_line(fmt):
    """A bare `IndexError ... Got length - 1` from inside JAX before, in every format."""
    model = Last(True, key=jax.random.PRNGKey(1))
    with pytest.raises(ExportError) as e:
        eqx_lru.export.export(model, format=fmt, reads=Tokens(VOCAB))
    message = str(e.value)
    assert "\n" not in message and "Got length - 1" in message, message
    assert "the symbolic dimension `length`" in message and "`h[-1]`" in message, message
    assert "not `h[x.shape[0] - 1]`" in message, message


@pytest.mark.slow
@pytest.mark.parametrize("fmt", export_formats())
def test_the_newcomers_model_exports_as_sequence(fmt):
    """ONNX's sequence program called the model with `length=None` to read its output's
    shape, so a model that falls back to `x.shape[0] - 1` failed there (StableHLO, which
    passes `length`, worked): both formats call it as the sequence program does."""
    model = Last(False, key=jax.random.PRNGKey(1))
    exported = eqx_lru.export.export(model, format=fmt, reads=Tokens(VOCAB))
    x = np.random.default_rng(0).integers(0, VOCAB, (3, 8)).astype(np.int32)
    length = np.array([8, 5, 1], np.int32)
    run = export_session(fmt, exported.data)
    got = run(x, length, *zero_carry(exported.manifest, 3))[0]
    call = jax.vmap(lambda x, n: model(x, eqx.nn.State(model), length=n)[0])
    np.testing.assert_allclose(got, call(x, length), rtol=1e-5, atol=1e-5)


class _Bare(Last):
    """Its call returns the output alone, not `(out, state)`."""

    def __call__(self, x, state, *, length=None, inference=None, key=None):  # pyright: ignore[reportIncompatibleMethodOverride]
        return super().__call__(x, state, length=length)[0]


class _Swapped(Last):
    """Its step returns `(y_t, carry)`, not `(carry, y_t)`."""

    def step(self, carry, x_t, state):
        carry, y_t = super().step(carry, x_t, state)
        return y_t, carry


@pytest.mark.parametrize("fmt", export_formats())
def test_a_call_or_step_that_breaks_the_contract_is_refused_in_one_line(fmt):
    """The exported call took `[0]` of whatever the model returned (the first logit of a
    bare output), and a step's carry of another shape went into the manifest: both
    exported silently."""
    key = jax.random.PRNGKey(2)
    # (The subclasses' constructor is `Last.__init__`, which Equinox inherits; pyright
    # synthesises a dataclass one from the fields instead.)
    with pytest.raises(ExportError) as e:
        eqx_lru.export.export(_Bare(False, key=key), format=fmt, reads=Tokens(VOCAB))  # pyright: ignore[reportCallIssue]
    message = str(e.value)
    assert "\n" not in message and "must return the pair (out, state)" in message, message
    assert f"of shape ({CLASSES},)" in message, message  # what it returned instead
    with pytest.raises(ExportError) as e:
        eqx_lru.export.export(
            _Swapped(False, key=key),  # pyright: ignore[reportCallIssue]
            format=fmt,
            program="step",
            reads=Tokens(VOCAB),
        )
    message = str(e.value)
    assert "\n" not in message and "must return a carry like init_carry()'s" in message, message

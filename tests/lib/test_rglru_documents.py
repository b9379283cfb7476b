"""`RGLRU(document_start="unnormalised")`, recurrentgemma's document-start semantics: a
float64 NumPy loop written from the definition (outputs, final states and gradients, in
the three variants, forward and reverse, packed, with `dt` and given states), `step`,
chunks and packing against the call, a sequence split across devices, and the option
through `HawkBlock` and `LRUBlock` (call, `step`, `chunk`, `reset`)."""

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from core_runs import packed_chunked_streamed
from reference import hawk_loop

import eqx_lru
from eqx_lru._cores._rglru import DocumentStart
from eqx_lru._scan._recurrence import ScanMethod

H, L, HEADS = 8, 11, 2  # d_model ≠ length; 8 modes, or 4 with phase
VARIANTS = {
    "real": dict(phase=False),
    "complex": dict(phase=True, form="complex"),
    "real2x2": dict(phase=True, form="real"),
}
FIELDS = ("Lambda", "theta", "W_a", "b_a", "W_x", "b_x")
IDS = np.asarray([0] * 3 + [1] + [2] * 4 + [0] * 3)  # a 1-long document, an id reused


def documents_loop(p, x, *, dt=None, h0=None, started=None, reverse=False, segment_ids=None, c=8.0):
    """The RG-LRU with recurrentgemma's document starts, position by position in float64:
    r = σ(W_a x + b_a), i = σ(W_x x + b_x) (block-diagonal W), a = σ(Λ)^{c r Δt}
    (· e^{iθ r Δt}); at a document's start h = i x̃, elsewhere h = a h + √(1 − |a|²) i x̃
    (x̃ the complex pairs of the input's halves with θ). A document starts at the first
    position processed unless one has `started` (default: whether `h0` is given), and
    wherever the segment id differs from the one processed before. Returns (y, states)."""
    x = np.asarray(x, np.float64)
    length, phase = x.shape[0], p.get("theta") is not None
    dt = np.ones(length) if dt is None else np.broadcast_to(np.asarray(dt, np.float64), length)
    modes = p["Lambda"].shape[0]
    sigma = 1 / (1 + np.exp(-p["Lambda"]))

    def gate(w, b, xt):
        z = np.einsum("hi,hio->ho", xt.reshape(w.shape[0], -1), w) + b
        return 1 / (1 + np.exp(-z.reshape(-1)))

    h = np.zeros(modes, np.complex128 if phase else np.float64) if h0 is None else np.array(h0)
    states, y = np.zeros((length,) + h.shape, h.dtype), np.zeros_like(x)
    order = list(range(length - 1, -1, -1) if reverse else range(length))
    for n, k in enumerate(order):
        r, i = gate(p["W_a"], p["b_a"], x[k]), gate(p["W_x"], p["b_x"], x[k])
        a = sigma ** (c * r * dt[k])
        if phase:
            a = a * np.exp(1j * p["theta"] * r * dt[k])
        xk = x[k, :modes] + 1j * x[k, modes:] if phase else x[k]
        if n == 0:
            start = not (h0 is not None if started is None else started)
        else:
            start = segment_ids is not None and segment_ids[k] != segment_ids[order[n - 1]]
        h = i * xk if start else a * h + np.sqrt(1 - np.abs(a) ** 2) * (i * xk)
        states[k] = h
        y[k] = np.concatenate([h.real, h.imag]) if phase else h
    return y, states


def _core(
    variant,
    dtype=jnp.float64,
    method: ScanMethod = "sequential",
    seed=0,
    start: DocumentStart = "unnormalised",
):
    core = eqx_lru.RGLRU(
        H, heads=HEADS, method=method, dtype=dtype, key=jax.random.PRNGKey(seed),
        document_start=start, **VARIANTS[variant],
    )  # fmt: skip
    rng = np.random.default_rng(seed + 7)  # non-zero biases: every parameter matters
    biases = [jnp.asarray(rng.normal(size=core.b_a.shape), dtype) for _ in range(2)]
    return eqx.tree_at(lambda m: (m.b_a, m.b_x), core, tuple(biases))


def _params(core) -> dict:
    return {
        n: None if getattr(core, n) is None else np.asarray(getattr(core, n), np.float64)
        for n in FIELDS
    }


def _data(dtype=jnp.float64, length=L, seed=1):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.normal(size=(length, H)), dtype)
    return x, jnp.asarray(rng.uniform(0.2, 2.5, size=length), dtype)


def _public(core, h):
    """An oracle state (real or complex) in the core's layout."""
    if not core.phase or core.form == "complex":
        return jnp.asarray(h)
    return jnp.stack([jnp.asarray(h.real), jnp.asarray(h.imag)])


def _oracle_state(core, state):
    state = np.asarray(state)
    return state[..., 0, :] + 1j * state[..., 1, :] if core.phase and core.form == "real" else state


@eqx.filter_jit
def _three_runs(core, x, dt, ids, zero, given, reverse):
    """No state (plain); a zero state and a given state (packed, with `dt`)."""
    options = dict(reverse=reverse, dt=dt, segment_ids=ids)
    return (
        core.run(x, reverse=reverse),
        core.run(x, initial_state=zero, **options),
        core.run(x, initial_state=given, **options),
    )


@pytest.mark.parametrize(
    "variant, method, reverse",
    [
        ("real", "sequential", False),
        ("complex", "associative", True),
        ("real2x2", "sequential", True),
    ],
)
def test_matches_oracle_float64(variant, method, reverse):
    """No state and a state that has begun no document (both start one at the first
    position processed), and a given state (continued), packed with `dt`."""
    with jax.enable_x64(True):
        core = _core(variant, method=method)
        x, dt = _data()
        rng = np.random.default_rng(2)
        given = rng.normal(size=core.Lambda.shape)
        given = given + 1j * rng.normal(size=given.shape) if core.phase else given
        zero = np.zeros_like(given)
        fresh = (_public(core, given), jnp.asarray(False))  # values ignored: not begun
        begun = (_public(core, given), jnp.asarray(True))
        runs = _three_runs(core, x, dt, jnp.asarray(IDS), fresh, begun, reverse)
        cases = [(None, None, None, None), (zero, False, dt, IDS), (given, True, dt, IDS)]
        for (y, final), (h0, started, steps, ids) in zip(runs, cases, strict=True):
            y_ref, states = documents_loop(
                _params(core), x, dt=steps, h0=h0, started=started, reverse=reverse,
                segment_ids=ids,
            )  # fmt: skip
            np.testing.assert_allclose(np.asarray(y), y_ref, rtol=0, atol=1e-12)
            last = states[0 if reverse else -1]
            assert bool(final[1])
            np.testing.assert_allclose(_oracle_state(core, final[0]), last, atol=1e-12)


def test_gradients_match_oracle_finite_differences():
    """Parameters, input, Δt and a given state, packed, in the real 2×2 form (rotating
    modes): JAX's gradients against central differences of the NumPy loop along a random
    direction per argument."""
    with jax.enable_x64(True):
        core = _core("real2x2")
        x, dt = _data()
        ids = jnp.asarray(IDS)
        rng = np.random.default_rng(3)
        weights = rng.normal(size=(L, H))
        h0 = jnp.asarray(rng.normal(size=(2, H // 2)))  # planar: real parts, imaginary parts

        def loss(args):
            core, x, dt, h0 = args
            y = core(x, dt=dt, segment_ids=ids, initial_state=(h0, jnp.asarray(True)))
            return jnp.sum(weights * jnp.tanh(y))

        grads, grad_x, grad_dt, grad_h0 = eqx.filter_jit(eqx.filter_grad(loss))((core, x, dt, h0))
        args = {**_params(core), "x": np.asarray(x), "dt": np.asarray(dt), "h0": np.asarray(h0)}
        analytic = {**{n: getattr(grads, n) for n in FIELDS}, "x": grad_x, "dt": grad_dt}
        analytic["h0"] = grad_h0
        for name, value in args.items():
            if value is None:
                continue
            direction = rng.normal(size=value.shape)

            def oracle(t, name=name, value=value, direction=direction):
                moved = {**args, name: value + t * direction}
                p = {n: moved[n] for n in FIELDS}
                state = moved["h0"][0] + 1j * moved["h0"][1]
                y, _ = documents_loop(p, moved["x"], dt=moved["dt"], h0=state, segment_ids=IDS)
                return np.sum(weights * np.tanh(y))

            numeric = (oracle(1e-6) - oracle(-1e-6)) / 2e-6
            got = float(jnp.sum(analytic[name] * direction))
            np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-9, err_msg=name)


@pytest.mark.parametrize("variant", ["complex"])  # the real forms: through the blocks below
def test_packing_chunks_and_step(variant):
    """Packed documents equal separate calls, two chunks (the second continues the first's
    state) and `step` from `init_state()` equal one call, all with `dt`; the first position
    differs from the normalised core's by the missing √(1 − a²), later ones too."""
    core = _core(variant, jnp.float32)
    x, dt = _data(jnp.float32, length=12)
    (y, final), *pairs = packed_chunked_streamed(core, x, dt)
    packed, separate = pairs[0]
    np.testing.assert_allclose(packed, separate, atol=1e-6)
    for ys, last in pairs[1:]:
        np.testing.assert_allclose(ys, y, atol=1e-6)
        np.testing.assert_allclose(last[0], final[0], atol=1e-6)
        assert bool(last[1]) and bool(final[1])
    plain = _core(variant, jnp.float32, start="normalised")
    diff = np.abs(np.asarray(plain(x, dt=dt) - y))
    assert diff[0].min() > 0 and diff[-1].max() > 1e-4 * np.abs(np.asarray(y[-1])).max()


def test_leading_exact_zeros_do_not_restart_the_document():
    """A stream whose first three inputs are exactly zero keeps h exactly 0 there; the
    document began at position 0 all the same (the state's `started`, not its values), so
    `step` and two chunks split at the first non-zero input equal the call and the float64
    loop (one document from position 0)."""
    with jax.enable_x64(True):
        core = _core("real")
        x = _data()[0].at[:3].set(0.0)

        @eqx.filter_jit
        def runs(core, x):
            _, streamed = jax.lax.scan(lambda h, x_t: core.step(h, x_t), core.init_state(), x)
            y1, carry = core.run(x[:3])
            return core(x), streamed, jnp.concatenate([y1, core(x[3:], initial_state=carry)])

        y, streamed, chunked = runs(core, x)
        expected, _ = documents_loop(_params(core), x)
        for got in (y, streamed, chunked):
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_sequence_split_across_devices():
    """Four chunks of a named vmap axis scanning by `SequenceParallel`: the one-device call,
    forward and reverse, with documents that start inside chunks and at a chunk's first
    position (only the sequence's first chunk starts one at its first position)."""
    chunks, length = 4, 16
    ids = jnp.asarray([0] * 3 + [1] * 5 + [2] * 8)  # starts at 3 and at 8 (chunk 2's first)
    one = _core("real", jnp.float32)
    split = _core("real", jnp.float32, method=eqx_lru.SequenceParallel("seq"))
    x, _ = _data(jnp.float32, length=length)

    @eqx.filter_jit
    def both(one, split, x, ids):
        def run(x, ids, reverse):
            return split(x, segment_ids=ids, reverse=reverse)

        pieces = (x.reshape(chunks, -1, H), ids.reshape(chunks, -1))
        outs = [
            jax.vmap(functools.partial(run, reverse=r), axis_name="seq")(*pieces)
            for r in (False, True)
        ]
        wholes = [one(x, segment_ids=ids, reverse=r) for r in (False, True)]
        return [o.reshape(length, H) for o in outs], wholes

    (fwd, rev), (fwd_one, rev_one) = both(one, split, x, ids)
    np.testing.assert_allclose(fwd, fwd_one, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rev, rev_one, rtol=1e-5, atol=1e-6)


HAWK = functools.partial(
    eqx_lru.HawkBlock, conv_width=3, mlp_width=10,
    core=functools.partial(eqx_lru.RGLRU, heads=2, document_start="unnormalised"),
)  # fmt: skip


def _hawk_params(block) -> dict:
    f = lambda a: np.asarray(a, np.float64)  # noqa: E731
    names = dict(
        norm="norm.weight", mlp_norm="mlp_norm.weight", W_x="linear_x.weight",
        b_x="linear_x.bias", W_y="linear_y.weight", b_y="linear_y.bias",
        conv_w="conv.weight", conv_b="conv.bias", W_o="linear_out.weight",
        b_o="linear_out.bias", W_up="mlp.up.weight", b_up="mlp.up.bias",
        W_d="mlp.down.weight", b_d="mlp.down.bias",
    )  # fmt: skip

    def get(path):
        return functools.reduce(getattr, path.split("."), block)

    return {k: f(get(v)) for k, v in names.items()}


@eqx.filter_jit
def _hawk_runs(block, x, dt, ids):
    """The call (plain, packed with `dt`), `step` over the sequence, two chunks (the
    second from the first's carry, packed) and a chunk after `reset`."""
    state = eqx.nn.State(block)
    plain, _ = block(x, state)
    packed, _ = block(x, state, segment_ids=ids, dt=dt)
    _, streamed = jax.lax.scan(lambda c, x_t: block.step(c, x_t, state), block.init_carry(), x)
    carry, y1 = block.chunk(block.init_carry(), x[:6], state)
    _, y2 = block.chunk(carry, x[6:], state, segment_ids=ids[6:] - ids[6] + 5)
    garbage = jax.tree_util.tree_map(lambda c: c if c.dtype == bool else c + 1.0, carry)
    _, after_reset = block.chunk(garbage, x, state, reset=jnp.asarray(True))
    return plain, packed, streamed, jnp.concatenate([y1, y2]), after_reset


def test_through_hawk_block():
    """`HawkBlock` with the option: the float64 loop (its core the document loop) plain and
    packed with `dt`; `step`, chunks and `reset` equal the call (a new stream and a reset
    start a document; a chunk continues its carry's)."""
    with jax.enable_x64(True):
        block = HAWK(6, H, dtype=jnp.float64, key=jax.random.PRNGKey(0))
        x, dt = (a[:, :6] if a.ndim == 2 else a for a in _data(length=L))
        ids = jnp.asarray(IDS)
        plain, packed, streamed, chunked, after_reset = _hawk_runs(block, x, dt, ids)
        p, core = _hawk_params(block), _params(block.core)

        def oracle_core(steps):
            return lambda u, seg, h0: documents_loop(core, u, dt=steps, segment_ids=seg, h0=h0)[0]

        tol: dict[str, Any] = dict(rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(plain, hawk_loop(p, x, oracle_core(None)), **tol)
        expected = hawk_loop(p, x, oracle_core(dt), segment_ids=IDS)
        np.testing.assert_allclose(packed, expected, **tol)
        for other in (streamed, after_reset):
            np.testing.assert_allclose(other, plain, **tol)
        # The second chunk's first segment continues the carry; its next starts a document.
        expected = hawk_loop(p, x, oracle_core(None), segment_ids=np.r_[[0] * 8, [1] * 3])
        np.testing.assert_allclose(chunked, expected, **tol)


def test_through_lru_block_streams_like_the_call():
    """`LRUBlock(core=RGLRU(document_start=...))` in the real 2×2 form: `step` from
    `init_carry()` equals the call in inference mode."""
    core = functools.partial(
        eqx_lru.RGLRU, heads=HEADS, phase=True, form="real", document_start="unnormalised"
    )
    block, state = eqx.nn.make_with_state(eqx_lru.LRUBlock)(
        H, H, core=core, norm="layer", key=jax.random.PRNGKey(0)
    )
    x, _ = _data(jnp.float32)

    @eqx.filter_jit
    def both(block, x):
        _, streamed = jax.lax.scan(lambda c, x_t: block.step(c, x_t, state), block.init_carry(), x)
        return streamed, block(x, state, inference=True)[0]

    streamed, parallel = both(block, x)
    np.testing.assert_allclose(streamed, parallel, rtol=0, atol=1e-5)


def test_bad_document_start():
    with pytest.raises((ValueError, TypeError), match="document_start"):
        eqx_lru.RGLRU(H, document_start="raw", key=jax.random.PRNGKey(0))  # pyright: ignore[reportArgumentType]

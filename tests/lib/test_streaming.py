"""Streaming: a causal `LRUBlock` / `LRUModel` run as an RNN (`init_carry`, `step`, `chunk`).

For every core (the LRU's two forms with one scan method each), a batch of streams
(`jax.vmap`, under `jit`):

- `step` token by token inside `jax.lax.scan`,
- `chunk` over chunks of length 1,
- `chunk` over padded chunks (garbage in the pads, `length=`) at random split points,
- one parallel call in inference mode,

agree — outputs and final carries — within 1e-5 relative in float32, and in float64 each
of them within 1e-12 of a float64 NumPy loop of the whole model (encoder, batch/layer
norm with running statistics, recurrence, GELU, GLU, skip, pooling, head). The oracle's
recurrence is a NumPy loop for the LRU cores; for the other cores it is the core's own
float64 `step` (checked against NumPy loops in their own test files), so there the
oracle checks everything around the core.

Sizes are distinct: IN 8, VOCAB 7, OUT 4, H 5, N 12 (S5 in 2 blocks: a multiple of 4),
L 13, depth 2, 3 streams.
"""

import functools
from collections.abc import Callable
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import CORES as ALL_CORES
from conformance import METHODS, select
from reference import lru_params_np

import eqx_lru

IN, VOCAB, OUT, H, N, L, DEPTH, STREAMS = 8, 7, 4, 5, 12, 13, 2, 3
CHUNKS = 6  # chunks per stream at random split points (one of them of length 1)

#: The cores of `conformance.CORES` that the model tests build.
CORES = select(ALL_CORES, in_models=True)


def _config(core, method, dtype, *, encoder="linear", norm="batch", glu="full", pooling=None):
    return dict(
        core=core,
        method=method,
        dtype=dtype,
        encoder=encoder,
        norm=norm,
        glu=glu,
        pooling=pooling,
    )


# Every core with the default scan method, both precisions; each LRU form with one scan
# method in both precisions (the scan's own tests prove the methods equal:
# test_scan.py, test_scan_methods.py, and test_packing.py runs every method in a block);
# both encoders, both norms, both GLUs and all poolings somewhere.
LRU_FORMS = ("complex_lru", "real_lru")
#: The one method each LRU form streams with.
FORM_METHODS = {"complex_lru": "sequential", "real_lru": "associative"}
_LRU_OPTIONS = {
    ("complex_lru", "float64"): dict(encoder="embedding", pooling="last"),
    ("complex_lru", "float32"): dict(norm="layer", glu="half"),
    ("real_lru", "float64"): dict(encoder="embedding", pooling="mean"),
    ("real_lru", "float32"): dict(),
}
CONFIGS = [
    _config(form, FORM_METHODS[form], dtype, **options)
    for (form, dtype), options in _LRU_OPTIONS.items()
] + [
    _config(name, "sequential" if ALL_CORES[name].takes_method else None, dtype,
            encoder="embedding" if i % 2 else "linear", glu="half" if i % 3 else "full")
    for i, name in enumerate(n for n in CORES if n not in LRU_FORMS)
    for dtype in ("float32", "float64")
]  # fmt: skip
#: The configurations not marked slow.
FAST = {("complex_lru", "sequential", "float64"), ("real_lru", "associative", "float32")}


def _id(config):
    parts = [config["core"], str(config["method"]), config["dtype"], config["encoder"]]
    parts += [config["norm"], config["glu"], str(config["pooling"])]
    return "-".join(parts)


PARAMS = [
    pytest.param(
        c,
        id=_id(c),
        marks=() if (c["core"], c["method"], c["dtype"]) in FAST else pytest.mark.slow,
    )
    for c in CONFIGS
]


# --- building models -------------------------------------------------------------------------


def _make_core_factory(config):
    factory = ALL_CORES[config["core"]].make
    if config["method"] is not None:
        factory = functools.partial(factory, method=METHODS[config["method"]].method)
    return factory


def _model(config, *, bidirectional=False, seed=0):
    """A depth-2 model in `config`'s dtype with perturbed parameters and non-trivial
    running batch-norm statistics; call inside `jax.enable_x64` for float64."""
    dtype = jnp.dtype(config["dtype"])
    block = functools.partial(
        eqx_lru.LRUBlock,
        core=_make_core_factory(config),
        norm=config["norm"],
        glu=config["glu"],
        bidirectional=bidirectional,
    )
    in_size = VOCAB if config["encoder"] == "embedding" else IN
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        in_size,
        OUT,
        H,
        N,
        DEPTH,
        encoder=config["encoder"],
        pooling=config["pooling"],
        block=block,
        dtype=dtype,
        key=jax.random.PRNGKey(seed),
    )
    return _perturbed(model, seed + 1), _random_running_stats(model.blocks, state, seed + 2)


def _perturbed(model, seed):
    """Every floating parameter moved off its init (no formula tested at a special point:
    B = 1, D = 0, weight 1, bias 0, ...). In NumPy: no eager JAX op to compile."""
    leaves, tree = jax.tree_util.tree_flatten(model)
    rng = np.random.default_rng(seed)

    def move(x):
        if not (eqx.is_inexact_array(x) and jnp.issubdtype(x.dtype, jnp.floating)):
            return x
        x_np = np.asarray(x, np.float64)
        moved = x_np * (1 + 0.1 * rng.normal(size=x.shape)) + 0.05 * rng.normal(size=x.shape)
        return jnp.asarray(moved, x.dtype)

    return jax.tree_util.tree_unflatten(tree, [move(x) for x in leaves])


def _random_running_stats(blocks, state, seed):
    rng = np.random.default_rng(seed)
    for block in blocks:
        if isinstance(block.norm, eqx_lru.MaskedBatchNorm):
            steps, mean, var = state.get(block.norm.state_index)
            state = state.set(block.norm.state_index, (
                jnp.asarray(3, steps.dtype), jnp.asarray(rng.normal(size=mean.shape), mean.dtype),
                jnp.asarray(rng.uniform(0.5, 2, size=var.shape), var.dtype),
            ))  # fmt: skip
    return state


def _inputs(config, seed=3):
    rng = np.random.default_rng(seed)
    if config["encoder"] == "embedding":
        return jnp.asarray(rng.integers(0, VOCAB, size=(STREAMS, L)), jnp.int32)
    return jnp.asarray(rng.normal(size=(STREAMS, L, IN)), jnp.dtype(config["dtype"]))


def _garbage(x: np.ndarray) -> np.ndarray:
    """Padding content that must not matter: out-of-vocabulary ids or nan."""
    if np.issubdtype(x.dtype, np.integer):
        return np.full_like(x, -17)
    return np.full_like(x, np.nan)


# --- the four ways of running a stream (shared jitted functions) ----------------------------


@eqx.filter_jit
def run_steps(model, state, xs):
    def stream(x):
        return jax.lax.scan(lambda c, x_t: model.step(c, x_t, state), model.init_carry(), x)

    return jax.vmap(stream)(xs)


@eqx.filter_jit
def run_unit_chunks(model, state, xs):
    def stream(x):
        def body(carry, x_t):
            carry, out = model.chunk(carry, x_t[None], state)
            return carry, out[0] if model.pooling is None else out

        return jax.lax.scan(body, model.init_carry(), x)

    return jax.vmap(stream)(xs)


@eqx.filter_jit
def run_chunk(model, state, carry, x, length):
    return jax.vmap(lambda c, x, n: model.chunk(c, x, state, length=n))(carry, x, length)


@eqx.filter_jit
def run_parallel(model, state, xs):
    return jax.vmap(lambda x: model(x, state, inference=True)[0])(xs)


def _split_points(rng) -> list[list[int]]:
    """Per stream, `CHUNKS + 1` increasing boundaries from 0 to L with one chunk of length 1."""
    bounds = []
    for _ in range(STREAMS):
        one = int(rng.integers(1, L - 1))  # the chunk [one, one + 1)
        others = [c for c in range(1, L) if c not in (one, one + 1)]
        cuts = {one, one + 1, *rng.choice(others, CHUNKS - 3, replace=False).tolist()}
        bounds.append([0, *sorted(cuts), L])
    return bounds


def run_random_chunks(model, state, xs, seed=4):
    """The streams in padded chunks at random split points: every chunk padded to L with
    garbage, `length=` its valid size. Returns `(carry, outs)`, `outs` per position as
    `run_steps` (pooled models: the output after each chunk at the chunk's last position,
    `nan` elsewhere)."""
    rng = np.random.default_rng(seed)
    bounds = _split_points(rng)
    xs_np = np.asarray(xs)
    carry = jax.vmap(lambda _: model.init_carry())(jnp.arange(STREAMS))
    outs = np.full((STREAMS, L, OUT), np.nan)
    for i in range(CHUNKS):
        chunk, lengths = _garbage(xs_np), np.zeros(STREAMS, np.int32)
        for b in range(STREAMS):
            start, end = bounds[b][i], bounds[b][i + 1]
            chunk[b, : end - start] = xs_np[b, start:end]
            lengths[b] = end - start
        carry, out = run_chunk(model, state, carry, jnp.asarray(chunk), jnp.asarray(lengths))
        out = np.asarray(out, np.float64)
        for b in range(STREAMS):
            start, end = bounds[b][i], bounds[b][i + 1]
            if model.pooling is None:
                outs[b, start:end] = out[b, : end - start]
                assert np.all(out[b, end - start :] == 0)  # zero at pads
            else:
                outs[b, end - 1] = out[b]
    return carry, outs


# --- the float64 NumPy oracle ----------------------------------------------------------------


def _f64(x):
    return np.asarray(x, np.float64)


def _gelu(x):  # jax.nn.gelu's default, the tanh approximation
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _norm_np(norm, state):
    w, b = _f64(norm.weight), _f64(norm.bias)
    if isinstance(norm, eqx.nn.LayerNorm):
        return lambda x: (x - x.mean()) / np.sqrt(x.var() + norm.eps) * w + b
    steps, mean_ema, var_ema = state.get(norm.state_index)
    correction = 1 - norm.momentum ** int(steps)  # bias-corrected EMAs, steps > 0 here
    mean, var = _f64(mean_ema) / correction, _f64(var_ema) / correction
    return lambda x: (x - mean) / np.sqrt(var + norm.eps) * w + b


def _glu_np(glu):
    w, b = _f64(glu.linear.weight), _f64(glu.linear.bias)
    if glu.variant == "full":
        return lambda y: (w[:H] @ y + b[:H]) * _sigmoid(w[H:] @ y + b[H:])
    return lambda y: y * _sigmoid(w @ y + b)


@eqx.filter_jit
def _core_step(core, x, u):
    """`core.step`, compiled once for the blocks of a model (the core is an argument)."""
    return core.step(x, u)


def _core_np(core) -> tuple[Any, Callable[[Any, Any], Any], Callable[[Any], Any]]:
    """`(init, step, to_carry)`: the core's recurrence in float64, and its state in the
    core's layout."""
    if isinstance(core, eqx_lru.AbstractLRU):
        p = lru_params_np(core)
        lam = np.exp(-np.exp(p["nu_log"]) + 1j * np.exp(p["theta_log"]))
        b = (p["B_re"] + 1j * p["B_im"]) * np.exp(p["gamma_log"])[:, None]
        c = p["C_re"] + 1j * p["C_im"]

        def step(x, u):
            x = lam * x + b @ u
            return x, (c @ x).real + p["D"] * u

        def to_carry(x):
            return x if isinstance(core, eqx_lru.ComplexLRU) else np.stack([x.real, x.imag], -1)

        return np.zeros(N, complex), step, to_carry

    # Other cores: their own float64 `step` (their tests check it against NumPy loops).
    def other_step(x, u):
        x, y = _core_step(core, x, jnp.asarray(u))
        return x, _f64(y)

    return core.init_state(), other_step, lambda x: jax.tree_util.tree_map(np.asarray, x)


def oracle(model, state, x):
    """Float64 loop over one stream: `(outs, carries)`, `outs[t]` the model's output for
    the prefix `x[: t + 1]`, `carries` every core's final state."""
    if isinstance(model.encoder, eqx.nn.Embedding):
        table = _f64(model.encoder.weight)
        encode = lambda x_t: table[int(x_t)]  # noqa: E731
    else:
        w, b = _f64(model.encoder.weight), _f64(model.encoder.bias)
        encode = lambda x_t: w @ _f64(x_t) + b  # noqa: E731
    blocks = [
        (_norm_np(blk.norm, state), *_core_np(blk.core), _glu_np(blk.glu)) for blk in model.blocks
    ]
    carries = [init for _, init, _, _, _ in blocks]
    w_out, b_out = _f64(model.head.weight), _f64(model.head.bias)
    total, outs = np.zeros(H), []
    for t in range(x.shape[0]):
        h = encode(x[t])
        for i, (norm, _, step, _, glu) in enumerate(blocks):
            carries[i], r = step(carries[i], norm(h))
            h = h + glu(_gelu(r))
        total = total + h
        pooled = total / (t + 1) if model.pooling == "mean" else h
        outs.append(w_out @ pooled + b_out)
    return np.stack(outs), [to(c) for (_, _, _, to, _), c in zip(blocks, carries, strict=True)]


# --- the comparisons ------------------------------------------------------------------------


def _rel(x, y) -> float:
    x, y = np.asarray(x), np.asarray(y)
    return float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-30))


def _tree_rel(x, y) -> float:
    xs, ys = jax.tree_util.tree_leaves(x), jax.tree_util.tree_leaves(y)
    assert len(xs) == len(ys)
    return max(_rel(a, b) for a, b in zip(xs, ys, strict=True))


def _core_ready(model) -> bool:
    return all(isinstance(b.core, eqx_lru.AbstractRecurrentCore) for b in model.blocks)


@pytest.mark.parametrize("config", PARAMS)
def test_steps_chunks_and_parallel_agree(config):
    with jax.enable_x64(config["dtype"] == "float64"):
        model, state = _model(config)
        if not _core_ready(model):
            pytest.skip(f"{config['core']} does not follow AbstractRecurrentCore yet")
        xs = _inputs(config)
        step_carry, step_outs = run_steps(model, state, xs)
        unit_carry, unit_outs = run_unit_chunks(model, state, xs)
        chunk_carry, chunk_outs = run_random_chunks(model, state, xs)
        parallel = np.asarray(run_parallel(model, state, xs), np.float64)
        step_outs, unit_outs = np.asarray(step_outs), np.asarray(unit_outs)

        # The carry: one state per block, plus the running sum and count for "mean".
        assert len(step_carry["blocks"]) == DEPTH
        keys = {"blocks", "sum", "count"} if config["pooling"] == "mean" else {"blocks"}
        assert set(step_carry) == keys
        if config["pooling"] == "mean":
            np.testing.assert_array_equal(step_carry["count"], L)

        tol = 1e-12 if config["dtype"] == "float64" else 1e-5
        assert step_outs.shape == (STREAMS, L, OUT)
        assert step_outs.dtype == jnp.dtype(config["dtype"])
        assert _rel(unit_outs, step_outs) < tol
        assert _tree_rel(unit_carry, step_carry) < tol
        assert _tree_rel(chunk_carry, step_carry) < tol
        done = ~np.isnan(chunk_outs)  # pooled: known at each chunk's end only
        assert _rel(chunk_outs[done], step_outs[done]) < tol
        if config["pooling"] is None:
            assert done.all()
            assert _rel(parallel, step_outs) < tol
        else:  # the output for the whole stream is the last one of the stream
            assert _rel(parallel, step_outs[:, -1]) < tol

        # Every way against the float64 loop; in float32 a sanity check only.
        for b in range(STREAMS):
            outs, carries = oracle(model, state, np.asarray(xs[b]))
            ref_tol = 1e-12 if config["dtype"] == "float64" else 1e-4
            assert _rel(step_outs[b], outs) < ref_tol
            assert _rel(chunk_outs[b][done[b]], outs[done[b]]) < ref_tol
            last = parallel[b] if config["pooling"] is None else parallel[b][None]
            assert _rel(last, outs if config["pooling"] is None else outs[-1:]) < ref_tol
            for i in range(DEPTH):
                for carry in (step_carry, chunk_carry):
                    got = jax.tree_util.tree_map(lambda c, b=b: c[b], carry["blocks"][i])
                    assert _tree_rel(got, carries[i]) < ref_tol


# --- blocks directly; generation loops; refusals -----------------------------------------------


@eqx.filter_jit
def block_three_ways(block, state, x, split):
    """`step` in a scan, two chunks (the first padded to the whole length, `length=split`)
    and the parallel call in inference mode, for one sequence."""
    step_carry, step_y = jax.lax.scan(
        lambda c, x_t: block.step(c, x_t, state), block.init_carry(), x
    )
    first = jnp.where(jnp.arange(L)[:, None] < split, x, jnp.nan)
    carry, y_first = block.chunk(block.init_carry(), first, state, length=split)
    rest = jnp.roll(x, -split, axis=0)  # positions split.. first, then garbage-free wrap
    chunk_carry, y_rest = block.chunk(carry, rest, state, length=L - split)
    chunk_y = jnp.where(jnp.arange(L)[:, None] < split, y_first, jnp.roll(y_rest, split, axis=0))
    parallel, _ = block(x, state, inference=True)
    return step_carry, step_y, chunk_carry, chunk_y, parallel, y_first


def test_block_step_and_chunk():
    core = functools.partial(eqx_lru.RealLRU, r_min=0.5, r_max=0.95)
    block, state = eqx.nn.make_with_state(eqx_lru.LRUBlock)(
        H, N, core=core, glu="half", key=jax.random.PRNGKey(0)
    )
    block = _perturbed(block, 1)
    state = _random_running_stats([block], state, 2)
    x = jnp.asarray(np.random.default_rng(3).normal(size=(L, H)), jnp.float32)
    carry = block.init_carry()
    assert carry.shape == (N, 2) and carry.dtype == jnp.float32
    step_carry, step_y, chunk_carry, chunk_y, parallel, y_first = block_three_ways(
        block, state, x, jnp.asarray(5)
    )
    assert _rel(step_y, parallel) < 1e-5 and _rel(chunk_y, parallel) < 1e-5
    assert _rel(chunk_carry, step_carry) < 1e-5
    assert np.all(np.asarray(y_first[5:]) == 0)  # zero at pads, no nan from them
    # The carry is the core's state after the last position.
    _, core_state = block.core.run(block.norm(x, state, inference=True)[0])
    assert _rel(step_carry, core_state) < 1e-5


@eqx.filter_jit
def generate(model, state, prompt, steps):
    """Greedy decoding: prefill the prompt in one chunk, then feed each argmax back."""
    carry, logits = model.chunk(model.init_carry(), prompt, state)

    def body(carry_and_token, _):
        carry, token = carry_and_token
        carry, logits = model.step(carry, token, state)
        return (carry, jnp.argmax(logits).astype(jnp.int32)), token

    first = jnp.argmax(logits[-1]).astype(jnp.int32)
    _, tokens = jax.lax.scan(body, (carry, first), None, length=steps)
    return tokens


@pytest.mark.slow
def test_generation_loop():
    """A language-model loop: the outputs are logits over the vocabulary; the tokens
    generated step by step are those the parallel model predicts on its own output."""
    block = functools.partial(eqx_lru.LRUBlock, core="real", norm="layer")
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB,
        VOCAB,
        H,
        N,
        DEPTH,
        encoder="embedding",
        pooling=None,
        block=block,
        key=jax.random.PRNGKey(5),
    )
    prompt = jnp.asarray([3, 1, 4, 1, 5], jnp.int32)
    tokens = generate(_perturbed(model, 6), state, prompt, L - len(prompt))
    sequence = jnp.concatenate([prompt, tokens])
    model = _perturbed(model, 6)
    logits, _ = eqx.filter_jit(lambda m, x: m(x, state, inference=True))(model, sequence)
    predicted = np.argmax(np.asarray(logits), axis=-1)
    np.testing.assert_array_equal(predicted[4:-1], np.asarray(tokens))


def test_retrieval_documents_stream_then_classify():
    """Each document of a pair is a stream of the shared encoder (token by token, or one
    padded chunk); `classify` of the two running means, once both documents are read, is
    the two-tower model's call in inference mode, for documents of different lengths."""
    encoder, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, None, H, N, DEPTH, encoder="embedding", key=jax.random.PRNGKey(8)
    )
    model = eqx_lru.LRURetrievalModel(encoder, OUT, mlp_size=3, key=jax.random.PRNGKey(9))
    model = _perturbed(model, 10)
    state = _random_running_stats(model.encoder.blocks, state, 11)
    docs = np.random.default_rng(12).integers(0, VOCAB, size=(2, L)).astype(np.int32)
    lengths = np.asarray([L, 5], np.int32)
    docs[1, 5:] = -17  # padding, never read
    expected = eqx.filter_jit(
        lambda m, x, n: m(x, state, length=n, inference=True)[0]
    )(model, docs, lengths)  # fmt: skip

    @eqx.filter_jit
    def streamed(model, doc_a, doc_b, doc_b_padded):
        encoder = model.encoder
        step = lambda c, x_t: encoder.step(c, x_t, state)  # noqa: E731
        u = jax.lax.scan(step, encoder.init_carry(), doc_a)[1][-1]
        v = jax.lax.scan(step, encoder.init_carry(), doc_b)[1][-1]
        _, v_chunk = encoder.chunk(encoder.init_carry(), doc_b_padded, state, length=5)
        return model.classify(u, v), model.classify(u, v_chunk)

    by_steps, by_chunk = streamed(model, docs[0], docs[1, :5], docs[1])
    assert _rel(by_steps, expected) < 1e-5 and _rel(by_chunk, expected) < 1e-5


def test_bidirectional_and_non_causal_refuse():
    key = jax.random.PRNGKey(0)
    block = eqx_lru.LRUBlock(H, N, bidirectional=True, norm="layer", key=key)
    state = eqx.nn.State(block)
    for call in (
        block.init_carry,
        lambda: block.step(jnp.zeros(N, jnp.complex64), jnp.zeros(H), state),
        lambda: block.chunk(jnp.zeros(N, jnp.complex64), jnp.zeros((L, H)), state),
    ):
        with pytest.raises(ValueError, match="bidirectional.*later positions"):
            call()
    model = eqx_lru.LRUModel(
        IN,
        OUT,
        H,
        N,
        DEPTH,
        block=functools.partial(eqx_lru.LRUBlock, bidirectional=True),
        key=key,
    )
    with pytest.raises(ValueError, match="bidirectional"):
        model.init_carry()

    class Lookahead(eqx_lru.AbstractRecurrentCore):
        """Not causal: the output at t is the input at t + 1."""

        recurrent_fields = ()
        causal = False

        def __init__(self, d_model, d_state, *, key, dtype=None):
            del d_model, d_state, key, dtype

        def init_state(self):
            return jnp.zeros(())

        def step(self, state, u_t, *, dt=None):
            raise NotImplementedError

        def run(
            self, u, *, initial_state=None, reverse=False, length=None, segment_ids=None, dt=None
        ):
            return jnp.roll(u, -1 if not reverse else 1, axis=0), jnp.zeros(())

    block = eqx_lru.LRUBlock(H, N, core=Lookahead, key=key)
    with pytest.raises(ValueError, match="causal"):
        block.init_carry()


def test_streaming_errors():
    key = jax.random.PRNGKey(0)

    class PlainBlock(eqx_lru.AbstractBlock):
        """A block of one's own with `LRUBlock`'s call but no streaming methods."""

        linear: eqx.nn.Linear

        def __init__(self, d_model, d_state, *, dtype=None, key):
            self.linear = eqx.nn.Linear(d_model, d_model, dtype=dtype, key=key)

        def __call__(
            self, x, state, *, length=None, segment_ids=None, dt=None, key=None, inference=None
        ):
            return jax.vmap(self.linear)(cast(jax.Array, x)), state

    model = eqx_lru.LRUModel(IN, OUT, H, N, DEPTH, block=PlainBlock, key=key)
    with pytest.raises(TypeError, match="block 0.*init_carry"):
        model.init_carry()

    tokens, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, OUT, H, N, 1, encoder="embedding", key=key
    )
    features, _ = eqx.nn.make_with_state(eqx_lru.LRUModel)(IN, OUT, H, N, 1, key=key)
    with pytest.raises((ValueError, TypeError), match="x_t"):
        tokens.step(tokens.init_carry(), jnp.zeros(2, jnp.int32), state)  # one id, not two
    with pytest.raises((ValueError, TypeError), match="x_t"):
        features.step(features.init_carry(), jnp.zeros(IN + 1), state)
    with pytest.raises((ValueError, TypeError), match="x_t"):
        features.step(features.init_carry(), jnp.zeros((), jnp.int32), state)


# --- packed chunks ------------------------------------------------------------------------------

PACKED_IDS = np.asarray([0] * 4 + [1] * 5 + [2] * 4, np.int32)  # three sequences in L = 13
PACKED_VALID = 11  # the last sequence has 2 valid positions, then 2 pads


@eqx.filter_jit
def packed_and_separate(model, state, prefix, x):
    """A chunk packing three sequences (the first continues the stream after `prefix`),
    padded to `L`, and the same three as separate chunks: `(packed, separate)`, each the
    final carry and the outputs."""
    carry, _ = model.chunk(model.init_carry(), prefix, state)
    ids = jnp.asarray(PACKED_IDS)
    packed = model.chunk(carry, x, state, length=PACKED_VALID, segment_ids=ids)
    _, first = model.chunk(carry, x[:4], state)
    _, second = model.chunk(model.init_carry(), x[4:9], state)
    last_carry, last = model.chunk(model.init_carry(), x[9:PACKED_VALID], state)
    outputs = jnp.concatenate([first, second, last, jnp.zeros_like(x[:2, :OUT])])
    return packed, (last_carry, outputs)


@pytest.mark.parametrize("core", ["real_lru", "s4d", "ablation_rnn_tanh"])
def test_chunk_packs_sequences(core):
    """`chunk(..., segment_ids=)`: the first sequence continues the stream, later ones
    start from zero, the carry is the last sequence's; pads give zeros and do not leak."""
    method = "sequential" if ALL_CORES[core].takes_method else None
    model, state = _model(_config(core, method, "float32"))
    rng = np.random.default_rng(7)
    prefix = jnp.asarray(rng.normal(size=(5, IN)), jnp.float32)
    x = rng.normal(size=(L, IN))
    x[PACKED_VALID:] = np.nan  # pads with any content
    (carry, y), (ref_carry, ref_y) = packed_and_separate(model, state, prefix, jnp.asarray(x))
    assert _rel(y, ref_y) < 1e-5
    assert _tree_rel(carry, ref_carry) < 1e-5
    assert np.all(np.asarray(y[PACKED_VALID:]) == 0)


def test_packed_chunk_errors():
    pooled, state = _model(_config("real_lru", "sequential", "float32", pooling="mean"))
    x = jnp.zeros((L, IN))
    with pytest.raises(ValueError, match="only with `pooling=None`"):
        pooled.chunk(pooled.init_carry(), x, state, segment_ids=jnp.asarray(PACKED_IDS))
    model, state = _model(_config("real_lru", "sequential", "float32"))
    with pytest.raises((ValueError, TypeError), match="segment_ids"):
        model.chunk(model.init_carry(), x, state, segment_ids=jnp.zeros(L - 1, jnp.int32))
    block = model.blocks[0]
    with pytest.raises((ValueError, TypeError), match="segment_ids"):
        block.chunk(block.init_carry(), jnp.zeros((L, H)), state, segment_ids=jnp.zeros(L))

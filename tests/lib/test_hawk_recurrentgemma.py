"""recurrentgemma's recurrent blocks in eqx_lru: the converters (`hawk_block_from/
to_recurrentgemma`, `rglru_from/to_recurrentgemma`) against a float64 NumPy loop written
from recurrentgemma's parameter layouts (always runs), their round trips, Hawk's
`init="recurrentgemma"` against recurrentgemma's initialisers' formulas, bad trees, and,
where recurrentgemma is installed (`./dev.sh` installs it), its own `ResidualBlock` on
packed documents of 4096 positions: outputs and gradients."""

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from recurrentgemma_layers import load
from reference import gelu_tanh

import eqx_lru

H, N, E, K, HEADS = 6, 8, 10, 4, 2  # width, lru_width, MLP width, taps, heads


def their_params(variant: str, seed: int = 0, dtype: type[np.floating] = np.float32) -> dict:
    """Random parameters in recurrentgemma's `ResidualBlock` layout (recurrent block),
    spread so that every parameter matters."""
    rng = np.random.default_rng(seed)

    def normal(shape, std):
        return (std * rng.normal(size=shape)).astype(dtype)

    modes = N if variant == "real" else N // 2
    a = np.sqrt(rng.uniform(0.9**2, 0.999**2, size=modes))
    lru = {
        "a_param": (np.log1p(-a) - np.log(a)).astype(dtype),  # -logit(a)
        "input_gate": {"w": normal((HEADS, N // HEADS, modes // HEADS), N**-0.5),
                       "b": normal((HEADS, modes // HEADS), 0.5)},
        "a_gate": {"w": normal((HEADS, N // HEADS, modes // HEADS), N**-0.5),
                   "b": normal((HEADS, modes // HEADS), 0.5)},
    }  # fmt: skip
    if variant != "real":
        lru["a_imag_param"] = rng.uniform(0, 0.3, size=modes).astype(dtype)

    def dense(d_in, d_out):
        return {"kernel": normal((d_in, d_out), d_in**-0.5), "bias": normal((d_out,), 0.3)}

    return {
        "temporal_pre_norm": {"scale": normal((H,), 0.3)},
        "recurrent_block": {
            "linear_y": dense(H, N), "linear_x": dense(H, N), "linear_out": dense(N, H),
            "conv_1d": {"w": normal((K, N), 0.5), "b": normal((N,), 0.3)},
            "rg_lru": lru,
        },
        "channel_pre_norm": {"scale": normal((H,), 0.3)},
        "mlp_block": {
            "ffw_up": {"w": normal((2, H, E), H**-0.5), "b": normal((2, 1, 1, E), 0.3)},
            "ffw_down": dense(E, H),
        },
    }  # fmt: skip


def residual_block_loop(p: dict, x, segment_pos) -> np.ndarray:
    """recurrentgemma's recurrent `ResidualBlock` in float64, from its parameter layout:
    norms times `1 + scale`, `x @ kernel + bias`, the convolution's `w[K-1-s]` on the
    input `s` positions back (none before the document's first position), the RG-LRU with
    `h = i x` where `segment_pos == 0` (the complex variant on the halves' pairs), and the
    MLP's two branches `einsum("td,cdD->ctD")`."""
    f = lambda a: np.asarray(a, np.float64)  # noqa: E731
    x, pos = f(x), np.asarray(segment_pos)
    rb, lru = p["recurrent_block"], p["recurrent_block"]["rg_lru"]

    def norm(v, scale):
        return v / np.sqrt(np.mean(v**2, -1, keepdims=True) + 1e-6) * (1 + f(scale))

    def dense(v, layer):
        return v @ f(layer["kernel"]) + f(layer["bias"])

    z = norm(x, p["temporal_pre_norm"]["scale"])
    gate, v = gelu_tanh(dense(z, rb["linear_y"])), dense(z, rb["linear_x"])
    w, taps = f(rb["conv_1d"]["w"]), rb["conv_1d"]["w"].shape[0]
    u = np.tile(f(rb["conv_1d"]["b"]), (x.shape[0], 1))
    for t in range(x.shape[0]):
        for s in range(min(taps, pos[t] + 1)):  # within the document
            u[t] += w[taps - 1 - s] * v[t - s]
    phase = "a_imag_param" in lru
    modes = f(lru["a_param"]).shape[0]
    h = np.zeros(modes, np.complex128 if phase else np.float64)
    ys = np.zeros_like(u)
    for t in range(x.shape[0]):

        def block_gate(g, ut=u[t]):
            return 1 / (
                1
                + np.exp(
                    -(
                        np.einsum("hi,hio->ho", ut.reshape(HEADS, -1), f(g["w"])) + f(g["b"])
                    ).reshape(-1)
                )
            )  # noqa: E501

        gx, ga = block_gate(lru["input_gate"]), block_gate(lru["a_gate"])
        log_a = -8.0 * ga * np.log1p(np.exp(f(lru["a_param"])))
        a = np.exp(log_a + (1j * f(lru["a_imag_param"]) * ga if phase else 0))
        xt = u[t, :modes] + 1j * u[t, modes:] if phase else u[t]
        if pos[t] == 0:
            h = gx * xt
        else:
            h = a * h + np.sqrt(1 - np.exp(2 * log_a)) * (gx * xt)
        ys[t] = np.concatenate([h.real, h.imag]) if phase else h
    r = x + dense(ys * gate, rb["linear_out"])
    m = norm(r, p["channel_pre_norm"]["scale"])
    up = p["mlp_block"]["ffw_up"]
    branches = np.einsum("td,cdD->ctD", m, f(up["w"])) + f(up["b"])[:, 0]
    return r + dense(gelu_tanh(branches[0]) * branches[1], p["mlp_block"]["ffw_down"])


def documents(lengths) -> tuple[np.ndarray, np.ndarray]:
    """(segment_ids, segment_pos) of packed documents of these lengths."""
    ids = np.concatenate([np.full(n, i) for i, n in enumerate(lengths)])
    pos = np.concatenate([np.arange(n) for n in lengths])
    return ids, pos


@pytest.mark.parametrize("variant", ["real", "complex"])
def test_converted_block_matches_layout_loop_float64(variant):
    """Parameters in recurrentgemma's layout, converted: the block's call on packed
    documents (one of a single position) equals the float64 loop to 1e-10."""
    with jax.enable_x64(True):
        params = their_params(variant, dtype=np.float64)
        block = eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma(params, method="sequential")
        assert isinstance(block.core, eqx_lru.RGLRU) and block.core.document_start == "unnormalised"
        ids, pos = documents([5, 1, 7, 4])
        x = np.random.default_rng(1).normal(size=(ids.size, H))
        y, _ = eqx.filter_jit(block)(
            jnp.asarray(x), eqx.nn.State(block), segment_ids=jnp.asarray(ids)
        )
        np.testing.assert_allclose(y, residual_block_loop(params, x, pos), rtol=1e-10, atol=1e-10)


def _assert_trees_equal(a, b):
    """The same structure, and arrays of the same shapes, dtypes and values."""
    a, b = eqx.filter(a, eqx.is_array), eqx.filter(b, eqx.is_array)
    flat_a, tree_a = jax.tree_util.tree_flatten(a)
    flat_b, tree_b = jax.tree_util.tree_flatten(b)
    assert tree_a == tree_b
    for x, y in zip(flat_a, flat_b, strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("variant", ["real", "complex"])
def test_round_trips(variant):
    """recurrentgemma → eqx_lru → recurrentgemma: every leaf bit for bit but the norms'
    `scale`, whose `1 + scale` (what recurrentgemma multiplies by) is bit for bit;
    eqx_lru → recurrentgemma → eqx_lru: bit for bit (norm weights in [1/2, 2]). The same
    for the RG-LRU alone, both ways."""
    params = their_params(variant)
    back = eqx_lru.recurrentgemma.hawk_block_to_recurrentgemma(
        eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma(params)
    )
    for name in ("temporal_pre_norm", "channel_pre_norm"):
        np.testing.assert_array_equal(
            1 + back[name]["scale"], 1 + jnp.asarray(params[name]["scale"])
        )
        back[name] = params[name]
    _assert_trees_equal(back, params)
    core = eqx_lru.RGLRU(
        N, heads=HEADS, phase=variant != "real", document_start="unnormalised",
        key=jax.random.PRNGKey(1),
    )  # fmt: skip
    ours = eqx_lru.HawkBlock(
        H, N, core=lambda *a, **k: core, conv_width=K, mlp_width=E, key=jax.random.PRNGKey(2)
    )
    ours = eqx.tree_at(
        lambda b: (b.norm.weight, b.mlp_norm.weight), ours,
        tuple(jnp.asarray(np.random.default_rng(3).uniform(0.5, 2, H), jnp.float32) for _ in "ab"),
    )  # fmt: skip
    again = eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma(
        eqx_lru.recurrentgemma.hawk_block_to_recurrentgemma(ours)
    )
    _assert_trees_equal(again, ours)
    assert bool(eqx.tree_equal(again, ours))  # static fields too
    lru = params["recurrent_block"]["rg_lru"]
    _assert_trees_equal(
        eqx_lru.recurrentgemma.rglru_to_recurrentgemma(
            eqx_lru.recurrentgemma.rglru_from_recurrentgemma(lru)
        ),
        lru,
    )
    real = eqx_lru.recurrentgemma.rglru_from_recurrentgemma(
        lru, form="real" if variant != "real" else None
    )
    _assert_trees_equal(eqx_lru.recurrentgemma.rglru_to_recurrentgemma(real), lru)


def test_recurrentgemma_init_distribution():
    """`HawkBlock(init="recurrentgemma", final_scale=s)` against recurrentgemma's
    initialisers (normal, variance scale / fan-in): W_x, W_y 1/H, W_o s/N, the MLP's
    stacked up-kernel 1/(2H) (its fan-in counts both branches), W_d s/E, taps 0.01/K with
    no identity, zero biases, unit norms; the core recurrentgemma's RG-LRU. The default
    `"equinox"` init: uniform weights, 1/√3 of that spread, random biases."""
    h, n, e, k, s = 128, 192, 256, 4, 0.25
    make = functools.partial(eqx_lru.HawkBlock, h, n, conv_width=k, mlp_width=e)

    @eqx.filter_jit  # one compilation for both blocks
    def both(key):
        return make(init="recurrentgemma", final_scale=s, key=key), make(key=key)

    block, default = both(jax.random.PRNGKey(0))
    assert isinstance(block.core, eqx_lru.RGLRU)
    expected = {
        "linear_x": (block.linear_x.weight, 1 / h), "linear_y": (block.linear_y.weight, 1 / h),
        "linear_out": (block.linear_out.weight, s / n), "up": (block.mlp.up.weight, 1 / (2 * h)),
        "down": (block.mlp.down.weight, s / e), "conv": (block.conv.weight, 0.01 / k),
    }  # fmt: skip
    for name, (weight, variance) in expected.items():
        weight = np.asarray(weight, np.float64)
        count = weight.size
        np.testing.assert_allclose(weight.std(), variance**0.5, rtol=5 / count**0.5, err_msg=name)
        assert abs(weight.mean()) < 5 * (variance / count) ** 0.5, name
        # normal, not uniform: the kurtosis of a normal is 3 (a uniform's 1.8)
        kurtosis = np.mean(weight**4) / np.mean(weight**2) ** 2
        assert abs(kurtosis - 3) < 40 / count**0.5, name
    biases = [block.linear_x.bias, block.linear_y.bias, block.linear_out.bias, block.conv.bias,
              block.mlp.up.bias, block.mlp.down.bias, block.core.b_a, block.core.b_x]  # fmt: skip
    assert all(not np.any(np.asarray(b)) for b in biases)
    norms = np.asarray(block.norm.weight), np.asarray(block.mlp_norm.weight)
    assert np.all(norms[0] == 1) and np.all(norms[1] == 1)
    np.testing.assert_allclose(np.asarray(block.core.W_x).std(), n**-0.5, rtol=0.03)
    np.testing.assert_allclose(
        np.asarray(default.linear_x.weight).std(), (3 * h) ** -0.5, rtol=0.02
    )
    assert np.any(np.asarray(default.linear_x.bias))
    np.testing.assert_allclose(np.asarray(default.conv.weight[0]).mean(), 1, atol=0.02)  # identity


def test_bad_trees_and_blocks():
    params = their_params("real")
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="attention block"):
        eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma({**params, "attention_block": {}})
    with pytest.raises(ValueError, match="no `mlp_block`"):
        eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma(
            {k: v for k, v in params.items() if k != "mlp_block"}
        )
    broken = {**params, "recurrent_block": {**params["recurrent_block"], "linear_x": {}}}
    with pytest.raises(ValueError, match="no `recurrent_block/linear_x/kernel`"):
        eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma(broken)
    bad = {**params, "channel_pre_norm": {"scale": np.zeros(H + 1, np.float32)}}
    with pytest.raises(ValueError, match=r"`channel_pre_norm/scale` must have shape \(6,\)"):
        eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma(bad)
    assert eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma({"params": params}).d_model == H
    shapes = eqx.filter_eval_shape  # the modules' structure, without initialising them
    with pytest.raises(TypeError, match="core is ComplexLRU"):
        eqx_lru.recurrentgemma.hawk_block_to_recurrentgemma(
            shapes(eqx_lru.HawkBlock, H, N, core="complex", key=key)
        )
    with pytest.raises(ValueError, match="c=4.0"):
        eqx_lru.recurrentgemma.rglru_to_recurrentgemma(shapes(eqx_lru.RGLRU, N, c=4.0, key=key))
    with pytest.raises((ValueError, TypeError), match="init"):
        eqx_lru.HawkBlock(H, N, init="lecun", key=key)  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match="needs `init='recurrentgemma'`"):
        eqx_lru.HawkBlock(H, N, final_scale=0.5, key=key)
    with pytest.raises(ValueError, match="`final_scale` must be a positive"):
        eqx_lru.HawkBlock(H, N, init="recurrentgemma", final_scale=0.0, key=key)


def test_to_recurrentgemma_refuses_what_recurrentgemma_cannot_compute():
    """Both converters to recurrentgemma refuse a core with eqx_lru's normalised document
    starts (naming `document_start` and the fix; `exact=False` exports it as it is) and
    signed eigenvalues (naming `eigenvalues`), whatever `exact`."""
    rg = eqx_lru.recurrentgemma
    key = jax.random.PRNGKey(0)
    shapes = eqx.filter_eval_shape  # the modules' structure, without initialising them
    plain = shapes(eqx_lru.RGLRU, N, key=key)
    block = shapes(eqx_lru.HawkBlock, H, N, key=key)
    for convert, module in ((rg.rglru_to_recurrentgemma, plain),
                            (rg.hawk_block_to_recurrentgemma, block)):  # fmt: skip
        with pytest.raises(ValueError, match="document_start='normalised'.*exact=False"):
            convert(module)
        assert shapes(functools.partial(convert, exact=False), module)
    signed = functools.partial(eqx_lru.RGLRU, eigenvalues="signed", document_start="unnormalised")
    for convert, module in ((rg.rglru_to_recurrentgemma, shapes(signed, N, key=key)),
                            (rg.hawk_block_to_recurrentgemma,
                             shapes(eqx_lru.HawkBlock, H, N, core=signed, key=key))):  # fmt: skip
        for exact in (True, False):
            with pytest.raises(ValueError, match="eigenvalues='signed'"):
                convert(module, exact=exact)


def _with(params: dict, path: str, value) -> dict:
    """A copy of the nested dict `params` with the leaf at `path` replaced."""
    head, *rest = path.split("/")
    return {**params, head: _with(params[head], "/".join(rest), value) if rest else value}


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("temporal_pre_norm/scale", np.float32(0.5), "must have 1 dimension"),
        ("recurrent_block/conv_1d/w", np.zeros(K, np.float32), "must have 2 dimension"),
        ("mlp_block/ffw_down/kernel", np.zeros(E, np.float32), "must have 2 dimension"),
        ("recurrent_block/rg_lru/a_param", np.float32(1.0), r"must have shape \(8,\)"),
        ("channel_pre_norm/scale", "ones", "floating-point numbers; got str"),
        ("channel_pre_norm/scale", np.ones(H, np.int32), "floating-point numbers; got int32"),
        ("recurrent_block/linear_x/bias", None, "floating-point numbers; got NoneType"),
        ("recurrent_block/rg_lru/a_gate/b", jnp.zeros((HEADS, N // HEADS), jnp.bfloat16),
         "`recurrent_block/rg_lru/a_gate/b` is bfloat16 and `channel_pre_norm/scale` is"),
    ],
)  # fmt: skip
def test_bad_leaves_are_refused_by_path(path, value, message):
    """Every leaf of a tree given to a converter: its shape (a 0-d leaf where an axis is
    read), its kind (a string, integers, None) and one floating dtype for the tree (a
    bfloat16 leaf among float32); each refused with its path."""
    params = _with(their_params("real"), path, value)
    with pytest.raises(ValueError, match=path if "`" not in message else message):
        eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma(params)
    with pytest.raises(ValueError, match=message):
        eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma(params)
    if path.startswith("recurrent_block/rg_lru/"):
        lru = params["recurrent_block"]["rg_lru"]
        with pytest.raises(ValueError, match=path.removeprefix("recurrent_block/rg_lru/")):
            eqx_lru.recurrentgemma.rglru_from_recurrentgemma(lru)


# --- recurrentgemma's own layers (installed by ./dev.sh) ----------------------------------


def _their_block(rg, variant, scan="ASSOCIATIVE_NATIVE"):
    return rg.modules.ResidualBlock(
        scan_type=getattr(rg.common.ScanType, scan),
        width=H, mlp_expanded_width=E, num_heads=HEADS, attention_window_size=16,
        temporal_block_type=rg.common.TemporalBlockType.RECURRENT, lru_width=N,
        conv1d_temporal_width=K, lru_only_real=variant == "real",
    )  # fmt: skip


LONG = 4096


@pytest.mark.slow
def test_matches_recurrentgemma_residual_block(variant="real"):
    """recurrentgemma's `ResidualBlock` (its associative scan: its sequential one unrolls
    128 steps, a minute of compiling on a CPU) and the converted `HawkBlock` on 4096
    positions of packed documents (lengths from 1 to 1500), float32: outputs within 1e-5
    of the largest output, gradients (every parameter in recurrentgemma's layout, through
    the converter, and the input) within 1e-4 of each leaf's largest entry. Its complex
    variant: `test_rglru.py::test_matches_recurrentgemma` (the layer, documents too)."""
    rg = load()
    theirs = _their_block(rg, variant)
    params = jax.tree_util.tree_map(jnp.asarray, their_params(variant, seed=4))
    lengths = [1, 700, 1500, 3, 1, 890]
    lengths.append(LONG - sum(lengths))
    ids, pos = (jnp.asarray(a) for a in documents(lengths))
    x = jnp.asarray(np.random.default_rng(5).normal(size=(LONG, H)), jnp.float32)
    weights = jnp.asarray(np.random.default_rng(6).normal(size=(LONG, H)), jnp.float32)

    def their_loss(params, x):
        y, _ = theirs.apply({"params": params}, x[None], pos[None], return_cache=False)
        return jnp.sum(weights * jnp.sin(y[0])), y[0]

    def our_loss(params, x):
        block = eqx_lru.recurrentgemma.hawk_block_from_recurrentgemma(params)
        y, _ = block(x, eqx.nn.State(block), segment_ids=ids)
        return jnp.sum(weights * jnp.sin(y)), y

    grad = lambda f: jax.jit(jax.value_and_grad(f, argnums=(0, 1), has_aux=True))  # noqa: E731
    with jax.numpy_dtype_promotion("standard"):  # its complex variant writes re + 1j * im
        (_, y_theirs), g_theirs = grad(their_loss)(params, x)
    (_, y_ours), g_ours = grad(our_loss)(params, x)
    scale = float(jnp.max(jnp.abs(y_theirs)))
    error = float(jnp.max(jnp.abs(y_ours - y_theirs)))
    report = [f"outputs: {error:.2e} abs, {error / scale:.2e} rel"]
    np.testing.assert_allclose(y_ours, y_theirs, rtol=0, atol=1e-5 * scale)
    paths = jax.tree_util.tree_flatten_with_path(g_theirs)[0]
    for (path, g_t), g_o in zip(paths, jax.tree_util.tree_leaves(g_ours), strict=True):
        scale = float(jnp.max(jnp.abs(g_t)))
        error = float(jnp.max(jnp.abs(g_o - g_t)))
        report.append(f"{jax.tree_util.keystr(path)}: {error:.2e} abs, {error / scale:.2e} rel")
        np.testing.assert_allclose(g_o, g_t, rtol=0, atol=1e-4 * scale, err_msg=str(path))
    print("\n".join(report))


@pytest.mark.slow
def test_round_trip_to_recurrentgemma_is_exact_at_document_starts():
    """eqx_lru → recurrentgemma, run by recurrentgemma's own layers on packed documents
    (one of a single position; `segment_pos` 0 at each start): a `HawkBlock` (real RG-LRU,
    `document_start="unnormalised"`) through its `ResidualBlock`, and the complex RG-LRU
    alone through its `RGLRU`, equal eqx_lru's call with `segment_ids` to 1e-6 of the
    largest output (float32)."""
    rg = load()
    ids, pos = (jnp.asarray(a) for a in documents([3, 1, 5, 4]))
    rng = np.random.default_rng(8)
    x = jnp.asarray(rng.normal(size=(ids.size, H)), jnp.float32)
    u = jnp.asarray(rng.normal(size=(ids.size, N)), jnp.float32)
    start: dict[str, Any] = dict(document_start="unnormalised")
    core = functools.partial(eqx_lru.RGLRU, heads=HEADS, **start)
    block = eqx_lru.HawkBlock(H, N, core=core, conv_width=K, mlp_width=E, key=jax.random.PRNGKey(3))
    assert isinstance(block.core, eqx_lru.RGLRU)
    block = eqx.tree_at(
        lambda b: (b.norm.weight, b.mlp_norm.weight, b.core.b_a), block,
        (jnp.asarray(rng.uniform(0.5, 2, H), jnp.float32),
         jnp.asarray(rng.uniform(0.5, 2, H), jnp.float32),
         jnp.asarray(rng.normal(size=block.core.b_a.shape), jnp.float32)),
    )  # fmt: skip
    lru = eqx_lru.RGLRU(N, heads=HEADS, phase=True, key=jax.random.PRNGKey(4), **start)
    their_layer = rg.layers.RGLRU(
        width=N, num_heads=HEADS, only_real=False, scan_type=rg.common.ScanType.ASSOCIATIVE_NATIVE
    )

    @eqx.filter_jit
    def runs(block, lru, x, u):
        block_params = eqx_lru.recurrentgemma.hawk_block_to_recurrentgemma(block)
        lru_params = eqx_lru.recurrentgemma.rglru_to_recurrentgemma(lru)
        with jax.numpy_dtype_promotion("standard"):  # its complex variant: re + 1j * im
            theirs = _their_block(rg, "real").apply(
                {"params": block_params}, x[None], pos[None], return_cache=False
            )[0][0]
            their_lru = their_layer.apply({"params": lru_params}, u[None], pos[None])[0][0]
        ours = block(x, eqx.nn.State(block), segment_ids=ids)[0]
        return (theirs, ours), (their_lru, lru(u, segment_ids=ids))

    for theirs, ours in runs(block, lru, x, u):
        scale = float(jnp.max(jnp.abs(theirs)))
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6 * scale)

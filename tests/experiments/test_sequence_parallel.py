"""`eqx_lru.SequenceParallel`: the recurrence over a length axis split across devices.

Two kinds of checks:

- in this process, the chunks as a `jax.vmap` axis with a name (the collectives of
  `SequenceParallel` work over it just as over a mesh axis): values only (JAX traces a
  custom VJP's backward pass under `vmap` without its axis names), fast, under the
  suite's jaxtyping/beartype checks;
- on 4 CPU devices inside `jax.shard_map`, in one subprocess (XLA's device count is fixed
  when JAX starts; this process already has one device): the scan and the stack (layers,
  `LRUBlock`, `LRUModel`) against one device, values and gradients. Marked slow.

Every reference is the single-device computation of the same library (itself tested
against NumPy float64 loops in test_scan.py), plus one float64 loop here.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru
from eqx_lru._scan._methods import scan_method

ALGEBRAS = {
    # name: (algebra, state shape, dtype)
    "diagonal": (eqx_lru.Diagonal(), (3,), np.float32),
    "complex": (eqx_lru.Diagonal(), (3,), np.complex64),
    "rotation": (eqx_lru.RotationScaling(), (2, 3), np.float32),
    "block2x2": (eqx_lru.Block2x2(), (3, 2), np.float32),
    "planar": (eqx_lru.Block2x2(planar=True), (2, 3), np.float32),
    "dense": (eqx_lru.DenseAlgebra(), (4,), np.float32),
}


def _random(rng, shape, dtype, scale=1.0):
    x = rng.normal(size=shape) * scale
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.normal(size=shape) * scale
    return jnp.asarray(x.astype(dtype))


def _problem(name, *, shared, segments, length, seed=0):
    """(algebra, a, b, h0, segment_ids, weights) of one recurrence; the transitions are
    scaled so the states stay of order one."""
    rng = np.random.default_rng(seed)
    algebra, state, dtype = ALGEBRAS[name]
    transition = algebra.transition_shape(state)
    a = _random(rng, (() if shared else (length,)) + transition, dtype, 0.4)
    b = _random(rng, (length,) + state, dtype)
    h0 = _random(rng, state, dtype)
    ids = None
    if segments:
        ids = jnp.asarray(np.cumsum(rng.random(length) < 0.3).astype(np.int32))
    w = _random(rng, (length,) + state, dtype)
    return algebra, a, b, h0, ids, w


def _loss_fn(recurrence, w):
    def loss(a, b, h0):
        return jnp.sum((w * recurrence(a, b, h0)).real)

    return jax.value_and_grad(loss, argnums=(0, 1, 2))


def _relative_errors(expected, got):
    pairs = zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(got), strict=True)
    return [float(jnp.max(jnp.abs(x - y)) / (1e-6 + jnp.max(jnp.abs(x)))) for x, y in pairs]


def _recurrence(algebra, reverse, method):
    """`linear_recurrence` as a function of `(a, b, h0, ids)`: the body of every run here
    (one device, the chunks of a vmap axis, the shards of a mesh)."""

    def run(a, b, h0, ids):
        return eqx_lru.linear_recurrence(
            a,
            b,
            algebra=algebra,
            initial_state=h0,
            reverse=reverse,
            method=method,
            segment_ids=ids,
        )

    return run


def _single_device(algebra, ids, reverse):
    body = _recurrence(algebra, reverse, "sequential")
    return lambda a, b, h0: body(a, b, h0, ids)


# ------------------------------------------------------------ in process: a vmap axis


def _over_vmap_axis(algebra, ids, reverse, shared, chunks, local):
    """The recurrence with its length axis split into `chunks` along a named vmap axis."""
    chunk = _recurrence(algebra, reverse, eqx_lru.SequenceParallel("chunks", local))

    def run(a, b, h0):
        split = lambda x: None if x is None else x.reshape((chunks, -1) + x.shape[1:])  # noqa: E731
        in_axes = (None if shared else 0, 0, None, None if ids is None else 0)
        hs = jax.vmap(chunk, in_axes=in_axes, axis_name="chunks")(
            a if shared else split(a), split(b), h0, split(ids)
        )
        return hs.reshape(b.shape)

    return run


_VMAP_CASES = [
    # (algebra, shared, reverse, segments, local)
    ("diagonal", True, False, False, "sequential"),
    ("complex", False, True, True, "sequential"),
    ("rotation", True, True, False, "associative"),
    ("rotation", False, False, True, "sequential"),
    ("block2x2", False, True, False, "associative"),
    ("planar", True, False, False, "sequential"),
    ("dense", False, False, True, "sequential"),
    ("dense", True, True, False, "sequential"),
]


@pytest.mark.parametrize("name,shared,reverse,segments,local", _VMAP_CASES)
def test_chunks_match_one_device(name, shared, reverse, segments, local):
    chunks, length = 3, 15
    algebra, a, b, h0, ids, w = _problem(name, shared=shared, segments=segments, length=length)
    del w
    expected = _single_device(algebra, ids, reverse)(a, b, h0)
    method = scan_method(local)
    got = jax.jit(_over_vmap_axis(algebra, ids, reverse, shared, chunks, method))(a, b, h0)
    errors = _relative_errors(expected, got)
    assert max(errors) < 1e-5, errors


def test_segments_cross_chunk_boundaries_float64_loop():
    """Segments that start exactly at, just after and across chunk boundaries, against a
    NumPy float64 loop (complex diagonal, per-step transitions, both directions)."""
    chunks, length = 4, 12
    rng = np.random.default_rng(3)
    a = _random(rng, (length, 2), np.complex64, 0.6)
    b = _random(rng, (length, 2), np.complex64)
    h0 = _random(rng, (2,), np.complex64)
    ids = jnp.asarray([0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3], jnp.int32)  # starts at 3, 7, 9
    for reverse in (False, True):
        run = _over_vmap_axis(eqx_lru.Diagonal(), ids, reverse, False, chunks, eqx_lru.Sequential())
        got = np.asarray(jax.jit(run)(a, b, h0))
        an, bn, idn = np.asarray(a, np.complex128), np.asarray(b, np.complex128), np.asarray(ids)
        h, out = np.asarray(h0, np.complex128), np.zeros((length, 2), np.complex128)
        order = range(length - 1, -1, -1) if reverse else range(length)
        previous = None
        for k in order:
            if previous is not None and idn[k] != idn[previous]:
                h = np.zeros(2, np.complex128)
            h = an[k] * h + bn[k]
            out[k], previous = h, k
        np.testing.assert_allclose(got, out, rtol=1e-5, atol=1e-5)


def test_outside_shard_map_names_the_axis():
    a, b = jnp.full((3,), 0.5), jnp.ones((4, 3))
    with pytest.raises(NameError, match="inside `jax.shard_map`"):
        eqx_lru.linear_recurrence(
            a, b, algebra=eqx_lru.Diagonal(), method=eqx_lru.SequenceParallel("seq")
        )


def test_local_method_checked():
    with pytest.raises(ValueError, match="another SequenceParallel"):
        eqx_lru.SequenceParallel("a", eqx_lru.SequenceParallel("b"))
    with pytest.raises(ValueError, match="must be one of"):
        eqx_lru.SequenceParallel("a", "fast")
    assert eqx_lru.SequenceParallel("a", "sequential").local == eqx_lru.Sequential()


# ------------------------------------------------------------ 4 CPU devices, shard_map

DEVICES = 4


@pytest.mark.slow
def test_four_devices():
    """Runs this file as a script on 4 virtual CPU devices (see `_device_checks`)."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={DEVICES}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, __file__],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [json.loads(line) for line in lines]
    failed = [r for r in results if not r["ok"]]
    assert results and not failed, failed


def _scan_cases():
    # (algebra, shared, reverse, initial state, segments, local, check_vma)
    return [
        ("diagonal", True, False, True, False, "sequential", False),
        ("complex", False, True, True, True, "sequential", True),
        ("complex", True, False, True, False, "sequential", True),
        ("rotation", True, True, True, False, "sequential", False),
        ("rotation", False, False, True, True, "associative", True),
        ("block2x2", False, True, True, True, "sequential", False),
        ("planar", True, False, False, False, "associative", False),
        ("dense", False, False, True, True, "sequential", False),
        ("dense", True, True, True, False, "sequential", True),
    ]


def _scan_check(mesh, case, length):
    """One recurrence of `length` steps padded to a multiple of the devices (forward: pads
    at the end; reverse: at the start, so that they are processed last), sharded."""
    from jax.sharding import PartitionSpec as P

    name, shared, reverse, init, segments, local, check_vma = case
    algebra, a, b, h0, ids, w = _problem(name, shared=shared, segments=segments, length=length)
    if not init:
        h0 = jnp.zeros_like(h0)
    expected = _loss_fn(_single_device(algebra, ids, reverse), w)(a, b, h0)
    pad = -length % DEVICES
    method = eqx_lru.SequenceParallel("seq", scan_method(local))

    def padded(x, fill=0):
        widths = [(pad, 0) if reverse else (0, pad)] + [(0, 0)] * (x.ndim - 1)
        return jnp.pad(x, widths, constant_values=fill)

    body = _recurrence(algebra, reverse, method)
    specs = (P() if shared else P("seq"), P("seq"), P(), None if ids is None else P("seq"))
    sharded = jax.shard_map(
        body, mesh=mesh, in_specs=specs, out_specs=P("seq"), check_vma=check_vma
    )

    def run(a, b, h0):
        pids = None if ids is None else padded(ids, -1)
        hs = sharded(a if shared else padded(a), padded(b), h0, pids)
        return hs[pad:] if reverse else hs[:length]

    got = jax.jit(_loss_fn(run, w))(a, b, h0)
    return _relative_errors(expected, got)


def _device_checks():
    from jax.sharding import Mesh

    assert len(jax.devices()) == DEVICES, jax.devices()
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    mesh = Mesh(np.asarray(jax.devices()), ("seq",))
    checks = [
        (f"scan {case} length {length}", lambda c=case, n=length: _scan_check(mesh, c, n))
        for case, length in zip(_scan_cases(), [13, 16, 14, 15, 13, 17, 16, 13, 15], strict=True)
    ]
    checks += _stack_checks()
    if len(sys.argv) > 1:  # run only the checks whose label contains this
        checks = [(label, check) for label, check in checks if sys.argv[1] in label]
    for label, check in checks:
        try:
            errors = check()
            ok, detail = max(errors) < 2e-5, errors
        except Exception as e:  # report and go on with the other checks
            ok, detail = False, repr(e)[:1500]
        print(json.dumps({"check": label, "ok": ok, "detail": detail}), flush=True)


def _stack_case(core, bidirectional, pooling, remat, norm, lengths, size):
    """An `LRUModel` (distinct sizes: vocabulary 7, H 6, N 5, depth 2) in training mode
    over a batch of token sequences of `size` positions, the sequence split over the 4
    devices (padded to a multiple of 4 by `length=`), against the same model on one
    device: the outputs, the batch-norm state and the gradient of every parameter."""
    import functools

    import equinox as eqx
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.asarray(jax.devices()), ("seq",))
    layer = {"complex": eqx_lru.ComplexLRU, "real": eqx_lru.RealLRU}[core]

    def build(method):
        block = functools.partial(
            eqx_lru.LRUBlock,
            core=functools.partial(layer, r_min=0.5, method=method),
            bidirectional=bidirectional,
            norm=norm,
        )
        return eqx.nn.make_with_state(eqx_lru.LRUModel)(
            7,
            3 if pooling else None,
            6,
            5,
            2,
            encoder="embedding",
            pooling=pooling,
            block=block,
            remat=remat,
            key=jax.random.PRNGKey(1),
        )

    (one, state), (split, _) = build("sequential"), build(eqx_lru.SequenceParallel("seq"))
    one_params, one_static = eqx.partition(one, eqx.is_inexact_array)
    split_params, split_static = eqx.partition(split, eqx.is_inexact_array)
    rng = np.random.default_rng(2)
    padded = size + (-size % DEVICES)
    x = jnp.asarray(rng.integers(0, 7, (len(lengths), padded)), jnp.int32)
    length = jnp.asarray(lengths, jnp.int32)

    def batch(static):
        def run(params, state, x, length):
            model = eqx.combine(params, static)
            call = lambda x, n: model(x, state, length=n)  # noqa: E731
            return jax.vmap(call, axis_name="batch", out_axes=(0, None))(x, length)

        return run

    out_spec = P() if pooling else P(None, "seq")
    sharded = jax.shard_map(
        batch(split_static),
        mesh=mesh,
        in_specs=(P(), P(), P(None, "seq"), P()),
        out_specs=(out_spec, P()),
        check_vma=False,
    )

    def loss(run):
        def f(params):
            fresh = jax.tree_util.tree_map(lambda y: y, state)  # a state used once
            out, new_state = run(params, fresh, x, length)
            stats = jax.tree_util.tree_leaves(new_state)
            w = jnp.cos(jnp.arange(out.size, dtype=out.dtype)).reshape(out.shape)
            return jnp.sum(w * out), (out, stats)

        return jax.jit(jax.value_and_grad(f, has_aux=True))

    (v0, (o0, s0)), g0 = loss(batch(one_static))(one_params)
    (v1, (o1, s1)), g1 = loss(sharded)(split_params)

    def floats(tree):
        return [y for y in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(y.dtype, jnp.floating)]

    return _relative_errors([v0, o0, *floats(s0), *floats(g0)], [v1, o1, *floats(s1), *floats(g1)])


def _stack_checks():
    cases = [
        # core, bidirectional, pooling, remat, norm, lengths, size
        ("complex", False, "mean", False, "batch", [13, 9, 5], 13),
        ("real", True, "last", False, "batch", [14, 3, 8], 14),
        ("real", True, "mean", True, "batch", [16, 16, 11], 16),
        ("complex", True, None, False, "layer", [15, 6, 10], 15),
        ("real", False, "last", True, "layer", [12, 12, 4], 12),
    ]
    return [(f"stack {case}", lambda c=case: _stack_case(*c)) for case in cases]


# ------------------------------------------------------------ the trainer, 4 CPU devices

_TRAINER = """
import json, shutil, sys
from pathlib import Path
from experiments.lra import synthetic, train
from experiments.runs.metrics import read_records
import jax
assert jax.device_count() == 4, jax.devices()
root = Path(sys.argv[1])
synthetic.write_listops(root / "data", (64, 16, 16), seed=0, min_length=10, max_length=38)
base = ["--task", "listops", "--data-root", str(root / "data"), "--steps", "20",
        "--batch-size", "8", "--d-model", "8", "--d-state", "4", "--depth", "2",
        "--dropout", "0", "--bidirectional", "--eval-every", "10", "--log-every", "1",
        "--checkpoint-every", "5", "--no-progress"]
def train_losses(out):
    return [r["loss"] for r in read_records(out / "metrics.jsonl") if r["split"] == "train"]
result = {}
for n in ("1", "2", "4"):
    out = root / f"n{n}"
    summary = train.run(base + ["--out", str(out), "--sequence-parallel", n])
    result[n] = {"losses": train_losses(out), "devices": summary["devices"],
                 "seq_len": summary.get("seq_len")}
out = root / "resumed"
train.run(base + ["--out", str(out), "--sequence-parallel", "2", "--stop-at", "7"])
train.run(base + ["--out", str(out), "--resume"])
result["resumed"] = {"losses": train_losses(out)}
result["exact"] = (out / "last.eqx").read_bytes() == (root / "n2" / "last.eqx").read_bytes()
print(json.dumps(result))
"""


@pytest.mark.slow
def test_trainer_sequence_parallel(tmp_path):
    """`--sequence-parallel 2` and `4` on 4 CPU devices (a 2 x 2 and a 1 x 4 mesh): the
    losses of 20 ListOps steps equal those of `--sequence-parallel 1` (sequences of a
    length not divisible by 4 are padded), and a run stopped at step 7 and resumed ends
    bit-identical to the uninterrupted one."""
    env = dict(os.environ)
    flags = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}"
    env["XLA_FLAGS"] = flags.strip()
    env["JAX_PLATFORMS"] = "cpu"
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", _TRAINER, str(tmp_path)],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    one = np.asarray(result["1"]["losses"])
    assert len(one) == 20
    for n in ("2", "4"):
        np.testing.assert_allclose(result[n]["losses"], one, rtol=1e-5)
    np.testing.assert_array_equal(result["resumed"]["losses"], result["2"]["losses"])
    assert result["exact"]


@pytest.mark.usefixtures("restore_backend_env")
def test_trainer_refuses_a_split_that_does_not_divide_the_devices(tmp_path, capsys):
    from experiments.lra import synthetic, train

    synthetic.write_listops(tmp_path / "data", (8, 4, 4), seed=0, min_length=5, max_length=9)
    args = [
        "--task",
        "listops",
        "--data-root",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "out"),
        "--batch-size",
        "2",
        "--no-progress",
    ]
    n = jax.device_count() + 1
    assert train.main([*args, "--sequence-parallel", str(n)]) == 2
    assert f"--sequence-parallel {n} must divide the number of devices" in capsys.readouterr().err
    assert train.main([*args, "--sequence-parallel", "0"]) != 0  # refused by the parser


if __name__ == "__main__":
    _device_checks()

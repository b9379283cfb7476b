"""The transformations users apply, with their defaults (issue 39 class 2), and settings
that are finite as Python numbers but overflow or underflow once used (class 3).

- `jax.shard_map` with `check_vma=True` (its default), on 4 CPU devices in one subprocess
  (XLA's device count is fixed when JAX starts): a batch split over the devices (data
  parallelism) through every core of `conformance.CORES`, and a sequence split over them
  (`SequenceParallel`) through an `LRUModel` with a traced `length`, which used to fail
  ("scan body function carry input and carry output must have equal types", "cond
  branches must have equal output types" in the run-time check).
- forward mode (`jax.jacfwd`, `jax.hessian`) through `linear_recurrence`, which used to
  be "can't apply forward-mode autodiff (jvp) to a custom_vjp function", against reverse
  mode in float64.
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

DEVICES = 4


def test_shard_map_defaults_on_four_devices():
    env = dict(os.environ)
    flags = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}"
    env["XLA_FLAGS"] = flags.strip()
    env["JAX_PLATFORMS"] = "cpu"
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tests = os.path.join(repo, "tests")
    env["PYTHONPATH"] = os.pathsep.join([repo, tests, os.path.join(tests, "lib")])
    proc = subprocess.run(
        [sys.executable, __file__], env=env, cwd=repo, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert results, proc.stdout[-3000:]
    failed = [r for r in results if not r["ok"]]
    assert not failed, failed


def _subprocess_checks():
    import equinox as eqx
    from conformance import CORES
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.asarray(jax.devices()), ("data",))
    key = jax.random.key(0)
    rng = np.random.default_rng(0)
    for name, case in CORES.items():
        core = case.make(*case.sizes, key=key)
        shape = (8, 7) if case.scalar_input else (8, 7, case.sizes[0])
        u = jnp.asarray(rng.normal(size=shape), jnp.float32)
        expected = jax.jit(jax.vmap(core))(u)
        f = jax.shard_map(jax.vmap(core), mesh=mesh, in_specs=P("data"), out_specs=P("data"))
        try:
            error = float(jnp.max(jnp.abs(jax.jit(f)(u) - expected)))
            print(json.dumps({"case": name, "ok": error < 1e-5, "error": error}))
        except Exception as e:  # noqa: BLE001 - reported as the failure
            print(json.dumps({"case": name, "ok": False, "error": str(e)[:300]}))
    # A sequence split over the devices, through a model with a traced length.
    seq = Mesh(np.asarray(jax.devices()), ("seq",))

    def model_of(method):
        block = lambda *a, **k: eqx_lru.LRUBlock(  # noqa: E731
            *a, core=lambda *a, **k: eqx_lru.RealLRU(*a, method=method, **k), **k
        )
        return eqx.nn.make_with_state(eqx_lru.LRUModel)(
            7, 3, 6, 5, 2, encoder="embedding", pooling="mean", block=block, key=key
        )

    tokens = jnp.asarray(rng.integers(0, 7, 16), jnp.int32)
    one, state = model_of("sequential")
    split, _ = model_of(eqx_lru.SequenceParallel("seq"))
    expected = one(tokens, state, length=11, inference=True)[0]
    f = jax.shard_map(
        lambda x, n: split(x, state, length=n, inference=True)[0],
        mesh=seq, in_specs=(P("seq"), P()), out_specs=P(),
    )  # fmt: skip
    try:
        error = float(jnp.max(jnp.abs(eqx.filter_jit(f)(tokens, jnp.int32(11)) - expected)))
        print(json.dumps({"case": "model sequence-parallel", "ok": error < 1e-5, "error": error}))
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"case": "model sequence-parallel", "ok": False, "error": str(e)[:300]}))
    try:
        jax.block_until_ready(eqx.filter_jit(f)(tokens, jnp.int32(40)))
        print(json.dumps({"case": "length out of range", "ok": False, "error": "accepted"}))
    except Exception as e:  # noqa: BLE001
        ok = "`length` must be between 1 and" in str(e)
        print(json.dumps({"case": "length out of range", "ok": ok, "error": str(e)[-300:]}))


@pytest.mark.parametrize("method", ["sequential", "associative"])
def test_forward_mode_matches_reverse_mode(method):
    rng = np.random.default_rng(1)
    algebra = eqx_lru.RotationScaling()
    with jax.enable_x64(True):
        a = jnp.asarray(rng.normal(size=(7, 2, 3)) * 0.5)
        b = jnp.asarray(rng.normal(size=(7, 2, 3)))
        h0 = jnp.asarray(rng.normal(size=(2, 3)))

        def loss(a):
            h = eqx_lru.linear_recurrence(a, b, algebra=algebra, initial_state=h0, method=method)
            return jnp.sum(jnp.sin(h))

        forward = jax.jit(jax.hessian(loss))(a)
        reverse = jax.jit(jax.jacrev(jax.jacrev(loss)))(a)
        np.testing.assert_allclose(forward, reverse, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "build,name",
    [
        (lambda v: eqx_lru.lru_optimizer(learning_rate=v, total_steps=10), "learning_rate"),
        (lambda v: eqx_lru.lru_optimizer(learning_rate=1e-3, total_steps=10, eps=v), "eps"),
        (lambda v: eqx_lru.lru_schedule(1e-3, 10, init_value=v), "init_value"),
        (lambda v: eqx_lru.MaskedBatchNorm(3, eps=v), "eps"),
        (lambda v: eqx_lru.baselines.S4D(3, 4, dt_min=v, key=jax.random.key(0)), "dt_min"),
    ],
)
@pytest.mark.parametrize("value", [float("nan"), 1e39, 1e-45])
def test_settings_that_break_once_used_are_refused(build, name, value):
    with pytest.raises(ValueError, match=f"`{name}`"):
        build(value)


if __name__ == "__main__":
    _subprocess_checks()

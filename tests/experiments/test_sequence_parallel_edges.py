"""What sequence parallelism supports, computes right, and what it refuses in one line.

On 4 CPU devices inside `jax.shard_map`, in one subprocess (as `test_sequence_parallel.py`:
XLA's device count is fixed when JAX starts): a core's final state of the whole sequence
(forward, with `length`, reverse) and S4D's convolution mode agree with one device; pooling
per packed sequence and `LRUBlock.chunk`/`LRUModel.chunk` (which used to return values off
by O(1)), an axis name the mesh does not have and a concrete out-of-range `length` (which
used to be JAX's `unbound axis name` and an `INTERNAL` runtime error) raise our error at
trace time. Distinct sizes: vocabulary 7, H 6, N 5 (S4D: N 4), 4 devices, length 16.
"""

import functools
import json
import os
import subprocess
import sys
import time
from typing import Literal, cast

import numpy as np
import pytest

DEVICES = 4


@pytest.mark.slow
def test_sequence_parallel_edges_on_four_devices():
    env = dict(os.environ)
    flags = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={DEVICES}"
    env["XLA_FLAGS"] = flags.strip()
    env["JAX_PLATFORMS"] = "cpu"
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, __file__],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(_CHECKS), proc.stdout[-3000:]
    failed = [r for r in results if not r["ok"]]
    assert not failed, failed


# ------------------------------------------------------------ the checks (subprocess)


def _model(method, pooling, norm: Literal["batch", "layer"] | None = "layer"):
    import equinox as eqx
    import jax

    import eqx_lru

    block = functools.partial(
        eqx_lru.LRUBlock,
        core=functools.partial(eqx_lru.RealLRU, r_min=0.5, method=method),
        norm=norm,
    )
    return eqx.nn.make_with_state(eqx_lru.LRUModel)(
        7, 3, 6, 5, 2, encoder="embedding", pooling=pooling, block=block, key=jax.random.key(1)
    )


def _sharded(f, in_specs, out_specs):
    import jax
    from jax.sharding import Mesh

    mesh = Mesh(np.asarray(jax.devices()), ("seq",))
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)


def _tokens():
    import jax.numpy as jnp

    return jnp.asarray(np.random.default_rng(0).integers(0, 7, 16), jnp.int32)


def _final_states():
    """`run`'s final state on 4 devices equals one device's, for the LRU in both forms and
    S4D, forward (whole sequence, `length` on the third device, on the first) and
    reverse."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    import eqx_lru

    key = jax.random.key(0)
    u = jax.random.normal(jax.random.key(2), (16, 6))
    lru, clru, s4d = (
        functools.partial(eqx_lru.RealLRU, 6, 5, key=key),
        functools.partial(eqx_lru.ComplexLRU, 6, 5, key=key),
        functools.partial(eqx_lru.baselines.S4D, 6, 4, form="real", key=key),
    )
    errors = []
    for build, runs in (
        (lru, [{}, dict(reverse=True)]),
        (clru, [dict(length=11)]),
        (s4d, [dict(length=3)]),
    ):
        one, split = build(method="sequential"), build(method=eqx_lru.SequenceParallel("seq"))
        for options in runs:
            expected = jax.jit(lambda u, c=one, o=options: c.run(u, **o)[1])(u)
            run = _sharded(lambda u, c=split, o=options: c.run(u, **o)[1], P("seq"), P())
            errors.append(float(jnp.max(jnp.abs(jax.jit(run)(u) - expected))))
    return errors


def _s4d_convolution():
    """S4D's convolution mode over a split sequence runs its recurrence: one device's
    values (the convolution would see one chunk only)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    import eqx_lru

    u = jax.random.normal(jax.random.key(2), (16, 6))

    def build(method):
        return eqx_lru.baselines.S4D(6, 4, mode="convolution", method=method, key=jax.random.key(0))

    expected = build("sequential")(u)
    split = build(eqx_lru.SequenceParallel("seq"))
    got = jax.jit(_sharded(split, P("seq"), P("seq")))(u)
    return [float(jnp.max(jnp.abs(got - expected)))]


def _refused(error, match, call) -> list[float | str]:
    try:
        call()
    except error as e:
        message = str(e)
        return [0.0] if match in message and "\n" not in message else [f"wrong message: {e}"]
    except Exception as e:  # noqa: BLE001 - reported as the failure
        return [f"{type(e).__name__}: {str(e)[:500]}"]
    return ["accepted"]


def _segment_pooling():
    from jax.sharding import PartitionSpec as P

    import eqx_lru

    model, state = _model(eqx_lru.SequenceParallel("seq"), "mean")
    ids = np.repeat(np.arange(3, dtype=np.int32), [5, 7, 4])

    def call(x, ids):
        return model(x, state, segment_ids=ids, num_segments=3, inference=True)[0]

    run = _sharded(call, (P("seq"), P("seq")), P())
    return _refused(ValueError, "Pooling per packed sequence", lambda: run(_tokens(), ids))


def _chunks():
    from jax.sharding import PartitionSpec as P

    import eqx_lru

    model, state = _model(eqx_lru.SequenceParallel("seq"), None)
    chunk = lambda x: model.chunk(model.init_carry(), x, state)[1]  # noqa: E731
    block = cast(eqx_lru.LRUBlock, model.blocks[0])
    block_chunk = lambda h: block.chunk(block.init_carry(), h, state)[1]  # noqa: E731
    h = np.ones((16, 6), np.float32)
    return _refused(
        ValueError,
        "`LRUModel.chunk` does not run",
        lambda: _sharded(chunk, P("seq"), P())(_tokens()),
    ) + _refused(
        ValueError, "`LRUBlock.chunk` does not run", lambda: _sharded(block_chunk, P("seq"), P())(h)
    )


def _unbound_axis():
    """`SequenceParallel("zz")` in a mesh of axis "seq": with `length` (was JAX's
    `unbound axis name: zz`) and batch norm in training (was batch norm's advice)."""
    import jax
    from jax.sharding import PartitionSpec as P

    import eqx_lru

    model, state = _model(eqx_lru.SequenceParallel("zz"), "mean")
    with_length = _sharded(lambda x: model(x, state, length=9, inference=True)[0], P("seq"), P())
    bn_model, bn_state = _model(eqx_lru.SequenceParallel("zz"), "mean", norm="batch")
    batch = jax.vmap(lambda x: bn_model(x, bn_state)[0], axis_name="batch")
    training = _sharded(batch, P(None, "seq"), P())
    match = "SequenceParallel('zz') scans a length axis sharded over the mesh axis 'zz'"
    return _refused(NameError, match, lambda: with_length(_tokens())) + _refused(
        NameError, match, lambda: training(_tokens()[None])
    )


def _length_out_of_range():
    """A concrete `length` of 40 > 16 (was an `INTERNAL` runtime error) is refused at
    trace time; a traced one under `eqx.filter_jit` reads in the library's words."""
    import equinox as eqx
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    import eqx_lru

    model, state = _model(eqx_lru.SequenceParallel("seq"), "mean")
    concrete = _sharded(lambda x: model(x, state, length=40, inference=True)[0], P("seq"), P())
    traced = _sharded(
        lambda x, n: model(x, state, length=n, inference=True)[0], (P("seq"), P()), P()
    )
    errors = _refused(
        ValueError,
        "`length` must be between 1 and the padded length of the whole sequence 16",
        lambda: concrete(_tokens()),
    )
    try:
        eqx.filter_jit(traced)(_tokens(), jnp.int32(40)).block_until_ready()
        errors.append("accepted")
    except eqx.EquinoxRuntimeError as e:
        errors.append(0.0 if "padded length of the whole sequence 16" in str(e) else str(e))
    return errors


_CHECKS = {
    "final states": _final_states,
    "S4D convolution": _s4d_convolution,
    "pooling per packed sequence": _segment_pooling,
    "chunk": _chunks,
    "unbound axis": _unbound_axis,
    "length out of range": _length_out_of_range,
}


def _main():
    import jax

    assert len(jax.devices()) == DEVICES, jax.devices()
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    for label, check in _CHECKS.items():
        start = time.perf_counter()
        try:
            errors = check()
            ok = all(isinstance(e, float) and e < 2e-5 for e in errors)
        except Exception as e:  # noqa: BLE001 - report and go on with the other checks
            ok, errors = False, repr(e)[:1500]
        seconds = round(time.perf_counter() - start, 1)
        print(json.dumps({"check": label, "ok": ok, "detail": errors, "s": seconds}), flush=True)


if __name__ == "__main__":
    _main()

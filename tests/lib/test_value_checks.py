"""Every value check of the library under every way of passing the value
(`value_checks.py`: the entry points × the ways).

For each entry point and way: a valid value gives the plain call's output; an invalid one
is refused at once by a one-line `ValueError` naming the argument when the value is known
while tracing (Python, NumPy, a concrete JAX array, one closed over inside `jit`), by the
run-time check carrying the same message when it is traced (`jit`, `vmap`, `grad`,
`checkpoint`, `scan`), and not at all in an exported program (which skips run-time
checks). Integers beyond int32, which only Python and NumPy values hold, are refused, not
wrapped. Then the messages of values that a narrower dtype cannot hold, and `dt` closed
over inside `jit` and through a rematerialised model for every core that takes it.
"""

import functools
import re
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import CORES
from value_checks import ENTRIES, KNOWN_WAYS, TRACED_WAYS, export

import eqx_lru
from eqx_lru._runtime_check import skipped_checks

#: The plain call's output on the valid value, per entry (NumPy way; computed once).
PLAIN: dict = {}


def _plain(name):
    if name not in PLAIN:
        entry = ENTRIES[name]
        PLAIN[name] = jax.tree_util.tree_map(np.asarray, entry.call(entry.valid))
    return PLAIN[name]


def _same(got, name) -> None:
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(np.asarray(a), b, rtol=1e-6, atol=1e-6),
        got,
        _plain(name),
    )


def _one_line(error: pytest.ExceptionInfo) -> None:
    assert "\n" not in str(error.value), str(error.value)


@pytest.mark.parametrize("name", list(ENTRIES))
def test_known_values(name):
    """Python (scalars), NumPy, a concrete JAX array, one closed over inside `jit`: the
    plain call's output, or a one-line `ValueError` at once; an integer beyond int32 that
    only Python and NumPy hold is refused, not wrapped."""
    entry = ENTRIES[name]
    for way, run in KNOWN_WAYS.items():
        if way == "python" and np.ndim(entry.valid):
            continue  # a Python value is a scalar
        if way == "numpy":
            _plain(name)  # the plain call itself
        else:
            _same(run(entry, entry.valid), name)
        if entry.invalid is not None:
            with pytest.raises(ValueError, match=entry.match) as error:
                run(entry, entry.invalid)
            _one_line(error)
        if entry.wide is not None and way in ("python", "numpy"):
            with pytest.raises(ValueError, match=entry.wide_match) as error:
                run(entry, entry.wide)
            _one_line(error)


@pytest.mark.parametrize("name", list(ENTRIES))
def test_traced_values(name):
    """Under `jit`, `vmap`, `grad`, `checkpoint` and `scan` (all in one `jax.jit`): each
    holds the run-time check with the error's message, the valid value gives the plain
    call's output every way, and an invalid one raises that message at run time."""
    entry = ENTRIES[name]
    calls = {way: wrap(entry.call) for way, wrap in TRACED_WAYS.items()}
    if entry.invalid is not None:
        for way, call in calls.items():
            messages = [c["message"] for c in skipped_checks(jax.make_jaxpr(call)(entry.valid))]
            assert any(re.search(entry.match, m) for m in messages), (way, messages)
    run = jax.jit(lambda v: {way: call(v) for way, call in calls.items()})
    for got in run(entry.valid).values():
        _same(got, name)
    if entry.invalid is not None:
        with pytest.raises(Exception, match=entry.match):
            jax.block_until_ready(run(entry.invalid))


@pytest.mark.parametrize("name", list(ENTRIES))
def test_exported(name):
    """`jax.export`: the plain call's output; the program skips run-time checks, so an
    invalid value runs (the export manifest lists the check as not performed)."""
    entry = ENTRIES[name]
    _same(export(entry, entry.valid), name)
    if entry.invalid is not None:
        jax.block_until_ready(export(entry, entry.invalid))


@pytest.mark.parametrize(
    "dt, match",
    [
        (1e-45, r"`dt` = 1e-45 underflows float32: .*smallest normal number 1.175e-38"),
        (np.float64(1e-40), r"`dt` = 1e-40 underflows float32"),
        (np.full(5, 1e-46), r"`dt` = 1e-46 \(at position 0\) underflows float32"),
        (1e39, r"`dt` = 1e\+39 overflows float32, whose largest number is 3.403e\+38"),
        (np.r_[1.0, 1.0, -3.0, 1.0, 1.0], r"positive and finite .*got -3.0 \(at position 2\)"),
        (jnp.asarray(1e-40), r"`dt` = 9.99\d*e-41 underflows float32"),  # a subnormal float32
        (np.float16(0.5), None),  # a narrower float is converted up: fine
    ],
)
def test_steps_a_dtype_cannot_hold(dt, match):
    """A positive `dt` that underflows the parameters' dtype is refused as such, naming
    the value given and the dtype (it was "must be positive; got 0.0"), and one that
    overflows likewise; the same inside `jit` for the value closed over."""
    core = ENTRIES["core_dt"].call
    if match is None:
        core(dt)
        return
    with pytest.raises(ValueError, match=match) as error:
        core(dt)
    _one_line(error)
    if isinstance(dt, jax.Array):
        with pytest.raises(ValueError, match=match):
            jax.jit(lambda: core(dt))()


@pytest.mark.parametrize(
    "length, match",
    [(2**31, "got 2147483648"), (2**40, "got 1099511627776"), (2**70, "got 1180591620717411303424"),
     (np.uint64(2**63), "got 9223372036854775808")],
)  # fmt: skip
def test_integers_beyond_int32_are_refused_not_wrapped(length, match):
    with pytest.raises(ValueError, match=f"`length` must be between 1 and .*; {match}"):
        ENTRIES["model_length"].call(length)
    with pytest.raises(ValueError, match=r"`slot` must be .*\[0, 3\); " + match):
        ENTRIES["pool_admit"].call(length)


def _core_class(make):
    """The class a conformance core factory builds, read without building it (through
    `functools.partial`s and the width-adapting closure)."""
    while not isinstance(make, type):
        if isinstance(make, functools.partial):
            make = make.func
        elif closure := getattr(make, "__closure__", None):
            make = closure[0].cell_contents
        else:
            return None
    return make


#: The first conformance core of each class that takes `dt`.
DT_CORES = list({
    _core_class(case.make): name for name, case in reversed(CORES.items())
    if getattr(_core_class(case.make), "takes_dt", False)
}.values())  # fmt: skip


def test_the_dt_cores_are_found():
    names = {cast(type, _core_class(CORES[n].make)).__name__ for n in DT_CORES}
    assert names == {
        "ComplexLRU",
        "RealLRU",
        "RGLRU",
        "S5",
        "ComplexSelectiveLRU",
        "RealSelectiveLRU",
    }, names


@pytest.mark.slow
@pytest.mark.parametrize("name", DT_CORES)
def test_dt_closed_over_and_rematerialised_for_every_core(name):
    """Issue 33's crash: a concrete `dt` closed over inside `jit` (float64 parameters, so
    the step needs no conversion), and `LRUModel(remat=True)` with `dt=`, call and
    gradient, for every core that takes `dt`."""
    case = CORES[name]
    with jax.enable_x64(True):
        core = case.make(*case.sizes, dtype=jnp.float64, key=jax.random.PRNGKey(1))
        u = jnp.asarray(np.linspace(-1, 1, 5 * case.sizes[0]).reshape(5, case.sizes[0]))
        dt = jnp.asarray(np.linspace(0.5, 2, 5))
        bad = -dt
        # One program: `dt` closed over (a known value inside `jit`), and as its argument.
        closed, argument = jax.jit(lambda d: (core(u, dt=dt), core(u, dt=d)))(dt)
        np.testing.assert_allclose(closed, argument, rtol=1e-12)
        with pytest.raises(ValueError, match="positive and finite"):
            jax.jit(lambda: core(u, dt=bad))()
    block = functools.partial(eqx_lru.LRUBlock, core=case.make)
    models = [
        eqx.nn.make_with_state(eqx_lru.LRUModel)(
            *case.sizes[:1], None, *case.sizes, 2, block=block, remat=remat,
            key=jax.random.PRNGKey(2),
        ) for remat in (False, True)
    ]  # fmt: skip
    x = np.linspace(-1, 1, 5 * case.sizes[0], dtype=np.float32).reshape(5, case.sizes[0])
    steps = jnp.asarray(np.linspace(0.5, 2, 5, dtype=np.float32))  # closed over

    @eqx.filter_jit
    def loss_and_grad(model, state):
        def loss(model):
            return jnp.sum(model(x, state, dt=steps, inference=True)[0])

        return eqx.filter_value_and_grad(loss)(model)

    (plain, state), (remat, _) = models
    (want, grads), (got, remat_grads) = (loss_and_grad(m, state) for m in (plain, remat))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(*map(jax.tree_util.tree_leaves, (remat_grads, grads)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

"""Checkpoints written by eqx_lru 0.2 load into today's modules and give the same outputs.

`eqx.tree_serialise_leaves` (the LRA trainer's format) stores the array leaves in field
order, with nothing but their shapes to check on loading: a reordered, renamed-into-place or
regrouped field would load someone else's weights, or fail. The files under
`data/checkpoints/` (see `SOURCE` there) hold every core and model of `checkpoint_cases.py`
with the input and output of the version that wrote them.
"""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from checkpoint_cases import CASES, model_case

import eqx_lru

DATA = Path(__file__).parent / "data" / "checkpoints"


def _load(name: str, like):
    saved = np.load(DATA / f"{name}.npz")
    return eqx.tree_deserialise_leaves(DATA / f"{name}.eqx", like), saved["x"], saved["y"]


def test_every_case_has_a_checkpoint():
    written = {p.stem for p in DATA.glob("*.eqx")}
    assert written == set(CASES), "cases without a checkpoint, or checkpoints without a case"


@pytest.mark.parametrize("name", sorted(CASES))
def test_old_checkpoint_loads_and_gives_its_outputs(name):
    build, run, _ = CASES[name]
    # Another key: the loaded values, not the init, must give the saved outputs.
    like = build(jax.random.PRNGKey(2**20 + 7))
    (module, state), x, y = _load(name, like)
    fresh, loaded = (jax.tree_util.tree_leaves(eqx.filter(m, eqx.is_array)) for m in (like, module))
    assert any(not np.array_equal(a, b) for a, b in zip(fresh, loaded, strict=True))
    np.testing.assert_allclose(
        np.asarray(eqx.filter_jit(run)(module, state, jnp.asarray(x))), y, rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize(
    "name, build_real",
    [
        ("complex_lru", lambda key: (eqx_lru.RealLRU(3, 4, key=key), None)),
        ("model_bidirectional", model_case(bidirectional=True, core="real")[0]),
    ],
)
def test_complex_checkpoint_loads_into_the_real_form(name, build_real):
    """The two forms share one parameterisation and one leaf layout: weights trained in
    the complex form run in the real form (no complex number) as the same function."""
    _, run, _ = CASES[name]
    (module, state), x, y = _load(name, build_real(jax.random.PRNGKey(3)))
    cores = [b.core for b in module.blocks] if name.startswith("model") else [module]
    assert cores and all(isinstance(c, eqx_lru.RealLRU) for c in cores)
    y_real = eqx.filter_jit(run)(module, state, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(y_real), y, atol=2e-5)

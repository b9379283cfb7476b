"""The layer table's rows (`experiments.bench.impls`): the RG-LRU's rows are on the CPU's
grid, build and run, and its two forms compute the same function (another function than
the LRU's), so their times compare like for like."""

import jax
import numpy as np

from experiments.bench import impls, traffic

H, N, L = 8, 6, 16


def test_the_rglru_rows_run_and_their_forms_agree():
    assert {"rglru_phase-complex", "rglru_phase-real"} <= set(impls.variants("cpu"))
    names = ["rglru_phase-complex", "rglru_phase-real", "real-sequential"]
    u = jax.random.normal(jax.random.PRNGKey(1), (L, H))
    outputs = {}
    for name in names:
        fn, params = impls.make(name, H, N, key=jax.random.PRNGKey(0))
        outputs[name] = np.asarray(jax.jit(fn)(params, u))
        assert outputs[name].shape == (L, H), name
        assert "rglru" not in name or "RGLRU" in impls.label(name)
    np.testing.assert_allclose(
        outputs["rglru_phase-real"], outputs["rglru_phase-complex"], atol=1e-5
    )
    assert not np.allclose(outputs["rglru_phase-real"], outputs["real-sequential"], atol=1e-3)
    assert (
        traffic.bytes_moved("rglru_phase-real", "grad", B=2, H=H, N=N, L=L) is None
    )  # not modelled

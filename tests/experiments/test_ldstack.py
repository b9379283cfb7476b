"""LDStack (`eqx_lru.baselines` SIMO LDS, `experiments/ldstack`): the modal form equals the
companion form of LDStack eq. (2) through the Vandermonde change of basis (float64 loops); the
LDS stack is exact on its first k steps after k layers and after T layers everywhere; both
scripts run end to end in --fast mode."""

import importlib
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru
from eqx_lru.baselines import StandardSIMOLDS, UnitSIMOLDS, companion_form, vandermonde

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

T, M = 17, 3  # length, outputs (the state sizes below differ from both)


def _dense_loop(a, b, c, d, d0, x):
    """LDStack eq. (1) as a float64 loop: s_0 = 0, y_t = C s_t + D x_t + D0,
    s_{t+1} = A s_t + B x_t. Returns the states s_0..s_{T-1} and the outputs."""
    s, states, ys = np.zeros(a.shape[0]), [], []
    for x_t in x:
        states.append(s)
        ys.append(c @ s + d * x_t + d0)
        s = a @ s + b * x_t
    return np.array(states), np.array(ys)


@pytest.mark.parametrize("cls, n", [(StandardSIMOLDS, 7), (UnitSIMOLDS, 6)])
def test_modal_form_equals_companion_form(cls, n):
    with jax.enable_x64(True):
        layer = cls(n, M, dtype=jnp.float64, key=jax.random.PRNGKey(0))
        layer = eqx_tree_set(layer, "D0", jnp.arange(M, dtype=jnp.float64))
        x = jax.random.normal(jax.random.PRNGKey(1), (T,), jnp.float64)
        lam = np.asarray(layer.eigenvalues())
        assert lam.shape == (n,) and len(set(np.round(lam, 9))) == n  # distinct
        np.testing.assert_allclose(np.sort_complex(lam), np.sort_complex(lam.conj()), atol=1e-12)
        a, b = companion_form(lam)
        np.testing.assert_allclose(
            np.sort_complex(np.linalg.eigvals(a)), np.sort_complex(lam), atol=1e-8
        )
        v = vandermonde(lam)
        np.testing.assert_allclose(v @ b, np.ones(n))  # B' = V B = 1
        c_prime = np.asarray(layer.C_re) + 1j * np.asarray(layer.C_im)
        states, ys = _dense_loop(
            a, b, (c_prime @ v).real, np.asarray(layer.D), np.asarray(layer.D0), np.asarray(x)
        )
        # The modal states are V s_t; the outputs Re(C' s'_t) = Re(C' V) s_t (s_t real).
        np.testing.assert_allclose(np.asarray(layer.states(x)), states @ v.T, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(np.asarray(layer(x)), ys, rtol=1e-9, atol=1e-9)


def eqx_tree_set(module, name, value):
    import equinox as eqx

    return eqx.tree_at(lambda m: getattr(m, name), module, value)


def test_parameterisations():
    layer = UnitSIMOLDS(8, M, key=jax.random.PRNGKey(0))
    np.testing.assert_allclose(jnp.abs(layer.eigenvalues()), 1.0, rtol=1e-6)
    assert np.all(np.abs(layer.theta) <= 2 * np.pi)
    std = StandardSIMOLDS(9, M, key=jax.random.PRNGKey(1))
    assert 2 * std.alpha.shape[0] + std.alpha_real.shape[0] == 9 and std.d_state == 9
    # Roots of a monic polynomial with N(0, 1/n) coefficients cluster near the unit circle.
    assert 0.6 < float(jnp.median(jnp.abs(std.eigenvalues()))) < 1.4
    labels = eqx_lru.lru_param_labels(std)
    assert labels.alpha == labels.beta == labels.alpha_real == "recurrent"
    assert labels.C_re == "decay"
    with pytest.raises(ValueError, match="even"):
        UnitSIMOLDS(7, M, key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="d_out"):
        StandardSIMOLDS(4, 0, key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="length"):
        std(jnp.zeros((0,)))
    with pytest.raises(ValueError, match="dtype"):
        std(jnp.zeros((T,), jnp.float16))
    with pytest.raises(ValueError, match="conjugation"):
        companion_form(np.array([0.5j, 0.2]))


def test_stack_is_exact_after_t_layers():
    from experiments.ldstack.stack import D, N, ldstack, random_rnn, rnn_np

    length = 9
    rng = np.random.default_rng(0)
    a, b = random_rnn(rng, 0.9, 1.0)  # strongly nonlinear: no luck from contraction
    x = rng.standard_normal((length, D))
    exact = rnn_np(a, b, x)
    with jax.enable_x64(True):
        layers = np.asarray(ldstack(a, b, x, length + 1, method="associative"))
    assert layers.shape == (length + 1, length, N)
    err = np.abs(layers - exact[None]).max(-1)  # (layer, step): step i holds s_{i+1}
    for k in range(length + 1):
        assert err[k, :k].max(initial=0.0) < 1e-12, (k, err[k])  # s_1..s_k exact
    assert err[0].max() > 1e-2  # the linear RNN alone is not
    assert err[length].max() < 1e-12


def _run(name: str, tmp_path: Path) -> dict:
    module = importlib.import_module(f"experiments.ldstack.{name}")
    module.main(["--fast", "--out", str(tmp_path)])
    png = tmp_path / f"{name}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return json.loads((tmp_path / f"{name}.json").read_text())


@pytest.mark.slow
def test_projections_script(tmp_path):
    data = _run("projections", tmp_path)
    assert data["identity_split_relative_error"] < 1e-5  # d unit projections sum to MISO
    # One projection is unbiased but very noisy: measured variance near the exact one.
    assert 0.6 < data["relative_variance_single"] / data["expected_relative_variance_single"] < 1.6
    rms = [row["relative_rms_of_mean_square"] for row in data["averages"]]
    assert rms[-1] < rms[0] / 3 and -0.7 < data["log_log_slope"] < -0.3


@pytest.mark.slow
def test_stack_script(tmp_path):
    data = _run("stack", tmp_path)
    mild = data["errors"][0]
    assert mild["relative_max_error"][-1] < 1e-6 * mild["relative_max_error"][0]
    for case in data["errors"]:
        assert all(p >= k for k, p in enumerate(case["exact_prefix_steps"]))
    assert all(row["rnn_sequential_s"] > 0 for row in data["timings"])

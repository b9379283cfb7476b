"""Every `experiments/paper` script runs end to end in `--fast` mode (in-process `main(argv)`)
and writes a PNG and a JSON whose numbers make sense."""

import importlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest` without `python -m`: make `experiments` importable
    sys.path.insert(0, str(ROOT))


def _run(name: str, tmp_path: Path) -> tuple[dict, dict]:
    module = importlib.import_module(f"experiments.paper.{name}")
    returned = module.main(["--fast", "--out", str(tmp_path)])
    png = tmp_path / f"{name}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 5_000 < png.stat().st_size < 400_000
    written = json.loads((tmp_path / f"{name}.json").read_text())
    return returned, written


@pytest.mark.slow
def test_ring_init(tmp_path):
    _, data = _run("ring_init", tmp_path)
    assert len(data["settings"]) == 4
    for setting in data["settings"]:
        # Lemma 3.2: |λ|² ~ U[r_min², r_max²] and arg λ ~ U[0, max_phase].
        assert setting["modulus_sq_p"] > 1e-3 and setting["phase_p"] > 1e-3, setting
        assert setting["modulus_sq_ks"] < 0.05 and setting["phase_ks"] < 0.05
    assert any(
        s["r_min"] == 0.999 and math.isclose(s["max_phase"], math.pi / 10) for s in data["settings"]
    )
    # Thm. 3.1: a Glorot A has its spectrum ≈ uniform on the unit disk, P(|λ| <= 1/2) = 1/4.
    assert 0.7 < data["glorot_dense"]["spectral_radius"] < 1.4
    assert abs(data["glorot_dense"]["fraction_modulus_below_half"] - 0.25) < 0.12


@pytest.mark.slow
def test_forward_blowup(tmp_path):
    _, data = _run("forward_blowup", tmp_path)
    for ring in data["rings"]:
        without, with_gamma = ring["without_gamma"], ring["with_gamma"]
        # Measured E‖x_k‖²/E‖Bu‖² against the exact expectation for the sampled λ.
        assert 0.7 < without["measured_over_expected"] < 1.3, ring
        assert 0.7 < with_gamma["measured_over_expected"] < 1.3, ring
        # γ normalisation removes the blow-up: the limit is exactly 1 with γ.
        assert math.isclose(with_gamma["expected_limit"], 1.0, rel_tol=1e-4)
        # Without γ the state grows, roughly as Prop. 3.3 predicts for the ring.
        assert without["measured_final"] > 1.5
        assert 0.5 < without["expected_limit"] / ring["prop33_limit"] < 1.5
    limits = [ring["prop33_limit"] for ring in data["rings"]]
    assert limits == sorted(limits)  # closer to the unit circle, bigger blow-up


def test_impulse_response(tmp_path):
    _, data = _run("impulse_response", tmp_path)
    uniform, small = data["cases"]
    for case in data["cases"]:
        assert case["max_abs_error_vs_closed_form"] < 1e-3  # the scan gives λ^k
    assert max(small["theta"]) <= math.pi / 50
    assert np.mean(uniform["oscillations_over_length"]) > 5 * np.mean(
        small["oscillations_over_length"]
    )
    assert math.isclose(data["decay_at_end"], math.exp(-5e-5 * (data["length"] - 1)))


@pytest.mark.slow
def test_conv_kernel(tmp_path):
    _, data = _run("conv_kernel", tmp_path)
    for kind in ("linear", "tanh"):
        for lr, log_loss in data["final_log10_mean"][kind].items():
            assert math.isfinite(log_loss)
            # Training makes progress from the initial loss.
            assert 10**log_loss < np.mean(data["initial_loss"][kind]), (kind, lr)
    assert set(data["linear_better"]) == {str(lr) for lr in data["learning_rates"]}


@pytest.mark.slow
def test_parameterization(tmp_path):
    _, data = _run("parameterization", tmp_path)
    for param in ("real+imag", "exponential"):
        for fractions in data["converged_fraction"][param].values():
            assert all(0 <= f <= 1 for f in fractions)
    # At a small learning rate the exponential parameterisation converges from every start.
    smallest = str(min(data["learning_rates"]))
    assert min(data["converged_fraction"]["exponential"][smallest]) == 1.0
    assert len(data["trajectories"]) == 4


@pytest.mark.slow
def test_spectrum(tmp_path, getkey):
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import eqx_lru
    from experiments.paper.spectrum import spectrum_report

    returned, data = _run("spectrum", tmp_path)
    names = [layer["name"] for layer in data["layers"]]
    assert "stacked diag_exp[1]" in names and "real form [0.9, 0.999]" in names
    by_name = {layer["name"]: layer for layer in data["layers"]}
    pathx = by_name["PathX [0.999, 0.9999] π/10"]
    # 1/(1 - |λ|) on the ring [0.999, 0.9999] lies in [1000, 10000] steps.
    assert 900 < pathx["memory_length"]["q0"] <= pathx["memory_length"]["q100"] < 10_100
    assert pathx["phase"]["q100"] <= math.pi / 10 + 1e-6
    assert all(layer["unstable"] == 0 for layer in data["layers"])

    # The walk works on any pytree, e.g. layers nested in a list inside a Module (the demo's
    # layers again and a dense core of test_ablation's sizes: compiled already).
    from experiments.paper.spectrum import demo_model

    demo = demo_model(4, 16, jax.random.PRNGKey(0))

    class Wrapper(eqx.Module):
        layers: list

    ring = demo["Text [0.5, 0.9]"]
    report = spectrum_report(Wrapper([ring, eqx_lru.ablation.LinearDenseRNN(3, 5, key=getkey())]))
    assert [layer["name"] for layer in report["layers"]] == ["layers/0", "layers/1"]
    modulus = report["layers"][0]["modulus"]
    assert 0.5 - 1e-6 <= modulus["q0"] <= modulus["q100"] <= 0.9 + 1e-6
    assert report["layers"][1]["type"] == "LinearDenseRNN" and report["layers"][1]["d_state"] == 5
    stacked = demo["stacked diag_exp"]
    nu = stacked.lambda_.nu
    unstable = eqx.tree_at(lambda m: m.lambda_.nu, stacked, -jnp.ones_like(nu))  # |λ| = e
    assert [layer["unstable"] for layer in spectrum_report(unstable)["layers"]] == [4, 4]

"""The many-streams benchmarks' arithmetic and tables (`experiments.bench.streams`,
`streams_claims`), from made-up measurements: no model is built, nothing is timed."""

import numpy as np

from experiments.bench import report, streams, streams_claims

INFO = report.machine_info()


def _row(runtime, n, cpu, ms=None):
    temp = None if runtime.startswith("onnx") else 4096.0
    return {"runtime": runtime, "streams": n, "ms": ms or cpu, "cpu_ms": cpu}, {
        "carry_bytes": 12800.0,
        "temp_bytes_per_stream": temp,
    }


def test_streams_ratios_are_taken_within_each_round():
    rows = [
        _row("jax-complex", 1, [1.0, 2.0, 4.0]),
        _row("jax-real", 1, [2.0, 2.0, 2.0]),
        _row("onnxruntime", 1, [3.0, 6.0, 12.0]),  # 3x the complex step in every round
        _row("onnxruntime (optimisation off)", 1, [2.0, 4.0, 6.0]),
    ]
    results = {"rows": [r | i for r, i in rows], "onnx_error": None, "load": [(1.0, 1.0, 1.0)]}
    ratios = {r["runtime"]: r["ratios"] for r in streams.onnx_ratios(results)}
    assert ratios["onnxruntime"]["complex"] == [3.0, 3.0, 3.0]
    np.testing.assert_allclose(ratios["onnxruntime"]["real"], [1.5, 3.0, 6.0])
    np.testing.assert_allclose(ratios["onnxruntime (optimisation off)"]["complex"], [2, 2, 1.5])
    text = streams.render(streams.QUICK, results, INFO)
    assert "| onnxruntime | 1 | 3.00× [3.00×, 3.00×] | 3.00× [1.50×, 6.00×] |" in text
    assert "| jax-real | 1 | 2.000 [2.000, 2.000] | 2.000 [2.000, 2.000] |" in text


def test_claims_are_ratios_of_the_same_round():
    grid = streams_claims.QUICK
    p, (n,), (b1, b2) = grid["position"], grid["prefixes"], grid["batches"]
    cpu = {("onnx", b1): [4.0, 8.0], ("onnx", b2): [1.0, 1.0]}
    for form, scale in (("complex", 1.0), ("real", 2.0)):
        cpu |= {(form, b1, 0): [scale, 2 * scale], (form, b2, 0): [1.0, 2.0]}
        cpu |= {(form, 1, p): [scale, scale], (form, "prefix", n): [100 * scale, 100 * scale]}
    claims = dict(streams_claims.claims(grid, cpu))
    np.testing.assert_allclose(claims["complex step ÷ real step (batch 1)"], [0.5, 0.5])
    np.testing.assert_allclose(claims[f"real step at position {p:,} ÷ at 0 (batch 1)"], [1, 0.5])
    label = f"complex: parallel call on a {n:,}-token prefix ÷ one step (batch 1)"
    np.testing.assert_allclose(claims[label], [100.0, 50.0])
    np.testing.assert_allclose(claims["onnxruntime step ÷ JAX real step (batch 1)"], [2, 2])
    np.testing.assert_allclose(
        claims[f"onnxruntime step ÷ JAX complex step (batch {b2})"], [1, 0.5]
    )
    text = streams_claims.render(grid, {"cpu": cpu, "load": [(1.0, 1.0, 1.0)]}, INFO)
    assert "| complex step ÷ real step (batch 1) | 0.50 [0.50, 0.50] |" in text

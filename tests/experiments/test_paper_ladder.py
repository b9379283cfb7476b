"""The ablation-ladder table (`experiments/paper/ladder.py`) runs end to end in `--fast` mode
(in-process `main(argv)`) and writes a table with every requested rung and finite numbers."""

import csv
import json
import math
import sys
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `pytest` without `python -m`: make `experiments` importable
    sys.path.insert(0, str(ROOT))

RUNGS = ("linear_dense", "lru")  # a dense core (DenseAlgebra scan) and the LRU


@pytest.mark.slow
def test_fast_ladder(tmp_path):
    from experiments.paper import ladder

    returned = ladder.main(["--fast", "--out", str(tmp_path), "--rungs", ",".join(RUNGS)])

    png = tmp_path / "ladder.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "ladder.json").read_text())
    assert [r["rung"] for r in data["rungs"]] == list(RUNGS)
    assert data["settings"]["seeds"] == [0]
    for record in data["rungs"]:
        for name in ("test_accuracy", "train_accuracy", "final_train_loss"):
            (value,) = record[name]
            assert math.isfinite(value), (record["rung"], name, value)
        assert 0 <= record["test_accuracy"][0] <= 1
        assert record["final_train_loss"][0] > 0
        assert len(record["loss_curve"]) == 1  # one seed

    table = (tmp_path / "ladder.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(RUNGS)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert math.isfinite(float(cells[3]))  # test accuracy (%), one seed: no "± s.e."
        assert math.isfinite(float(cells[4]))  # final train loss

    with (tmp_path / "ladder.csv").open() as f:
        assert [row["rung"] for row in csv.DictReader(f)] == list(RUNGS)
    assert set(returned["summary"]) == set(RUNGS)


def test_every_rung_gets_the_recurrent_learning_rate(getkey):
    """§D.2 for every rung, not only the LRU: the core's A/Λ and B parameters are labelled
    "recurrent" (lr × factor, no weight decay); C, D and everything else "decay"."""
    from experiments.paper import ladder

    for rung, make_core in ladder.ABLATION_CORES.items():
        core = make_core(3, 4, key=getkey())
        labels = ladder.ladder_param_labels(eqx.filter(core, eqx.is_inexact_array))
        named = {path[0].name: label for path, label in jax.tree_util.tree_leaves_with_path(labels)}
        recurrent = {name for name, label in named.items() if label == "recurrent"}
        assert {"C", "C_re", "C_im", "D"}.isdisjoint(recurrent), rung
        assert recurrent & {"B", "B_re"}, rung
        assert recurrent & {"A", "lambda_", "nu_log"}, rung  # A / λ's parameters
        assert set(named.values()) <= {"recurrent", "decay"}, rung


def test_mean_and_standard_error():
    from experiments.paper.ladder import mean_se

    mean, se = mean_se([0.2, 0.4, 0.6])
    assert math.isclose(mean, 0.4) and math.isclose(se, 0.2 / math.sqrt(3))
    mean, se = mean_se([0.5, float("nan")])  # non-finite values are left out
    assert mean == 0.5 and math.isnan(se)
    assert all(math.isnan(v) for v in mean_se([float("nan")]))
    assert np.isfinite(mean_se(np.array([1.0, 2.0]))).all()

"""The LRA trainer under bad input and faults (issue 12): every user-caused problem is one
`error:` line naming the flag or file with status 2, a failed run (non-finite loss, out of
memory) one line with status 1, and no checkpoint is trusted blindly.

The CLI runs in-process on tiny ListOps sets written by `experiments.lra.generate`, shared
by the module; the settings match `test_lra_train.py`, so the jitted steps compile once.
"""

import json
import shutil
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest

from experiments.lra import _checkpoint as ckpt
from experiments.lra import generate, train
from experiments.lra._metrics import read_records
from experiments.lra.data import load_task
from experiments.lra.steps import build_model, make_optimizer


def _args(data, out, *extra):
    return [
        "--task", "listops", "--data-root", str(data), "--out", str(out), "--steps", "8",
        "--batch-size", "8", "--d-model", "8", "--d-state", "4", "--depth", "1", "--dropout",
        "0.1", "--eval-every", "4", "--log-every", "1", "--checkpoint-every", "3",
        "--no-progress", *extra,
    ]


# The trainer sets XLA_FLAGS / XLA_PYTHON_CLIENT_PREALLOCATE; conftest puts them back.
pytestmark = pytest.mark.usefixtures("restore_backend_env")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Three ListOps sets: the normal one, another (different examples), and one with an
    empty val split."""
    root = tmp_path_factory.mktemp("lra_bad")
    kw = dict(min_length=10, max_length=40)
    generate.write_listops(root / "ok", (96, 20, 20), seed=0, **kw)
    generate.write_listops(root / "other", (96, 20, 20), seed=1, **kw)
    generate.write_listops(root / "no_val", (40, 0, 10), seed=0, **kw)
    return root


@pytest.fixture(scope="module")
def stopped(data, tmp_path_factory):
    """A run stopped at step 5 (checkpoint written): copy it before damaging it."""
    out = tmp_path_factory.mktemp("stopped") / "run"
    assert train.main(_args(data / "ok", out, "--stop-at", "5")) == 0
    return out


def _copy(run, tmp_path):
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def _error(capsys) -> str:
    """The single `error:` line of stderr (fails if there is a traceback)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith(("error:", "python -m experiments.lra.train: error:"))]
    assert len(lines) == 1, err
    return lines[0]


def test_empty_validation_split_is_refused_before_training(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main(_args(data / "no_val", out)) == 2
    line = _error(capsys)
    assert "val split" in line and "empty" in line
    assert not (out / "last.eqx").exists() and not read_records(out / "metrics.jsonl")


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--lr", "nan", "a finite number > 0"),
        ("--lr", "inf", "a finite number > 0"),
        ("--lr-factor", "nan", "a finite number > 0"),
        ("--lr", "0", "a finite number > 0"),
        ("--weight-decay", "-0.1", "a finite number >= 0"),
        ("--warmup-fraction", "1.5", "a finite number >= 0 and < 1"),
        ("--dropout", "1", "a finite number >= 0 and < 1"),
        ("--d-model", "0", "an integer >= 1"),
        ("--steps", "-3", "an integer >= 1"),
        ("--time-limit", "nan", "a finite number > 0"),
    ],
)
def test_numeric_flags_are_checked_at_parse_time(flag, value, expected, data, tmp_path, capsys):
    assert train.main(_args(data / "ok", tmp_path / "run", flag, value)) == 2
    line = _error(capsys)
    assert f"argument {flag}: expected {expected}" in line and repr(value) in line
    assert not (tmp_path / "run").exists()  # before anything is touched


def test_non_finite_loss_stops_the_run(data, tmp_path, capsys, monkeypatch):
    """From step 5 on, a label outside the classes: the log-likelihood gathers NaN (as a
    diverging run would produce), with the same compiled step."""
    host_batch = train.host_batch

    def poisoned(task, split, idx, *, padded):
        out = host_batch(task, split, idx, padded=padded)
        if not padded and poisoned.calls >= 5:
            out["label"] = np.full_like(out["label"], 99)
        poisoned.calls += not padded
        return out

    poisoned.calls = 0
    monkeypatch.setattr(train, "host_batch", poisoned)
    out = tmp_path / "run"
    assert train.main(_args(data / "ok", out, "--log-every", "2")) == 1
    line = _error(capsys)
    assert "the training loss (nan) became non-finite at step 6" in line and "--lr" in line
    assert "last checkpoint" in line and "(step 3) is kept" in line
    assert not (out / "results.json").exists()
    assert json.loads((out / "last.json").read_text())["step"] == 3  # not overwritten


def test_truncated_checkpoint_is_named(stopped, data, tmp_path, capsys):
    out = _copy(stopped, tmp_path)
    blob = (out / "last.eqx").read_bytes()
    (out / "last.eqx").write_bytes(blob[: len(blob) // 2])
    assert train.main(_args(data / "ok", out, "--resume")) == 2
    line = _error(capsys)
    assert str(out / "last.eqx") in line and "corrupt or truncated" in line


def test_flipped_byte_in_checkpoint_is_detected(stopped, data, tmp_path, capsys):
    out = _copy(stopped, tmp_path)
    blob = bytearray((out / "last.eqx").read_bytes())
    blob[len(blob) // 2] ^= 0x40  # a weight: same size, still readable; only the checksum sees it
    (out / "last.eqx").write_bytes(bytes(blob))
    assert train.main(_args(data / "ok", out, "--resume")) == 2
    assert "SHA-256 does not match" in _error(capsys)


def test_non_finite_checkpoint_is_refused(stopped, data, tmp_path, capsys):
    out = _copy(stopped, tmp_path)
    meta = json.loads((out / "last.json").read_text())
    (params, *rest), _ = ckpt.load(out, "last", _template(data / "ok", out))
    leaves, treedef = jax.tree_util.tree_flatten(params)
    leaves[0] = np.full_like(leaves[0], np.nan)
    # A NaN in a weight, with a valid checksum (as if the run had trained into it).
    ckpt.save(out, "last", (jax.tree_util.tree_unflatten(treedef, leaves), *rest), meta)
    assert train.main(_args(data / "ok", out, "--resume")) == 2
    line = _error(capsys)
    assert "non-finite values" in line and "last.eqx" in line


def _template(root, out):
    """The training state's structure, as `train` builds it, for a test to edit a checkpoint."""
    cfg = json.loads((out / "config.json").read_text())
    model, bn_state = build_model(cfg, load_task("listops", root), jax.random.PRNGKey(0))
    params = eqx.filter(model, eqx.is_inexact_array)
    optim, _ = make_optimizer(cfg)
    return (params, bn_state, optim.init(params), jax.random.PRNGKey(0), np.asarray(0, np.int64))


@pytest.mark.parametrize("name", ["last.json", "config.json"])
def test_truncated_json_is_named_as_corrupt(name, stopped, data, tmp_path, capsys):
    out = _copy(stopped, tmp_path)
    text = (out / name).read_text()
    (out / name).write_text(text[: len(text) // 2])
    assert train.main(_args(data / "ok", out, "--resume")) == 2
    line = _error(capsys)
    assert str(out / name) in line and "corrupt" in line


def test_json_without_pending_is_named_as_corrupt(stopped, data, tmp_path, capsys):
    out = _copy(stopped, tmp_path)
    meta = json.loads((out / "last.json").read_text())
    del meta["pending"]
    (out / "last.json").write_text(json.dumps(meta))
    assert train.main(_args(data / "ok", out, "--resume")) == 2
    line = _error(capsys)
    assert "last.json is corrupt" in line and "'pending'" in line


def test_resume_with_changed_data_is_refused_unless_allowed(stopped, data, tmp_path, capsys):
    out = _copy(stopped, tmp_path)
    args = _args(data / "other", out, "--resume")
    assert train.main(args) == 2
    line = _error(capsys)
    assert "differ from those the checkpoint" in line and "--allow-data-change" in line
    assert train.main(args + ["--allow-data-change"]) == 0
    assert json.loads((out / "results.json").read_text())["status"] == "finished"


def test_unwritable_out_and_cache_dir(data, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    assert train.main(_args(data / "ok", blocker / "run")) == 2
    assert "--out" in _error(capsys)
    assert train.main(_args(data / "ok", tmp_path / "run", "--cache-dir", str(blocker))) == 2
    line = _error(capsys)
    assert "--cache-dir" in line and str(blocker) in line


def test_malformed_data_file_is_one_line(data, tmp_path, capsys):
    root = tmp_path / "data"
    shutil.copytree(data / "ok", root)
    path = root / "listops-1000" / "basic_train.tsv"
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = lines[3].split("\t")[0] + "\tseven\n"
    path.write_text("".join(lines))
    assert train.main(_args(root, tmp_path / "run")) == 2
    assert "basic_train.tsv" in _error(capsys)


class XlaRuntimeError(RuntimeError):
    """Stands in for jaxlib's error type (same name, same base)."""


def test_out_of_memory_is_one_clear_line(data, tmp_path, capsys, monkeypatch):
    def oom(self, carry, batch):
        raise XlaRuntimeError(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 38654705664 bytes.\n"
            + "\n".join(f"  frame {i}" for i in range(40))
        )

    monkeypatch.setattr(train._Loop, "step", oom)
    assert train.main(_args(data / "ok", tmp_path / "run")) == 1
    line = _error(capsys)
    assert line.startswith("error: out of memory") and "RESOURCE_EXHAUSTED" in line
    for advice in ("--remat", "--batch-size 4", "more devices", "XLA_PYTHON_CLIENT_PREALLOCATE=false"):
        assert advice in line
    # A real bug keeps its traceback.
    monkeypatch.setattr(train._Loop, "step", lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        train.main(_args(data / "ok", tmp_path / "run2"))

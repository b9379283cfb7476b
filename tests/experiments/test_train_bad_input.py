"""The LRA trainer under bad input and faults (issue 12): every user-caused problem is one
`error:` line naming the flag or file with status 2, a failed run (non-finite loss, out of
memory) one line with status 1, and no checkpoint is trusted blindly.

The CLI runs in-process on tiny ListOps sets written by `experiments.lra.generate`, shared
by the module; the settings match `test_lra_train.py`, so the jitted steps compile once.
"""

import errno
import json
import os
import re
import shutil
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest
from listops_argv import listops_argv

from experiments.lra import _setup, _training, synthetic, train
from experiments.lra.config import RunConfig
from experiments.lra.steps import build_model, make_optimizer
from experiments.lra.tasks import load_task
from experiments.runs import checkpoint as ckpt
from experiments.runs.metrics import read_records

_args = listops_argv


# The trainer sets XLA_FLAGS / XLA_PYTHON_CLIENT_PREALLOCATE; conftest puts them back.
pytestmark = pytest.mark.usefixtures("restore_backend_env")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Three ListOps sets: the normal one, another (different examples), and one with an
    empty val split."""
    root = tmp_path_factory.mktemp("lra_bad")
    kw = dict(min_length=10, max_length=40)
    synthetic.write_listops(root / "ok", (96, 20, 20), seed=0, **kw)
    synthetic.write_listops(root / "other", (96, 20, 20), seed=1, **kw)
    synthetic.write_listops(root / "no_val", (40, 0, 10), seed=0, **kw)
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
    lines = [
        line
        for line in err.splitlines()
        if line.startswith(("error:", "python -m experiments.lra.train: error:"))
    ]
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
        ("--lr", "nan", "a finite number >= 1.17549e-38 and <= 3.40282e+38"),
        ("--lr", "inf", "a finite number >= 1.17549e-38 and <= 3.40282e+38"),
        ("--lr-factor", "nan", "a finite number >= 1.17549e-38 and <= 3.40282e+38"),
        ("--lr", "0", "a finite number > 0"),
        ("--weight-decay", "-0.1", "a finite number >= 0 and <= 3.40282e+38"),
        ("--warmup-fraction", "1.5", "a finite number >= 0 and < 1"),
        ("--dropout", "1", "a finite number >= 0 and < 1"),
        ("--d-model", "0", "an integer >= 1"),
        ("--steps", "-3", "an integer >= 1"),
        ("--time-limit", "nan", "a finite number > 0"),
        # S4D/S5's initial step: 1e30 overflowed log Delta's float32 gradient at the first
        # update (reported as divergence, with advice to lower --lr)
        ("--dt-max", "1e30", "a finite number >= 1.17549e-38 and <= 1000000"),
        ("--dt-min", "1e7", "a finite number >= 1.17549e-38 and <= 1000000"),
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
    host_batch = _training.host_batch

    def poisoned(task, split, idx, *, padded):
        out = host_batch(task, split, idx, padded=padded)
        if not padded and poisoned.calls >= 5:  # pyright: ignore[reportFunctionMemberAccess]
            out["label"] = np.full_like(out["label"], 99)
        poisoned.calls += not padded  # pyright: ignore[reportFunctionMemberAccess]
        return out

    poisoned.calls = 0  # pyright: ignore[reportFunctionMemberAccess]
    monkeypatch.setattr(_training, "host_batch", poisoned)
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
    cfg = RunConfig.from_json(json.loads((out / "config.json").read_text()))
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


# A field of last.json edited by hand or written by another tool: (field, value, what the
# line shows of it). Each was a traceback (AttributeError, TypeError, ValueError), was
# resumed silently (step "5", step 5.5, config "x"), or was reported as something else (a
# missing best file, another run).
MALFORMED_LAST = [
    ("best", 3, "3 (a number)"),
    ("best", "x", '"x" (a string)'),
    ("best", [4, 0.5], "[4, 0.5] (a list)"),
    ("best", {"val_accuracy": 0.5}, "without 'step'"),
    ("best", {"step": "4", "val_accuracy": 0.5}, "its 'step' is a string"),
    ("pending", "x", '"x" (a string)'),
    ("pending", [["a", 0.5, 0.01]], 'row 0 is ["a", 0.5, 0.01]'),
    ("pending", [[1.0, 0.5]], "row 0 is [1.0, 0.5]"),
    ("best_sha256", 5, "5 (a number)"),
    ("step", "5", '"5" (a string)'),
    ("step", 5.5, "5.5 (a number)"),
    ("data", [1], "[1] (a list)"),
    ("config", "x", '"x" (a string)'),
    ("run_id", 7, "7 (a number)"),
]


@pytest.mark.parametrize("field, value, shown", MALFORMED_LAST)
def test_malformed_field_of_last_json_is_one_line(
    field, value, shown, stopped, data, tmp_path, capsys
):
    """Refused before training, with one line naming the file, the field, what it holds
    and how to fix it (the same check as the exporter's, `_checkpoint.check_last`)."""
    out = _copy(stopped, tmp_path)
    meta = json.loads((out / "last.json").read_text())
    meta[field] = value
    (out / "last.json").write_text(json.dumps(meta))
    before = (out / "metrics.jsonl").read_text()
    assert train.main(_args(data / "ok", out, "--resume")) == 2
    line = _error(capsys)
    assert f"{out / 'last.json'} is corrupt: its {field!r} is " in line, line
    assert shown in line and "start a new run with another --out" in line, line
    _untouched(out, before)


#: A `last` record as the trainer writes it (the fields `ckpt.Record` reads).
LAST_RECORD = {
    "step": 5,
    "sha256": "a" * 64,
    "pending": [[0.5, 0.25, 0.01]],
    "best": {"step": 4, "val_accuracy": 0.5, "val_loss": 1.5},
    "best_sha256": "b" * 64,
    "data": {"train": {"examples": 96, "sha256": "c" * 64}},
    "config": {"task": "listops"},
    "run_id": "d" * 32,
    "seconds_total": 12.5,
    "corpus_sha256": None,
}
#: Beyond `MALFORMED_LAST` (which the trainer's `--resume` reaches): the fields a reader
#: of a record reads as well, and the one every record has.
MALFORMED_RECORD = MALFORMED_LAST + [
    ("sha256", "abc", '"abc" (a string)'),
    ("seconds_total", -1, "-1 (a number)"),
    ("seconds_total", "12", '"12" (a string)'),
    ("corpus_sha256", 5, "5 (a number)"),
]


def test_a_checkpoint_record_reads_every_field():
    record = ckpt.Record.from_json(LAST_RECORD, where="last.json")
    assert record == ckpt.Record(
        step=5,
        sha256="a" * 64,
        pending=((0.5, 0.25, 0.01),),
        best=LAST_RECORD["best"],
        best_sha256="b" * 64,
        data=LAST_RECORD["data"],
        config={"task": "listops"},
        run_id="d" * 32,
        seconds_total=12.5,
    )
    assert ckpt.Record.from_json({"step": 0}, where="best.json") == ckpt.Record(step=0)


@pytest.mark.parametrize("field, value, shown", MALFORMED_RECORD)
def test_a_malformed_checkpoint_record_is_one_line_naming_the_field(field, value, shown, tmp_path):
    """`ckpt.Record.from_json`, without training: one line naming the file and the field."""
    path = tmp_path / "last.json"
    with pytest.raises(ckpt.CheckpointError) as e:
        ckpt.Record.from_json({**LAST_RECORD, field: value}, where=path)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{path} is corrupt: its {field!r} is "), line
    assert shown in line and "start a new run with another --out" in line, line


@pytest.mark.parametrize("record, words", [({"pending": []}, "it lacks 'step'"), ([], "list")])
def test_a_record_without_a_step_or_not_an_object_is_one_line(record, words, tmp_path):
    where = re.escape(str(tmp_path / "x.json"))
    with pytest.raises(ckpt.CheckpointError, match=rf"^{where} is corrupt.*{words}"):
        ckpt.Record.from_json(record, where=tmp_path / "x.json")


@pytest.mark.parametrize(
    "field, value, shown", [("sha256", 5, "5 (a number)"), ("step", "2", '"2" (a string)')]
)
def test_the_store_reads_a_checkpoints_digest_and_step_checked(field, value, shown, tmp_path):
    """A `sha256` that is not a digest was read as "damaged .eqx"; a step "2" as step 2."""
    tree = (np.zeros(3, np.float32), np.asarray(2, np.int64))
    ckpt.save(tmp_path, "last", tree, {"step": 2})
    path = tmp_path / "last.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    words = re.escape(f"{path} is corrupt: its {field!r} is {shown}")
    with pytest.raises(ckpt.CheckpointError, match=f"^{words}"):
        pair = ckpt.locate(tmp_path, "last")
        assert pair is not None
        ckpt.load_pair(pair.json_path, pair.eqx_path, tree, step_of=lambda t: t[-1])


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
    def oom(self, carry, batch, counter):
        raise XlaRuntimeError(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 38654705664 bytes.\n"
            + "\n".join(f"  frame {i}" for i in range(40))
        )

    monkeypatch.setattr(_training.Loop, "step", oom)
    assert train.main(_args(data / "ok", tmp_path / "run")) == 1
    line = _error(capsys)
    assert line.startswith("error: out of memory") and "RESOURCE_EXHAUSTED" in line
    for advice in (
        "--remat",
        "--batch-size 4",
        "more devices",
        "XLA_PYTHON_CLIENT_PREALLOCATE=false",
    ):
        assert advice in line
    # A real bug keeps its traceback.
    monkeypatch.setattr(_training.Loop, "step", lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        train.main(_args(data / "ok", tmp_path / "run2"))


# --------------------------------------------------------------------------- issue 20


@pytest.fixture(scope="module")
def other_seed(data, tmp_path_factory):
    """The `stopped` run's settings with another seed, also stopped at step 5."""
    out = tmp_path_factory.mktemp("other_seed") / "run"
    assert train.main(_args(data / "ok", out, "--stop-at", "5", "--seed", "1")) == 0
    return out


def _untouched(out, before):
    """Refused before training: the metrics log is as it was."""
    assert (out / "metrics.jsonl").read_text() == before


@pytest.mark.parametrize("name", ["last", "best"])
def test_checkpoint_of_another_run_is_refused(name, stopped, other_seed, data, tmp_path, capsys):
    """last.* or best.* copied from another run (another seed) into the run folder: refused
    with one line saying what differs, before training (it resumed silently, and the
    finished run reported the foreign weights' test score as its own)."""
    out = _copy(stopped, tmp_path)
    for ext in (".eqx", ".json"):
        shutil.copy(other_seed / f"{name}{ext}", out / f"{name}{ext}")
    before = (out / "metrics.jsonl").read_text()
    assert train.main(_args(data / "ok", out, "--resume")) == 2
    line = _error(capsys)
    if name == "last":
        assert f"{out / 'last.json'} does not belong to the run" in line
        assert "seed: 1 in last.json, 0 in config.json" in line
    else:
        assert "best weights are not in" in line and "from another run" in line
    _untouched(out, before)


def test_checkpoint_of_a_run_with_the_same_settings_is_refused(stopped, data, tmp_path, capsys):
    out = _copy(stopped, tmp_path)
    meta = json.loads((out / "last.json").read_text())
    meta["run_id"] = "0" * 32  # another run with identical settings
    (out / "last.json").write_text(json.dumps(meta))
    assert train.main(_args(data / "ok", out, "--resume")) == 2
    assert f"run id {'0' * 32} in last.json" in _error(capsys)


def test_edited_config_is_refused(stopped, data, tmp_path, capsys):
    """An edited config.json (another lr) used to be used by --resume, silently."""
    out = _copy(stopped, tmp_path)
    cfg = json.loads((out / "config.json").read_text())
    lr = cfg["lr"]
    cfg["lr"] = 2 * lr
    (out / "config.json").write_text(json.dumps(cfg))
    assert train.main(_args(data / "ok", out, "--resume")) == 2
    assert f"lr: {lr!r} in last.json, {2 * lr!r} in config.json" in _error(capsys)


@pytest.mark.parametrize("damage", ["missing", "flipped"])
def test_best_checkpoint_is_verified_before_training(damage, stopped, data, tmp_path, capsys):
    """best.eqx missing or corrupt: refused before training (it was noticed only after
    training to the end, with a traceback)."""
    out = _copy(stopped, tmp_path)
    if damage == "missing":
        (out / "best.eqx").unlink()
    else:
        blob = bytearray((out / "best.eqx").read_bytes())
        blob[len(blob) // 2] ^= 0x01
        (out / "best.eqx").write_bytes(bytes(blob))
    before = (out / "metrics.jsonl").read_text()
    assert train.main(_args(data / "ok", out, "--resume")) == 2
    line = _error(capsys)
    assert "best weights are not in" in line and "best.eqx" in line
    assert ("is missing" in line) if damage == "missing" else ("corrupt" in line)
    _untouched(out, before)


def test_second_trainer_on_the_same_out_is_refused(stopped, data, tmp_path, capsys):
    """Two trainers on one --out both ran to the end, interleaving metrics.jsonl and
    overwriting each other's checkpoints; the second is now refused, naming the owner."""
    out = _copy(stopped, tmp_path)
    lock = ckpt.RunLock(out).acquire()  # a live trainer (this process)
    try:
        before = (out / "metrics.jsonl").read_text()
        assert train.main(_args(data / "ok", out, "--resume")) == 2
        line = _error(capsys)
        assert f"--out '{out}' is in use by another trainer (pid {os.getpid()} on " in line
        _untouched(out, before)
    finally:
        lock.release()
    assert train.main(_args(data / "ok", out, "--resume", "--stop-at", "6")) == 0  # free again


def test_full_disk_at_a_checkpoint_write_is_one_line(stopped, data, tmp_path, capsys, monkeypatch):
    """ENOSPC (or a read-only --out) at a checkpoint write: one line, status 1, the previous
    checkpoint complete and resumable (it was a traceback)."""
    out = _copy(stopped, tmp_path)
    real_save = ckpt.save

    def full(folder, name, tree, meta):
        if meta["step"] >= 7:
            raise OSError(
                errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(folder) / f".{name}.eqx.1.tmp")
            )
        return real_save(folder, name, tree, meta)

    monkeypatch.setattr(ckpt, "save", full)
    assert train.main(_args(data / "ok", out, "--resume", "--checkpoint-every", "1")) == 1
    line = _error(capsys)
    assert "could not write a checkpoint" in line and "No space left on device" in line
    assert "previous complete checkpoint is kept" in line and "--resume" in line
    monkeypatch.undo()
    assert json.loads((out / "last.json").read_text())["step"] == 6
    assert train.main(_args(data / "ok", out, "--resume")) == 0


@pytest.mark.parametrize("fault", ["permission", "symlink_loop"])
def test_unreadable_data_is_one_line(fault, data, tmp_path, capsys, monkeypatch):
    root = tmp_path / "data"
    shutil.copytree(data / "ok", root)
    path = root / "listops-1000" / "basic_train.tsv"
    if fault == "symlink_loop":
        path.unlink()
        path.symlink_to(path.name)
    else:  # chmod does not stop root (these tests may run as root): the error, injected
        load_task = _setup.load_task

        def denied(task, folder, **kw):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

        monkeypatch.setattr(_setup, "load_task", denied)
        assert load_task is not None
    assert train.main(_args(root, tmp_path / "run")) == 2
    line = _error(capsys)
    assert (
        str(path) in line
        and ("Permission denied" if fault == "permission" else "symbolic links") in line
    )


def test_flags_that_do_not_apply_to_the_core_are_refused_or_applied(data, tmp_path, capsys):
    """`--core s5 --form real` was recorded as real and trained complex; `--method` was
    recorded and not used for S4D (a convolution): now the real form is built, and S4D
    refuses the flag."""
    from experiments.lra import steps

    baselines = pytest.importorskip("eqx_lru.baselines")
    assert (
        train.main(_args(data / "ok", tmp_path / "a", "--core", "s4d", "--method", "sequential"))
        == 2
    )
    line = _error(capsys)
    assert "--core s4d" in line and "--method sequential would not be used" in line
    assert train.main(_args(data / "ok", tmp_path / "b", "--core", "s4d", "--form", "real")) == 2
    assert "--form real would not be used" in _error(capsys)
    cfg = train.resolve_config(
        train.parse_args(
            _args(data / "ok", tmp_path / "c", "--core", "s5", "--form", "real", "--blocks", "1")
        )
    )
    core = steps.make_core(cfg)(4, 4, key=jax.random.PRNGKey(0))
    assert isinstance(core, baselines.S5) and core.form == "real"
    assert cfg.r_min is None and cfg.max_phase is None  # the LRU ring is not used

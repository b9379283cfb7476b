"""Output files that cannot be turned against their user (issue 27): nothing is written
through a symbolic link planted in the run folder (at a file's name, at a temporary name,
at the log or the lock), and a rewritten file keeps its permissions.

`experiments/runs/atomic.py` (checkpoints, metrics, outputs, the export command) and the
trainer's two other writers: the metrics log's appends and the folder's lock.
"""

import errno
import os
import stat

import numpy as np
import pytest
from listops_argv import listops_argv

from experiments.lra import train
from experiments.runs import checkpoint as ckpt
from experiments.runs.atomic import write_atomic
from experiments.runs.metrics import MetricsLog

pytestmark = pytest.mark.usefixtures("restore_backend_env")


@pytest.fixture
def victim(tmp_path):
    """A file outside the run folder that a planted link points at."""
    path = tmp_path / "outside" / "precious.txt"
    path.parent.mkdir()
    path.write_text("keep me")
    return path


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_link_at_the_destination_is_replaced_not_followed(tmp_path, victim):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").symlink_to(victim)
    write_atomic(run / "results.json", b"new")
    assert victim.read_text() == "keep me"
    assert not (run / "results.json").is_symlink()
    assert (run / "results.json").read_bytes() == b"new"


def test_a_link_at_the_temporary_name_is_never_opened(tmp_path, victim):
    """The temporary name was `.NAME.PID.tmp`: a link planted there received the data, and
    the rename then left NAME a link to the victim."""
    run = tmp_path / "run"
    run.mkdir()
    (run / f".last.json.{os.getpid()}.tmp").symlink_to(victim)
    write_atomic(run / "last.json", b"{}")
    assert victim.read_text() == "keep me"
    assert not (run / "last.json").is_symlink() and (run / "last.json").read_bytes() == b"{}"


def test_a_rewrite_keeps_the_permissions(tmp_path):
    path = tmp_path / "config.json"
    write_atomic(path, b"1")
    umask = os.umask(0)
    os.umask(umask)
    assert _mode(path) == 0o666 & ~umask  # a new file: as open() makes it
    os.chmod(path, 0o640)
    write_atomic(path, b"2")
    assert _mode(path) == 0o640 and path.read_bytes() == b"2"
    # A checkpoint pair keeps them across saves too.
    tree = (np.arange(3.0),)
    ckpt.save(tmp_path, "last", tree, {"step": 1})
    os.chmod(tmp_path / "last.eqx", 0o600)
    os.chmod(tmp_path / "last.json", 0o600)
    ckpt.save(tmp_path, "last", tree, {"step": 2})
    assert _mode(tmp_path / "last.eqx") == 0o600 and _mode(tmp_path / "last.json") == 0o600


def test_the_log_and_the_lock_refuse_a_link(tmp_path, victim):
    """The metrics log appended (`open(path, "a")`) and the lock wrote its owner through a
    link planted at their names."""
    (tmp_path / "metrics.jsonl").symlink_to(victim)
    log = MetricsLog(tmp_path / "metrics.jsonl")
    with pytest.raises(OSError) as e:
        log.write({"split": "train", "step": 1})
    assert e.value.errno == errno.ELOOP and "metrics.jsonl" in e.value.filename
    (tmp_path / ".lock").symlink_to(victim)
    with pytest.raises(OSError) as e:
        ckpt.RunLock(tmp_path).acquire()
    assert victim.read_text() == "keep me"


FIELDS = ("inputs", "labels", "lengths")


def test_the_data_cache_never_writes_through_a_planted_link(tmp_path, victim):
    """The cache's `meta.json` and arrays went to `.NAME.PID.tmp` and `.NAME.PID.tmp.npy`,
    opened following links."""
    from experiments.lra import synthetic
    from experiments.lra.tasks import load_task

    data, cache = tmp_path / "data", tmp_path / "cache"
    synthetic.write_listops(data, (16, 4, 4), seed=0, min_length=5, max_length=12)
    cache.mkdir()
    pid, folder = os.getpid(), cache / "listops"  # the task's cache folder
    folder.mkdir()
    names = [f".meta.json.{pid}.tmp"]
    names += [f".{s}.{f}.{pid}.tmp.npy" for s in ("train", "val", "test") for f in FIELDS]
    for name in names:
        (folder / name).symlink_to(victim)
    loaded = load_task("listops", data, cache_dir=cache)
    assert len(loaded.train) == 16 and victim.read_text() == "keep me"


@pytest.mark.slow
def test_a_run_in_a_folder_with_planted_links_writes_only_inside(tmp_path, victim, capsys):
    from experiments.lra import synthetic

    data = tmp_path / "data"
    synthetic.write_listops(data, (32, 8, 8), seed=0, min_length=5, max_length=20)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").symlink_to(victim)  # a folder holding config.json holds a run
    assert train.main(listops_argv(data, run, steps=4)) == 2
    assert "--overwrite" in capsys.readouterr().err and victim.read_text() == "keep me"
    (run / "config.json").unlink()
    # Links where the run's outputs go are the user's files, not the run's: refused by
    # name (issue 39 class 6: a run is recognised by its record, `.outputs.json`), nothing
    # written through them or over them.
    for name in ("metrics.jsonl", "results.json", "curves.png"):
        (run / name).symlink_to(victim)
    capsys.readouterr()
    assert train.main(listops_argv(data, run, steps=4)) == 2
    err = capsys.readouterr().err
    assert "not written by `lra.train`" in err and "Traceback" not in err
    assert victim.read_text() == "keep me"
    for name in ("metrics.jsonl", "results.json", "curves.png"):
        assert (run / name).is_symlink(), name
    assert not (run / "config.json").exists()
    # A link at the lock: one line, nothing written through it.
    (tmp_path / "run2").mkdir()
    (tmp_path / "run2" / ".lock").symlink_to(victim)
    capsys.readouterr()
    assert train.main(listops_argv(data, tmp_path / "run2", steps=4)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "its lock file" in err and "run2/.lock" in err
    assert victim.read_text() == "keep me"

"""No lost language-model run (issues 32 and 34), with real trainer processes:

- SIGUSR1 (a scheduler's warning before a kill, `--save-signals`) to a running
  `python -m experiments.lm train`: it saves a checkpoint after the current step and exits
  with status 0 (it used to die at once, exit 138, with nothing saved); while it runs, a
  second trainer on its folder is refused in one line; `--resume` then ends bit for bit as
  an uninterrupted run.
- SIGKILL in the middle of a checkpoint write (after the new `last.eqx` is in place, before
  its `last.json`): the previous checkpoint is whole, `sample`/`export` read it, and the run
  resumes from it bit for bit.
- A full disk at a checkpoint: one line, the previous checkpoint kept, no temporary left;
  the run resumes from it bit for bit once there is room; and under `export`: one line, no
  file written.

Every process a test starts is ended by it (`finally`), and every wait has a time limit.
"""

import contextlib
import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lm_corpus import lm_argv, write_corpus

from experiments.lm import train, weights
from experiments.runs import checkpoint as ckpt
from experiments.runs.errors import RunError
from experiments.runs.metrics import read_records

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("restore_backend_env")]

REPO = Path(__file__).resolve().parents[2]
STEPS = 120
#: Seconds a trainer process may take to start training (importing JAX and compiling on a
#: loaded machine), and to stop after a signal.
START, STOP = 600, 120

#: A trainer whose third write of `last.json` (the checkpoint of step 12) is cut by SIGKILL
#: just before the file is renamed into place: the new `last.eqx` is there, its JSON not.
_KILLED_IN_A_SAVE = r"""
import json, os, signal, sys
from experiments.lm import train
real, seen = os.replace, []
def replace(src, dst, *args, **kwargs):
    if os.path.basename(os.fspath(dst)) == "last.json":
        seen.append(dst)
        if len(seen) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *args, **kwargs)
os.replace = replace
sys.exit(train.main(json.loads(sys.argv[1]), hard_abort=True))
"""


def _argv(corpus: Path, out: Path, *extra: str) -> list[str]:
    return lm_argv(corpus, out, *extra, steps=STEPS, checkpoint_every=4)


def _metrics(out: Path) -> list[dict]:
    drop = ("steps_per_sec", "seconds")
    return [
        {k: v for k, v in r.items() if k not in drop} for r in read_records(out / "metrics.jsonl")
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("lm_signals") / "corpus")


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm_signals") / "reference"
    assert train.run(_argv(corpus, out))["status"] == "finished"
    return out


def _same_as(out: Path, reference: Path) -> None:
    assert _metrics(out) == _metrics(reference)
    assert (out / "last.eqx").read_bytes() == (reference / "last.eqx").read_bytes()


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    with open(log, "wb") as f:
        return subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stderr=f)


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=STOP)


def _wait_for(condition, proc: subprocess.Popen, log: Path, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert proc.poll() is None, f"exited {proc.returncode}: {log.read_text()[-3000:]}"
        assert time.monotonic() < end, f"timed out: {log.read_text()[-3000:]}"
        time.sleep(0.02)


def _training(out: Path):
    """True once the trainer has logged a train record (it is past its compilation)."""
    return lambda: any(r.get("split") == "train" for r in read_records(out / "metrics.jsonl"))


def test_sigusr1_saves_and_stops_a_trainer_and_a_second_one_is_refused(corpus, reference, tmp_path):
    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    proc = _spawn(["-m", "experiments.lm", "train", *_argv(corpus, out)], log)
    try:
        _wait_for(_training(out), proc, log, START)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = train.main(["train", *_argv(corpus, out)])  # a second trainer, same folder
        lines = [x for x in err.getvalue().splitlines() if "error:" in x]
        assert code == 2 and len(lines) == 1, err.getvalue()
        assert f"is in use by another trainer (pid {proc.pid} on " in lines[0]
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=STOP) == 0, log.read_text()[-3000:]
    finally:
        _end(proc)
    stopped = json.loads((out / "last.json").read_text())["step"]
    assert 0 < stopped < STEPS
    text = log.read_text()
    assert f"SIGUSR1 (a scheduler's warning, --save-signals): stopping at step {stopped}" in text
    assert "Traceback" not in text
    assert train.run(_argv(corpus, out, "--resume"))["status"] == "finished"
    _same_as(out, reference)


def test_sigkill_in_a_checkpoint_write_keeps_the_previous_one(corpus, reference, tmp_path):
    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    argv = json.dumps(["train", *_argv(corpus, out)])
    proc = _spawn(["-c", _KILLED_IN_A_SAVE, argv], log)
    try:
        assert proc.wait(timeout=START) == -signal.SIGKILL, log.read_text()[-3000:]
    finally:
        _end(proc)
    assert not (out / "last.json").exists() and (out / "last.eqx").exists()  # cut mid-save
    pair = ckpt.locate(out, "last")
    assert (
        pair is not None
        and pair.intact
        and pair.meta["step"] == 8
        and pair.json_path.name == "last.prev.json"
    )
    assert weights.load_model(out).step == 8  # what sample and export read
    assert train.run(_argv(corpus, out, "--resume"))["status"] == "finished"
    _same_as(out, reference)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_full_disk_at_a_checkpoint_keeps_the_previous_one(
    corpus, reference, tmp_path, monkeypatch
):
    full = []
    real = os.fsync

    def fsync(fd):
        if full and ".last.eqx." in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    out = tmp_path / "run"

    def fill_the_disk(step: int) -> None:
        if step == 6:  # the checkpoint of step 8 meets a full disk
            full.append(step)

    with pytest.raises(RunError) as e:
        train.run(_argv(corpus, out), hook=fill_the_disk)
    message = str(e.value)
    assert "\n" not in message and f"could not write a checkpoint in {out}" in message
    assert "No space left on device. The previous complete checkpoint is kept" in message
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    pair = ckpt.locate(out, "last")
    assert pair is not None and pair.intact and pair.meta["step"] == 4
    full.clear()  # room again
    assert train.run(_argv(corpus, out, "--resume"))["status"] == "finished"
    _same_as(out, reference)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_full_disk_under_export_is_one_line_and_writes_nothing(reference, tmp_path, monkeypatch):
    dest = tmp_path / "export"
    dest.mkdir()
    real = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(dest)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    err = io.StringIO()
    argv = ["export", "--run", str(reference), "--format", "stablehlo", "--dest", str(dest)]
    with contextlib.redirect_stderr(err):
        code = train.main(argv)
    lines = [x for x in err.getvalue().splitlines() if "error:" in x]
    assert code == 2 and len(lines) == 1 and "No space left on device" in lines[0], err.getvalue()
    assert "Traceback" not in err.getvalue()
    assert [p.name for p in dest.iterdir() if not p.name.startswith(".")] == []


@pytest.mark.parametrize(
    "sig, when, said",
    [
        # While JAX loads: "Exception ignored ... KeyboardInterrupt", and training went on.
        (signal.SIGINT, "importing", "SIGINT: stopped; run the same command again."),
        # In the trainer's start-up (its folder claimed, the corpus read or compiling).
        (signal.SIGTERM, "set up", "SIGTERM before training started: stopped, nothing to save"),
    ],
)
def test_a_signal_in_the_start_up_stops_the_trainer_in_one_line(sig, when, said, corpus, tmp_path):
    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    proc = _spawn(["-m", "experiments.lm", "train", *_argv(corpus, out)], log)
    try:
        if when == "importing":
            time.sleep(1.0)  # (Python starts in well under a second; JAX takes longer)
        else:
            _wait_for((out / ".outputs.json").exists, proc, log, START)
        proc.send_signal(sig)
        assert proc.wait(timeout=STOP) == 130, log.read_text()[-3000:]
    finally:
        _end(proc)
    text = log.read_text()
    assert said in text and "Traceback" not in text and "ignored" not in text, text
    assert not (out / "metrics.jsonl").exists() or not _metrics(out)

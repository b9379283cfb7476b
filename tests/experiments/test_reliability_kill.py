"""No lost run (issue 20): trainers killed at random moments always resume; a crash at any
instant of a checkpoint write leaves a complete checkpoint; a run folder has one owner.

- `test_every_crash_instant_of_a_save_leaves_a_complete_checkpoint`: every file-system
  operation of `_checkpoint.save` in turn "crashes" (an exception at that point, before the
  operation); the folder always holds the new or the previous checkpoint, complete.
- `test_kill_at_random_moments_never_loses_a_run` (slow): 30+ trainers, each killed by
  SIGKILL (some by two SIGTERMs in quick succession, some by SIGHUP) at a random moment of
  a run that writes a checkpoint every step, so most kills land inside a save; each is
  resumed, and the finished run equals an uninterrupted one bit for bit. The trainers are
  forked from one "zygote" process that imported the trainer once (JAX's backend is not
  started there, so forking is safe), with JAX's persistent compilation cache: a trainer
  is then up in a fraction of the time a fresh interpreter needs.
- the lock: a folder held by a live process is refused with one line naming it; a killed
  owner's lock is taken over.

Every process a test starts is ended by it (`finally`), and every wait has a time limit.
"""

import functools
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from listops_argv import listops_argv

from experiments.runs import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- save: every crash instant


class _Crash(BaseException):
    pass


def _tree(step: int):
    return (np.arange(5.0) + step, np.asarray(step, np.int64))


def _complete(folder: Path) -> int | None:
    """The step of the newest complete checkpoint (None if there is none)."""
    pair = ckpt.locate(folder, "last")
    if pair is None:
        return None
    assert pair.intact, (pair, sorted(p.name for p in folder.iterdir()))
    tree, meta = ckpt.load_pair(pair.json_path, pair.eqx_path, _tree(0), step_of=lambda t: t[-1])
    np.testing.assert_array_equal(tree[0], _tree(meta["step"])[0])
    return meta["step"]


def test_every_crash_instant_of_a_save_leaves_a_complete_checkpoint(tmp_path, monkeypatch):
    """Count the file-system operations of one save, then crash before each of them in
    turn, from each starting state a crash can leave; the newest complete checkpoint is the
    new one or the one before, and the next save works from there."""
    ops = {"n": 0, "crash_at": None}
    real = {name: getattr(os, name) for name in ("replace", "fsync", "open", "unlink")}

    def counted(name):
        def op(*args, **kwargs):
            if ops["crash_at"] is not None and ops["n"] == ops["crash_at"]:
                raise _Crash(name)
            ops["n"] += 1
            return real[name](*args, **kwargs)

        return op

    for name in real:  # the `os` module itself: pathlib's unlink goes through it too
        monkeypatch.setattr(os, name, counted(name))

    def save(folder, step):
        ckpt.save(folder, "last", _tree(step), {"step": step})

    # How many operations one save does (from a folder that has a previous pair).
    probe = tmp_path / "probe"
    save(probe, 1)
    save(probe, 2)
    ops["n"] = 0
    save(probe, 3)
    n_ops = ops["n"]
    assert n_ops >= 6

    states = 0
    for first_crash in range(n_ops + 1):  # a first save crashed here (n_ops: not at all)...
        for second_crash in range(n_ops + 1):  # ...then the next one here
            folder = tmp_path / f"s{first_crash}_{second_crash}"
            ops["crash_at"] = None
            save(folder, 1)
            save(folder, 2)
            expected = {2}
            for step, crash in ((3, first_crash), (4, second_crash)):
                ops["n"], ops["crash_at"] = 0, crash
                try:
                    save(folder, step)
                except _Crash:
                    pass
                else:
                    expected = {step}
                    continue
                finally:
                    ops["crash_at"] = None
                got = _complete(folder)
                assert got in expected | {step}, (first_crash, second_crash, got, expected)
                expected = {got}
            ops["crash_at"] = None
            save(folder, 5)  # and the run goes on
            assert _complete(folder) == 5
            prev = ckpt.load_pair(folder / "last.prev.json", folder / "last.prev.eqx", _tree(0))[1][
                "step"
            ]
            assert prev == min(expected)
            states += 1
    assert states == (n_ops + 1) ** 2


def test_a_damaged_newest_checkpoint_is_refused_not_skipped(tmp_path):
    """A crash never damages a file (each is replaced whole), so a damaged one is reported,
    not silently replaced by the previous checkpoint."""
    ckpt.save(tmp_path, "last", _tree(1), {"step": 1})
    ckpt.save(tmp_path, "last", _tree(2), {"step": 2})
    blob = (tmp_path / "last.eqx").read_bytes()
    (tmp_path / "last.eqx").write_bytes(blob[:-3])
    pair = ckpt.locate(tmp_path, "last")
    assert pair is not None
    assert pair.json_path.name == "last.json" and not pair.intact
    with pytest.raises(ckpt.CheckpointError, match="corrupt or truncated"):
        ckpt.load_pair(pair.json_path, pair.eqx_path, _tree(0))


# --------------------------------------------------------------------------- the lock


def test_a_folder_in_use_is_refused_and_a_dead_owners_lock_taken_over(tmp_path):
    held = ckpt.RunLock(tmp_path).acquire()
    try:
        with pytest.raises(
            ckpt.FolderInUse, match=rf"in use by another trainer \(pid {os.getpid()} on "
        ):
            ckpt.RunLock(tmp_path).acquire()
    finally:
        held.release()
    ckpt.RunLock(tmp_path).acquire().release()  # released: free again

    # An owner killed by SIGKILL (a bare process holding the same flock).
    code = textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(tmp_path / ".lock")!r}, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b'{{"pid": %d, "host": "elsewhere"}}' % os.getpid())
        print("locked", flush=True)
        time.sleep(120)
    """)
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None  # stdout=PIPE
    try:
        assert owner.stdout.readline().strip() == "locked"
        with pytest.raises(ckpt.FolderInUse, match=rf"pid {owner.pid} on elsewhere"):
            ckpt.RunLock(tmp_path).acquire()
        owner.kill()
        owner.wait(timeout=30)
        lock = ckpt.RunLock(tmp_path).acquire()  # the dead owner's lock is taken over
        assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()
        lock.release()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(timeout=30)
        owner.stdout.close()


# --------------------------------------------------------------------------- killing trainers

_ZYGOTE = r"""
import json, os, sys, traceback
import equinox as eqx
from experiments.lra import _setup, steps, train  # imports only: JAX's backend starts in each child

# The model's initialisation as one jitted program (one cache hit) instead of dozens of
# eager operations, each traced, lowered and looked up in every trainer: a trainer starts
# in a fraction of the time. The same in the reference and in the killed runs.
_build = eqx.filter_jit(steps.build_model)
_setup.build_model = lambda cfg, data, key: _build(cfg, steps.task_spec(data), key)
print("ready", flush=True)
for line in sys.stdin:
    argv, log = json.loads(line)
    pid = os.fork()
    if pid == 0:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        try:
            code = train.main(argv, hard_abort=True)  # as `python -m experiments.lra.train`
        except BaseException:
            traceback.print_exc()
            code = 99
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"pid": pid, "code": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class _Zygote:
    """A process that imported the trainer once and forks one trainer per request."""

    def __init__(self, tmp: Path):
        # EQX_ON_ERROR=nan: `eqx.error_if` without a host callback, which JAX's persistent
        # cache refuses to store (the train step would compile again in every trainer).
        env = {
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "JAX_COMPILATION_CACHE_DIR": str(tmp / "jax-cache"),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
            "EQX_ON_ERROR": "nan",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE],
            cwd=REPO,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.children: set[int] = set()
        assert self._line(300) == "ready"

    def _line(self, timeout: float) -> str:
        import select

        assert self.proc.stdout is not None  # stdout=PIPE
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"no answer from the zygote within {timeout} s"
        line = self.proc.stdout.readline()
        assert line, "the zygote died"
        return line.strip()

    def start(self, argv: list[str], log: Path) -> int:
        assert self.proc.stdin is not None  # stdin=PIPE
        self.proc.stdin.write(json.dumps([argv, str(log)]) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self._line(60))["pid"]
        self.children.add(pid)
        return pid

    def wait(self, pid: int, timeout: float = 300) -> int:
        answer = json.loads(self._line(timeout))
        assert answer["pid"] == pid
        self.children.discard(pid)
        return answer["code"]

    def close(self):
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both PIPE
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc.stdout.close()


def _records(out: Path) -> list[tuple]:
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows.append((r["split"], r["step"], r.get("loss")))
    return rows


STEPS = 240  # more than 30 kills can use up: each kill lets a trainer do 1-3 steps (+ a few)


_argv = functools.partial(
    listops_argv, steps=STEPS, d_model=4, d_state=2, eval_every=7, checkpoint_every=1
)


@pytest.mark.slow
def test_kill_at_random_moments_never_loses_a_run(tmp_path):
    from experiments.lra import synthetic

    data = tmp_path / "data"
    synthetic.write_listops(data, (40, 8, 8), seed=0, min_length=5, max_length=20)
    rng = random.Random(20)
    zygote = _Zygote(tmp_path)
    try:
        reference = tmp_path / "reference"
        pid = zygote.start(_argv(data, reference), tmp_path / "reference.log")
        assert zygote.wait(pid) == 0, (tmp_path / "reference.log").read_text()[-3000:]

        out, kills, attempts, how_counts = tmp_path / "run", 0, 0, {}
        while kills < 30:
            attempts += 1
            assert attempts < 80, f"only {kills} kills in {attempts} attempts"
            resume = (out / "config.json").is_file()
            log = tmp_path / f"try{attempts}.log"
            pid = zygote.start(_argv(data, out, *(["--resume"] if resume else [])), log)
            # Wait until this trainer has done 1-3 steps of its own (each with a checkpoint),
            # then kill it a random moment later: mostly inside a checkpoint write.
            _wait_for_steps(out, log, pid, rng.randint(1, 3), timeout=120)
            time.sleep(rng.uniform(0.0, 0.03))
            how = rng.choice(["kill"] * 6 + ["term-term", "hup"])
            try:
                if how == "kill":
                    os.kill(pid, signal.SIGKILL)
                elif how == "term-term":
                    os.kill(pid, signal.SIGTERM)
                    time.sleep(rng.uniform(0.0, 0.02))
                    os.kill(pid, signal.SIGTERM)
                else:
                    os.kill(pid, signal.SIGHUP)
            except ProcessLookupError:
                pass
            code = zygote.wait(pid)
            text = log.read_text() if log.exists() else ""
            assert code != 0, f"the run finished after {kills} kills: raise STEPS\n{text[-3000:]}"
            expected = {"kill": -signal.SIGKILL, "term-term": 130, "hup": 130}[how]
            assert code == expected, f"{how}: exit status {code}\n{text[-3000:]}"
            assert "Traceback" not in text, text[-3000:]
            kills += 1
            how_counts[how] = how_counts.get(how, 0) + 1
        # Finish the run; it must be the uninterrupted one, bit for bit.
        log = tmp_path / "final.log"
        pid = zygote.start(_argv(data, out, "--resume"), log)
        assert zygote.wait(pid) == 0, log.read_text()[-3000:]
        got = [r for r in _records(out) if r[0] != "test"]
        want = [r for r in _records(reference) if r[0] != "test"]
        assert got == want
        assert (out / "last.eqx").read_bytes() == (reference / "last.eqx").read_bytes()
        assert (
            json.loads((out / "results.json").read_text())["test_accuracy"]
            == json.loads((reference / "results.json").read_text())["test_accuracy"]
        )
        print(f"{kills} kills ({how_counts}) in {attempts} attempts")
    finally:
        zygote.close()


def _last_step(out: Path) -> int:
    return max((step for split, step, _ in _records(out) if split == "train"), default=0)


def _wait_for_steps(out: Path, log: Path, pid: int, n: int, *, timeout: float) -> None:
    """Until the trainer `pid` has logged `n` train steps after its set-up (its log says when:
    by then it has cut metrics.jsonl back to its checkpoint), or has ended."""
    start, deadline = None, time.monotonic() + timeout
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        if start is None:
            if log.exists() and "set up in" in log.read_text():
                start = _last_step(out)
        elif _last_step(out) >= start + n:
            return
        time.sleep(0.005)


# -------------------------------------------------- --time-limit from process start


@pytest.mark.slow
def test_time_limit_counts_from_process_start_and_too_short_is_an_error(tmp_path):
    """0.001 min (60 ms) is used up by the interpreter's start: an error that says so, status
    1, nothing trained (it used to stop "cleanly" at step 0 with status 0, every time)."""
    from experiments.lra import synthetic

    data = tmp_path / "data"
    synthetic.write_listops(data, (16, 4, 4), seed=0, min_length=5, max_length=20)
    out = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "experiments.lra.train",
        *_argv(data, out, "--time-limit", "0.001"),
    ]
    proc = subprocess.run(
        argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert "--time-limit 0.001 min is too short for one step" in line
    assert not (out / "last.eqx").exists()

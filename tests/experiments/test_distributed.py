"""The trainer's multi-process path (`--distributed`) run for real: two or three processes
on this machine (`jax.distributed` with a coordinator on 127.0.0.1, the CPU backend's gloo
collectives across processes), one or two virtual CPU devices each.

- 20 ListOps steps give the losses and the test score of one process with four devices,
  only process 0 writes (process 1 is given another --out and never reads process 0's:
  the best weights for the test come as bytes from process 0), and `--resume` from the
  shared output continues bit-exactly;
- processes that differ in a setting (--seed, a model flag on one of three), in --resume,
  or whose peer never starts or whose coordinator port is taken, all stop with one
  `error:` line naming it, within a bounded time;
- a scheduler's warning (SIGUSR1) or SIGTERM sent to one process stops every process
  after the same step, with a checkpoint there;
- killing one process makes the others exit non-zero within a bounded time
  (`LRA_HEARTBEAT_TIMEOUT`): with the trainer's one line when a process other than 0 dies
  (JAX's runtime ends the others at once with its own message when process 0, which hosts
  its coordinator, dies).

Every process a test starts runs in its own process group, which the test kills in a
`finally` if it is still alive. The run with a late peer starts with the module and is
waited for by its last test, so that the 35 s one process sleeps overlap the other tests.
"""

import functools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from listops_argv import listops_argv

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
HEARTBEAT = 10  # seconds


_args = functools.partial(
    listops_argv, steps=20, depth=2, dropout=0, eval_every=10, checkpoint_every=5
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_TRAIN = [sys.executable, "-m", "experiments.lra.train"]
#: The trainer with a bug at its first validation (a process that fails on its own).
_BUGGY = """
import sys
from experiments.lra import _training, train

def validate(self, c):
    raise RuntimeError("an injected bug")

_training.Loop.validate = validate
sys.exit(train.main(sys.argv[1:], hard_abort=True))
"""
#: The trainer whose first training step starts 35 s late (a compile that is slow on one
#: process of a loaded machine); gloo gives a peer 30 s to arrive when it first connects.
_LATE = """
import sys, time
from experiments.lra import _training, train

first_step = _training.Loop.step

def step(self, c, batch, counter, _waited=[]):
    if not _waited:
        time.sleep(35)
        _waited.append(True)
    return first_step(self, c, batch, counter)

_training.Loop.step = step
sys.exit(train.main(sys.argv[1:], hard_abort=True))
"""
_COMMANDS: dict[str | None, list[str]] = {
    "buggy": [sys.executable, "-c", _BUGGY],
    "late": [sys.executable, "-c", _LATE],
}


def _start(
    args, *, processes: int, devices: int, logs: Path, per_rank=None, env=None, rank_command=None
) -> list[subprocess.Popen]:
    """`processes` trainer processes of `devices` CPU devices each, one process group each;
    `per_rank`: extra arguments of some ranks; `env`: extra variables; `rank_command`: the
    name of another command (`_COMMANDS`) for some ranks."""
    rank_command = rank_command or {}
    env = {**os.environ, **(env or {})}
    env.update(
        XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} "
        f"--xla_force_host_platform_device_count={devices}".strip(),
        JAX_PLATFORMS="cpu",
        PYTHONUNBUFFERED="1",
    )
    if processes > 1:
        env.setdefault("JAX_COORDINATOR_ADDRESS", f"127.0.0.1:{_free_port()}")
        env.update(JAX_NUM_PROCESSES=str(processes), LRA_HEARTBEAT_TIMEOUT=str(HEARTBEAT))
        env.setdefault("LRA_INIT_TIMEOUT", "60")
        args = [*args, "--distributed", "on"]
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    for rank in range(processes):
        out = open(logs / f"{rank}.log", "w")  # noqa: SIM115 (closed with the process)
        procs.append(
            subprocess.Popen(
                [*_COMMANDS.get(rank_command.get(rank), _TRAIN), *args]
                + list((per_rank or {}).get(rank, [])),
                env={**env, "JAX_PROCESS_ID": str(rank)},
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        out.close()
    return procs


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait(timeout=30)


def _finish(procs, logs: Path, timeout: float) -> list[tuple[int, str]]:
    """Wait for every process (killing what is left after `timeout`); (status, log) each."""
    try:
        deadline = time.monotonic() + timeout
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        _stop(procs)
    return [(p.returncode, (logs / f"{i}.log").read_text()) for i, p in enumerate(procs)]


def _run(args, *, processes: int, devices: int, logs: Path, timeout: float = 900, **kw):
    """Run to completion (all must exit 0); the logs of each process."""
    procs = _start(args, processes=processes, devices=devices, logs=logs, **kw)
    ended = _finish(procs, logs, timeout)
    for code, text in ended:
        assert code == 0, text[-3000:]
    return [text for _, text in ended]


def _error_line(text: str) -> str:
    """The one `error:` line of a process's output (no traceback)."""
    assert "Traceback" not in text, text[-3000:]
    lines = [x for x in text.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


def _losses(out: Path) -> list[float]:
    from experiments.runs.metrics import read_records

    return [r["loss"] for r in read_records(out / "metrics.jsonl") if r["split"] == "train"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from experiments.lra import synthetic

    root = tmp_path_factory.mktemp("listops")
    synthetic.write_listops(root, (64, 16, 16), seed=0, min_length=10, max_length=38)
    return root


def _results(out: Path) -> dict:
    import json

    return json.loads((out / "results.json").read_text())


def test_two_processes_match_one_and_resume_exactly(data, tmp_path):
    one, two, resumed = tmp_path / "one", tmp_path / "two", tmp_path / "resumed"
    _run(_args(data, one), processes=1, devices=4, logs=tmp_path / "logs-one")
    # Process 1 writes nowhere and, but for --resume, reads nothing of process 0's --out:
    # here it is given an empty folder of its own (it read best.eqx from there, and failed
    # or raced process 0's last write, before the bytes were shared).
    elsewhere = tmp_path / "elsewhere"
    logs = _run(
        _args(data, two),
        processes=2,
        devices=2,
        logs=tmp_path / "logs-two",
        per_rank={1: ["--out", str(elsewhere)]},
    )
    assert "4 cpu device(s)" in logs[0]
    reference = _losses(one)
    assert len(reference) == 20
    np.testing.assert_allclose(_losses(two), reference, rtol=1e-5)
    assert _results(two)["test_accuracy"] == _results(one)["test_accuracy"]
    # Only process 0 writes: the same files as the one-process run, and no report from 1.
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    assert "outputs in" in logs[0] and "outputs in" not in logs[1]
    assert not elsewhere.exists() or not any(elsewhere.iterdir())
    # Stopped at step 7, resumed by two processes from the shared output: bit-exact.
    _run(_args(data, resumed, "--stop-at", "7"), processes=2, devices=2, logs=tmp_path / "l1")
    _run(_args(data, resumed, "--resume"), processes=2, devices=2, logs=tmp_path / "l2")
    assert _losses(resumed) == _losses(two)
    assert (resumed / "last.eqx").read_bytes() == (two / "last.eqx").read_bytes()


def _refused(data, tmp_path, processes, per_rank, *, devices=1, env=None, timeout=300):
    procs = _start(
        _args(data, tmp_path / "run"),
        processes=processes,
        devices=devices,
        logs=tmp_path / "logs",
        per_rank=per_rank,
        env=env,
    )
    return _finish(procs, tmp_path / "logs", timeout)


@pytest.mark.parametrize(
    "processes, per_rank, words",
    [
        # Different seeds trained "replicated" copies that diverged, and reported success.
        (2, {0: ["--seed", "1"]}, "--seed is 1 on process 0; 0 on process 1"),
        # A model flag on one of three processes aborted inside gloo with a stack dump
        # (batch 6: three devices).
        (
            3,
            {0: ["--batch-size", "6"], 1: ["--batch-size", "6"]}
            | {2: ["--batch-size", "6", "--d-model", "16"]},
            "--d-model is 8 on process 0; 8 on process 1; 16 on",
        ),
    ],
    ids=["seed", "model-flag-of-3"],
)
def test_processes_that_differ_all_refuse_naming_the_setting(
    processes, per_rank, words, data, tmp_path
):
    for code, text in _refused(data, tmp_path, processes, per_rank):
        line = _error_line(text)
        assert code == 2 and words in line, line
    assert not (tmp_path / "run" / "last.eqx").exists()


def test_a_one_sided_resume_is_refused_by_every_process(data, tmp_path):
    """--resume on process 0 only (it ended in a traceback and an abort)."""
    import json

    from experiments.lra import _setup, cli

    run = tmp_path / "run"
    run.mkdir()
    saved = _setup.resolve_config(cli.parse_args(_args(data, run)))
    (run / "config.json").write_text(json.dumps(saved.to_json()))
    ended = _refused(data, tmp_path, 2, {0: ["--resume"]})
    for code, text in ended:
        line = _error_line(text)
        assert code == 2 and "--resume is true on process 0; false on process 1" in line, line


def test_a_peer_that_never_starts_or_a_port_in_use_is_one_line(data, tmp_path):
    """Only process 0 of 2 starts: it stops after LRA_INIT_TIMEOUT with one line (it was a
    native abort after JAX's 5 minutes); a coordinator port that another program listens
    on is refused at once."""
    env = {
        "LRA_INIT_TIMEOUT": "5",
        "JAX_NUM_PROCESSES": "2",
        "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{_free_port()}",
    }
    started = time.monotonic()
    ((code, text),) = _refused(
        data, tmp_path / "alone", 1, {0: ["--distributed", "on"]}, env=env, timeout=120
    )
    assert time.monotonic() - started < 60
    assert code == 1 and "did not all connect to" in _error_line(text)
    # It says what it waits for, and how long, before it waits (it printed nothing).
    waits = "process 0: waiting for the 2 processes of this run to connect to 127.0.0.1:"
    assert waits in text and "up to 5 s (LRA_INIT_TIMEOUT)" in text, text
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env["JAX_COORDINATOR_ADDRESS"] = f"127.0.0.1:{taken.getsockname()[1]}"
        ((code, text),) = _refused(
            data, tmp_path / "port", 1, {0: ["--distributed", "on"]}, env=env, timeout=120
        )
    assert code == 2 and "is in use on this machine" in _error_line(text)


def _wait_for_train_record(out: Path, procs, logs: Path, step: int = 1) -> None:
    from experiments.runs.metrics import read_records

    deadline = time.monotonic() + 600
    while not any(
        r["split"] == "train" and r["step"] >= step for r in read_records(out / "metrics.jsonl")
    ):
        assert all(p.poll() is None for p in procs), (logs / "0.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the run did not start training"
        time.sleep(0.2)


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGTERM"])
def test_a_signal_to_one_process_stops_every_process_at_one_step(name, data, tmp_path):
    """A scheduler's warning (SIGUSR1) or SIGTERM sent to process 1 only: both processes
    stop after the same step, with a checkpoint there, status 0 (a warning) or 130
    (resuming a multi-process run exactly: the first test). SIGTERM was swallowed in
    multi-process runs (JAX's preemption service took over its handler), and SIGUSR1
    ended the process with nothing saved."""
    import json

    out, logs = tmp_path / "run", tmp_path / "logs"
    args = _args(data, out)
    args[args.index("--steps") + 1] = "100000"
    procs = _start(args, processes=2, devices=2, logs=logs)
    try:
        _wait_for_train_record(out, procs, logs)
        os.kill(procs[1].pid, getattr(signal, name))
    finally:
        ended = _finish(procs, logs, 300)
    for code, text in ended:
        assert code == (0 if name == "SIGUSR1" else 130), text[-3000:]
        assert "Traceback" not in text, text[-3000:]
    # Process 0 did not get the signal: it stopped on process 1's word, at one step.
    if name == "SIGUSR1":
        (said,) = [x for x in ended[0][1].splitlines() if "stopping at step" in x]
        assert said.startswith("a signal to another process (a scheduler's warning")
        step = int(said.split("stopping at step ")[1].split(";")[0])
    else:
        (said,) = [x for x in ended[0][1].splitlines() if x.startswith("Stopped at step")]
        step = int(said.split("Stopped at step ")[1].split("/")[0])
    assert json.loads((out / "last.json").read_text())["step"] == step


def test_a_process_failing_alone_stops_the_others_with_its_line(data, tmp_path):
    """A bug on process 1 only, at its first validation (process 0 waits for it inside the
    evaluation's collectives): process 1 prints its traceback and one line, and process 0
    stops within seconds with that line, naming process 1 (it waited for the heartbeat
    timeout, then aborted in the runtime)."""
    out, logs = tmp_path / "run", tmp_path / "logs"
    procs = _start(_args(data, out), processes=2, devices=2, logs=logs, rank_command={1: "buggy"})
    ended = _finish(procs, logs, 300)
    (code0, text0), (code1, text1) = ended
    assert code1 == 1 and "RuntimeError: an injected bug" in text1
    assert [x for x in text1.splitlines() if x.startswith("error:")] == [
        "error: RuntimeError: an injected bug (a bug: see the traceback above)."
    ]
    assert code0 == 1
    assert _error_line(text0) == (
        "error: process 1 of 2: RuntimeError: an injected bug (a bug: see the traceback above)."
    )


@pytest.mark.parametrize("victim", [1, 0])
def test_killing_one_process_stops_the_other(victim, data, tmp_path):
    """A process killed mid-run (SIGKILL: no chance to say goodbye): the survivor exits
    non-zero within a bounded time, with the trainer's one line when process 1 died; when
    process 0 died, a failed collective gives that line too, unless JAX's runtime (whose
    coordinator process 0 hosted) ends the survivor first, at once, with its own message;
    or the watchdog of process 1 sees the coordinator go, and says so in its line."""
    out, logs = tmp_path / "run", tmp_path / "logs"
    args = _args(data, out)
    args[args.index("--steps") + 1] = "100000"
    procs = _start(args, processes=2, devices=2, logs=logs)
    try:
        _wait_for_train_record(out, procs, logs)
        os.killpg(procs[victim].pid, signal.SIGKILL)
        survivor = procs[1 - victim]
        code = survivor.wait(timeout=HEARTBEAT * 3 + 30)
    finally:
        _stop(procs)
    text = (logs / f"{1 - victim}.log").read_text()
    assert code != 0
    ours = [x for x in text.splitlines() if x.startswith("error:")]
    if victim == 1 or ours:  # the watchdog's line, or a failed collective's
        line = _error_line(text)
        expected = (
            "process 1 of 2 stopped answering",  # the watchdog, when process 1 died
            "collective operation",  # a failed collective
            "lost contact with process 0, which hosts the run's coordinator",  # 0 died
        )
        assert any(words in line for words in expected), line
    else:  # JAX's runtime was faster: process 0 hosted its coordinator
        assert "another task died" in text or "leader task" in text, text[-3000:]


#: A process of a Slurm launch: `--distributed auto`'s detection, then one collective.
_SLURM_CHILD = """
import jax
from experiments.runs import multiprocess, parallel, watchdog
assert parallel.distributed_env() == "slurm", parallel.distributed_env()
assert parallel.initialize_distributed("auto")
ranks = multiprocess.gather(str(jax.process_index()).encode())
print("ranks", jax.process_count(), b",".join(ranks).decode(), flush=True)
watchdog.current().close()
"""


def _slurm_job_id() -> int:
    """A job id whose coordinator port (JAX's choice: job id % 4096 + 61440) is free."""
    for port in range(61440 + os.getpid() % 4000, 65536):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port - 61440
    pytest.skip("no free port in 61440..65535")


def test_a_slurm_launch_is_found_by_jax_itself(tmp_path):
    """Two processes that have only `srun`'s variables (no JAX_*): `--distributed auto`
    starts `jax.distributed` because JAX's own cluster detection finds the launch
    (`runs.parallel.cluster`), and JAX finds the coordinator and the ranks there."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "OMPI_", "JAX_COORDINATOR", "JAX_NUM", "JAX_PROCESS"))
    }
    env.update(
        XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} "
        "--xla_force_host_platform_device_count=1".strip(),
        JAX_PLATFORMS="cpu",
        LRA_INIT_TIMEOUT="60",
        LRA_HEARTBEAT_TIMEOUT=str(HEARTBEAT),
        SLURM_JOB_ID=str(_slurm_job_id()),
        SLURM_STEP_NODELIST="localhost",
        SLURM_NTASKS="2",
    )
    procs = []
    for rank in range(2):
        out = open(tmp_path / f"{rank}.log", "w")  # noqa: SIM115 (closed with the process)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _SLURM_CHILD],
                env={**env, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)},
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        out.close()
    for code, text in _finish(procs, tmp_path, timeout=240):
        assert code == 0, text[-3000:]
        assert "ranks 2 0,1" in text, text[-3000:]


@pytest.mark.usefixtures("restore_backend_env")
def test_distributed_on_without_a_coordinator_is_one_line(data, tmp_path, monkeypatch, capsys):
    """It ended in a traceback from `jax.distributed.initialize`."""
    from experiments.lra import train

    for name in (
        "JAX_COORDINATOR_ADDRESS",
        "SLURM_JOB_ID",
        "SLURM_NTASKS",
        "OMPI_MCA_orte_hnp_uri",
    ):
        monkeypatch.delenv(name, raising=False)
    assert train.main([*_args(data, tmp_path / "run"), "--distributed", "on"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error: --distributed on: no coordinator" in err, err


@pytest.fixture(scope="module")
def late_peer_run(data, tmp_path_factory):
    """Two processes, the second of which reaches its first training step 35 s late: started
    here, waited for by the module's last test, which needs it, killed at the module's end
    if still alive. Its 35 s asleep overlap the module's other tests."""
    root = tmp_path_factory.mktemp("late-peer")
    out, logs = root / "run", root / "logs"
    args = listops_argv(data, out, steps=3, depth=1, dropout=0, eval_every=3)
    procs = _start(args, processes=2, devices=2, logs=logs, rank_command={1: "late"})
    try:
        yield procs, out, logs
    finally:
        _stop(procs)


@pytest.fixture(scope="module", autouse=True)
def _late_peer_run_starts_first(request):
    """Starts `late_peer_run` before the module's first test, where a test needing it is
    selected."""
    needs = test_a_process_35_seconds_late_at_its_first_step_is_waited_for.__name__
    if any(i.name == needs and i.path == request.path for i in request.session.items):
        request.getfixturevalue("late_peer_run")


def test_a_process_35_seconds_late_at_its_first_step_is_waited_for(late_peer_run):
    """One process reaches the first training step 35 s after the other (CI saw this as a
    slow compile under load): the run completes. Gloo's first connection gives a peer 30 s
    (`Gloo context initialization failed: ... GetKeyValue() timed out`, then an abort);
    the processes now connect right after meeting at the coordinator, and a connected
    collective waits for a late peer. The run started with the module (`late_peer_run`)."""
    procs, out, logs = late_peer_run
    for code, text in _finish(procs, logs, 300):
        assert code == 0, text[-3000:]
    assert len(_losses(out)) == 3

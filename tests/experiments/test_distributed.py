"""The trainer's multi-process path (`--distributed`) run for real: two processes on this
machine (`jax.distributed` with a coordinator on 127.0.0.1, the CPU backend's gloo
collectives across processes), two virtual CPU devices each.

- 20 ListOps steps give the losses of one process with four devices, only process 0
  writes, and `--resume` from the shared output continues bit-exactly;
- killing one process makes the other exit with the distributed runtime's error within
  a bounded time (`LRA_HEARTBEAT_TIMEOUT`), not hang.

Every process a test starts runs in its own process group, which the test kills in a
`finally` if it is still alive.
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


def _start(args, *, processes: int, devices: int, logs: Path) -> list[subprocess.Popen]:
    """`processes` trainer processes of `devices` CPU devices each, one process group each."""
    env = dict(os.environ)
    env.update(
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_PLATFORMS="cpu",
        PYTHONUNBUFFERED="1",
    )
    if processes > 1:
        env.update(
            JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{_free_port()}",
            JAX_NUM_PROCESSES=str(processes),
            LRA_HEARTBEAT_TIMEOUT=str(HEARTBEAT),
        )
        args = [*args, "--distributed", "on"]
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    for rank in range(processes):
        out = open(logs / f"{rank}.log", "w")  # noqa: SIM115 (closed with the process)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "experiments.lra.train", *args],
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


def _run(args, *, processes: int, devices: int, logs: Path, timeout: float = 900) -> list[str]:
    """Run to completion (all must exit 0); the logs of each process."""
    procs = _start(args, processes=processes, devices=devices, logs=logs)
    try:
        deadline = time.monotonic() + timeout
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        _stop(procs)
    texts = [(logs / f"{rank}.log").read_text() for rank in range(processes)]
    for p, text in zip(procs, texts, strict=True):
        assert p.returncode == 0, text[-3000:]
    return texts


def _losses(out: Path) -> list[float]:
    from experiments.lra._metrics import read_records

    return [r["loss"] for r in read_records(out / "metrics.jsonl") if r["split"] == "train"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from experiments.lra import synthetic

    root = tmp_path_factory.mktemp("listops")
    synthetic.write_listops(root, (64, 16, 16), seed=0, min_length=10, max_length=38)
    return root


def test_two_processes_match_one_and_resume_exactly(data, tmp_path):
    one, two, resumed = tmp_path / "one", tmp_path / "two", tmp_path / "resumed"
    _run(_args(data, one), processes=1, devices=4, logs=tmp_path / "logs-one")
    logs = _run(_args(data, two), processes=2, devices=2, logs=tmp_path / "logs-two")
    assert "4 cpu device(s)" in logs[0]
    reference = _losses(one)
    assert len(reference) == 20
    np.testing.assert_allclose(_losses(two), reference, rtol=1e-5)
    # Only process 0 writes: the same files as the one-process run, and no report from 1.
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    assert "outputs in" in logs[0] and "outputs in" not in logs[1]
    # Stopped at step 7, resumed by two processes from the shared output: bit-exact.
    _run(_args(data, resumed, "--stop-at", "7"), processes=2, devices=2, logs=tmp_path / "l1")
    _run(_args(data, resumed, "--resume"), processes=2, devices=2, logs=tmp_path / "l2")
    assert _losses(resumed) == _losses(two)
    assert (resumed / "last.eqx").read_bytes() == (two / "last.eqx").read_bytes()


@pytest.mark.parametrize("victim", [1, 0])
def test_killing_one_process_stops_the_other(victim, data, tmp_path):
    """A process killed mid-run (SIGKILL: no chance to say goodbye): the survivor exits
    non-zero with the distributed runtime's message within a bounded time."""
    out = tmp_path / "run"
    args = _args(data, out)
    args[args.index("--steps") + 1] = "100000"
    procs = _start(args, processes=2, devices=2, logs=tmp_path / "logs")
    try:
        deadline = time.monotonic() + 600
        while not (out / "metrics.jsonl").exists():  # both are training
            assert all(p.poll() is None for p in procs), (tmp_path / "logs" / "0.log").read_text()
            assert time.monotonic() < deadline, "the run did not start training"
            time.sleep(1)
        os.killpg(procs[victim].pid, signal.SIGKILL)
        survivor = procs[1 - victim]
        code = survivor.wait(timeout=HEARTBEAT * 6 + 60)
    finally:
        _stop(procs)
    text = (tmp_path / "logs" / f"{1 - victim}.log").read_text()
    assert code != 0
    assert "another task died" in text or "heartbeat" in text.lower(), text[-3000:]

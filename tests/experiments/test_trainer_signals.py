"""A batch scheduler's warning before a kill (SIGUSR1, SIGUSR2, SIGXCPU; issue 27): the
trainer saves a checkpoint after the current step and stops, status 0, and `--resume`
continues bit-exactly (they used to end the trainer with nothing saved). `--save-signals`
chooses the signals; `none` leaves them alone.

In-process runs on a tiny ListOps set, the signal sent to this process from the step hook.
"""

import functools
import json
import os
import signal
from pathlib import Path

import pytest
from listops_argv import listops_argv

from experiments.lra import train
from experiments.runs import signals as _signals
from experiments.runs.metrics import read_records

pytestmark = pytest.mark.usefixtures("restore_backend_env")

STEPS = 8
_args = functools.partial(listops_argv, steps=STEPS)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from experiments.lra import synthetic

    root = tmp_path_factory.mktemp("lra_signals")
    synthetic.write_listops(root, (64, 16, 16), seed=0, min_length=10, max_length=30)
    return root


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("signals_ref") / "run"
    assert train.main(_args(data, out)) == 0
    return out


def _history(out: Path) -> list[tuple]:
    return [
        (r["split"], r["step"], r["loss"])
        for r in read_records(out / "metrics.jsonl")
        if r["split"] != "test"
    ]


def _send_at(step: int, sig: signal.Signals):
    def hook(done):
        if done == step:
            # The old trainer left these at their default action, which ends this process:
            # fail here instead.
            assert signal.getsignal(sig) not in (signal.SIG_DFL, signal.SIG_IGN, None)
            os.kill(os.getpid(), sig)

    return hook


@pytest.mark.parametrize(
    "name",
    ["SIGUSR1", pytest.param("SIGUSR2", marks=pytest.mark.slow), "SIGXCPU"],
)
def test_a_warning_saves_and_stops_then_resumes_exactly(name, data, reference, tmp_path, capsys):
    out, sig = tmp_path / "run", getattr(signal, name)
    before = signal.getsignal(sig)
    results = train.run(_args(data, out), hook=_send_at(5, sig))
    assert signal.getsignal(sig) == before  # put back
    assert results["status"] == "stopped" and results["step"] == 5
    assert json.loads((out / "last.json").read_text())["step"] == 5
    assert f"{name} (a scheduler's warning, --save-signals): stopping at step 5" in (
        capsys.readouterr().err
    )
    assert train.main(_args(data, out, "--resume")) == 0
    assert _history(out) == _history(reference)
    assert (out / "last.eqx").read_bytes() == (reference / "last.eqx").read_bytes()


def test_save_signals_none_leaves_the_signals_alone(data, tmp_path):
    seen = []

    def mine(signum, frame):
        seen.append(signum)

    previous = signal.signal(signal.SIGUSR1, mine)
    try:
        results = train.run(
            _args(data, tmp_path / "run", "--save-signals", "none"),
            hook=lambda step: step == 2 and os.kill(os.getpid(), signal.SIGUSR1),
        )
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert results["status"] == "finished" and seen == [signal.SIGUSR1]


def test_the_cli_exits_0_after_a_warning(data, tmp_path):
    """The exit status of the command line: 0, as after --time-limit (130 is SIGINT's)."""
    out = tmp_path / "run"
    hook = _send_at(2, signal.SIGUSR1)
    real_run = train.run
    try:
        train.run = functools.partial(real_run, hook=hook)
        assert train.main(_args(data, out)) == 0
    finally:
        train.run = real_run
    assert json.loads((out / "last.json").read_text())["step"] == 2
    assert not (out / "results.json").exists()


@pytest.mark.parametrize(
    "text, expected",
    [("usr1,SIGXCPU", "USR1,XCPU"), (" USR2 ", "USR2"), ("none", "none"), ("NONE", "none")],
)
def test_save_signals_are_parsed_to_one_form(text, expected):
    assert _signals.parse_signals(text) == expected


@pytest.mark.parametrize("text", ["", "KILL", "USR1,TERM", "none,USR1", "9"])
def test_bad_save_signals_are_one_line_at_the_flag(text, data, tmp_path, capsys):
    assert train.main(_args(data, tmp_path / "run", "--save-signals", text)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if "error:" in x]
    assert "argument --save-signals: expected 'none' or signal names from USR1" in line


#: The demo at a tiny size (its part 1 skipped), in its own process: `python -m
#: experiments.demo` but for the sizes.
_TINY_DEMO = r"""
import sys
from experiments import demo
demo.LISTOPS.update(sizes=(64, 16, 16), min_length=10, max_length=30)
demo.MODEL.update(depth=1, d_model=8, d_state=8, batch_size=8)
demo.parity_and_speed = lambda **kwargs: None
sys.exit(demo.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_sigterm_in_the_demos_first_run_stops_the_demo(tmp_path):
    """The demo started its second run after the first was stopped, and ended in a
    `KeyError` traceback."""
    import subprocess
    import sys
    import time

    repo = Path(__file__).resolve().parents[2]
    out, log = tmp_path / "demo", tmp_path / "stderr.txt"
    env = {**os.environ, "PYTHONPATH": str(repo), "JAX_PLATFORMS": "cpu"}
    argv = [sys.executable, "-c", _TINY_DEMO, "--out", str(out), "--steps", "100000"]
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, cwd=repo, env=env, stderr=f, start_new_session=True)
    try:
        end = time.monotonic() + 600
        while not read_records(out / "complex" / "metrics.jsonl"):
            assert proc.poll() is None and time.monotonic() < end, log.read_text()[-3000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 130, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    text = log.read_text()
    assert "Traceback" not in text and "the demo stopped during the complex run" in text, text
    assert "--overwrite" in text and not (out / "real").exists()
    assert json.loads((out / "complex" / "last.json").read_text())["step"] > 0

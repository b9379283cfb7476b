"""The LRA trainer (`experiments/lra/train.py`) on generated ListOps: outputs of a run in
both forms, bit-exact resume (clean stop, SIGINT, KeyboardInterrupt, crash between
checkpoints), 4 devices vs 1, clear errors; plus Retrieval's two-tower path.

One tiny configuration throughout, so the jitted steps compile once per form and process
(the trainer caches them per configuration). Dropout is on, so the dropout keys are part
of what must resume exactly and match across device counts.
"""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest
from listops_argv import listops_argv

from eqx_lru._scan._methods import scan_method
from experiments.lra import synthetic, tasks, train
from experiments.lra.tasks import load_task
from experiments.runs import checkpoint as ckpt
from experiments.runs import env as _env
from experiments.runs.metrics import read_records

STEPS = 8
REPO = Path(__file__).resolve().parents[2]


_args = functools.partial(listops_argv, steps=STEPS)


def _losses(out):
    """Every (split, step, loss) record except the test one, in order."""
    return [
        (r["split"], r["step"], r["loss"])
        for r in read_records(Path(out) / "metrics.jsonl")
        if r["split"] != "test"
    ]


def _last_tree(out):
    return (Path(out) / "last.eqx").read_bytes()


# The trainer sets XLA_FLAGS / XLA_PYTHON_CLIENT_PREALLOCATE; conftest puts them back.
pytestmark = pytest.mark.usefixtures("restore_backend_env")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("lra")
    synthetic.write_listops(root, (96, 20, 20), seed=0, min_length=10, max_length=40)
    return root


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """An uninterrupted complex run: its results, output folder and the records it sent to
    `on_record`."""
    out = tmp_path_factory.mktemp("ref") / "run"
    forwarded = []
    return train.run(_args(data, out), on_record=forwarded.append), out, forwarded


@pytest.mark.parametrize("form", ["complex", pytest.param("real", marks=pytest.mark.slow)])
def test_run_writes_everything(form, data, reference, tmp_path):
    if form == "complex":
        results, out, forwarded = reference
        # Every record reaches the hook, as written (TensorBoard, W&B... without a dependency).
        assert forwarded == read_records(out / "metrics.jsonl")
    else:
        out = tmp_path / "run"
        # An explicit --method goes through the `form=make_core` path of the model.
        results = train.run(_args(data, out, "--form", "real", "--method", "sequential"))
    assert results["status"] == "finished" and results["step"] == STEPS
    assert 0 <= results["test_accuracy"] <= 1 and results["test_examples"] == 20
    assert results["steps_per_sec"] > 0
    for name in (
        "config.json",
        "metrics.jsonl",
        "curves.png",
        "results.json",
        "last.eqx",
        "last.json",
        "best.eqx",
        "best.json",
    ):
        assert (out / name).is_file(), name
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        json.loads((out / "results.json").read_text())["test_accuracy"] == results["test_accuracy"]
    )
    assert json.loads((out / "config.json").read_text())["form"] == form

    records = read_records(out / "metrics.jsonl")
    train_records = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train_records] == list(range(1, STEPS + 1))
    assert all(np.isfinite(r["loss"]) and r["lr"] > 0 for r in train_records)
    assert [r["step"] for r in records if r["split"] == "val"] == [4, 8]
    (test,) = [r for r in records if r["split"] == "test"]
    assert test["checkpoint"] == "best" and test["checkpoint_step"] == results["best_step"]

    # best.eqx holds (model, state) of the best-val step and reads back into a fresh model.
    cfg = json.loads((out / "config.json").read_text())
    task = load_task("listops", data)
    like = train.build_model(cfg, task, jax.random.PRNGKey(1))
    (model, state), meta = ckpt.load(out, "best", like)
    assert meta["step"] == results["best_step"]
    assert type(model.blocks[0].core).__name__ == {"complex": "ComplexLRU", "real": "RealLRU"}[form]
    method = {"complex": "auto", "real": "sequential"}[form]
    expected = scan_method(method)
    assert model.blocks[0].core.method == expected

    if form == "real":  # same key, same parameters, same function: same first loss
        ref = _losses(reference[1])
        assert _losses(out)[0][2] == pytest.approx(ref[0][2], rel=1e-5)


def test_resume_after_stop_is_bit_exact(data, reference, tmp_path):
    out = tmp_path / "run"
    first = train.run(_args(data, out, "--stop-at", "5"))
    assert first["status"] == "stopped" and first["step"] == 5
    assert json.loads((out / "last.json").read_text())["step"] == 5
    second = train.run(_args(data, out, "--resume"))
    assert second["status"] == "finished"
    assert _losses(out) == _losses(reference[1])  # exactly, every step and every eval
    assert _last_tree(out) == _last_tree(reference[1])  # params, BN and optimiser state, key
    assert second["test_accuracy"] == reference[0]["test_accuracy"]
    # The seconds of both processes (it recorded the resumed process's alone), and the last's.
    before = json.loads((out / "last.json").read_text())  # (rewritten by the second run)
    saved = json.loads((out / "results.json").read_text())
    first_total = saved["seconds"] - saved["seconds_last_process"]
    assert first_total > 0.05 and before["seconds_total"] >= first_total - 0.11
    assert saved["seconds"] == second["seconds"]


@pytest.mark.parametrize("how", ["sigint", "keyboard_interrupt"])
def test_interrupt_saves_a_checkpoint_that_resumes_exactly(how, data, reference, tmp_path):
    out = tmp_path / "run"
    # What the process had (Python's default handler; SIG_IGN where a shell started the
    # tests in the background): the trainer must put it back.
    before = signal.getsignal(signal.SIGINT)

    def hook(step):
        if step == 5:  # between checkpoints (every 3 steps)
            if how == "sigint":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                raise KeyboardInterrupt

    first = train.run(_args(data, out), hook=hook)
    assert first["status"] == "interrupted"
    assert json.loads((out / "last.json").read_text())["step"] == 5
    assert signal.getsignal(signal.SIGINT) is before  # restored
    assert train.main(_args(data, out, "--resume")) == 0
    assert _losses(out) == _losses(reference[1])
    assert _last_tree(out) == _last_tree(reference[1])


def test_resume_after_crash_between_checkpoints(data, reference, tmp_path):
    """A crash loses the steps since the last checkpoint (3); their logged records are
    dropped on resume and redone identically."""
    out = tmp_path / "run"

    def crash(step):
        if step == 5:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        train.run(_args(data, out), hook=crash)
    assert json.loads((out / "last.json").read_text())["step"] == 3
    assert max(step for _, step, _ in _losses(out)) == 5  # logged past the checkpoint
    train.run(_args(data, out, "--resume"))
    assert _losses(out) == _losses(reference[1])
    assert _last_tree(out) == _last_tree(reference[1])


_FOUR_DEVICES = """
import json, sys
from experiments.lra import train
import jax
assert jax.device_count() == 4, jax.devices()
data, out, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
code = train.main([a.replace("BATCH", "6") for a in args] + ["--out", out + "-bad"])
results = train.run([a.replace("BATCH", "8") for a in args] + ["--out", out, "--stop-at", "3"])
print(json.dumps({"bad_batch_code": code, "devices": results["devices"]}))
"""


@pytest.mark.slow
def test_four_devices_match_one(data, reference, tmp_path):
    """Batch sharded over 4 CPU devices: same losses as on one (BatchNorm statistics and
    dropout keys are global), and a batch size that does not split gives a clear error."""
    args = _args(data, "unused")
    args = args[: args.index("--out")] + args[args.index("--out") + 2 :]
    args[args.index("--batch-size") + 1] = "BATCH"
    env = {
        **os.environ,
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(_FOUR_DEVICES),
            str(data),
            str(tmp_path / "run"),
            json.dumps(args),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary == {"bad_batch_code": 2, "devices": 4}
    assert "--batch-size=6 must be a positive multiple of the number of devices (4" in proc.stderr
    assert "--batch-size 4 or 8" in proc.stderr
    four = [loss for split, _, loss in _losses(tmp_path / "run") if split == "train"]
    one = [loss for split, _, loss in _losses(reference[1]) if split == "train"][:3]
    assert len(four) == 3
    np.testing.assert_allclose(four, one, rtol=1e-4)


def _write_aan(root):
    """A tiny Retrieval set in the official layout (5 tab-separated columns, no header)."""
    rng = np.random.default_rng(0)
    folder = root / "tsv_data"
    folder.mkdir(parents=True)
    for split, n in (("train", 16), ("eval", 4), ("test", 4)):
        rows = []
        for i in range(n):
            docs = ["".join(rng.choice(list("abc de"), size=rng.integers(3, 20))) for _ in range(2)]
            rows.append(f"{i % 2}.0\tid{i}\tid{i + 1}\t{docs[0]}\t{docs[1]}\n")
        (folder / f"new_aan_pairs.{split}.tsv").write_text("".join(rows))


@pytest.mark.slow
def test_retrieval_two_tower_trains(tmp_path):
    """Retrieval's document pairs go through the two-tower model in the same trainer."""
    root = tmp_path / "data"
    _write_aan(root)
    args = [
        "--task",
        "retrieval",
        "--data-root",
        str(root),
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--d-model",
        "4",
        "--d-state",
        "2",
        "--depth",
        "1",
        "--no-progress",
    ]
    results = train.run(args)
    assert results["status"] == "finished" and 0 <= results["test_accuracy"] <= 1
    assert results["test_examples"] == 4


def test_clear_errors(data, tmp_path, capsys):
    with pytest.raises(SystemExit):  # at parse time
        train.run(_args(tmp_path / "missing", tmp_path / "a"))
    capsys.readouterr()
    assert train.main(_args(tmp_path / "missing", tmp_path / "a")) == 2
    err = capsys.readouterr().err
    assert "error: argument --data-root: " in err and "does not exist" in err
    (tmp_path / "empty").mkdir()
    with pytest.raises(train.UsageError, match="listops-1000"):
        train.run(_args(tmp_path / "empty", tmp_path / "b"))
    with pytest.raises(train.UsageError, match="--resume: .*config.json does not exist"):
        train.run(_args(data, tmp_path / "c", "--resume"))
    with pytest.raises(train.UsageError, match="fewer than --batch-size"):
        train.run(_args(data, tmp_path / "d", "--batch-size", "200"))
    capsys.readouterr()
    assert train.main(_args(data, tmp_path / "e", "--batch-size", "0")) == 2  # at parse time
    err = capsys.readouterr().err
    assert "argument --batch-size: expected an integer >= 1 and <= 2147483647" in err
    assert "got '0'" in err


def test_resume_refuses_changed_settings_and_existing_runs(data, reference, tmp_path):
    out = reference[1]
    with pytest.raises(train.UsageError, match=r"steps: 8 in the run, 9 now"):
        train.run(_args(data, out, "--resume", "--steps", "9"))
    with pytest.raises(train.UsageError, match="already holds a run"):
        train.run(_args(data, out))
    # Without the flags, --resume takes the run's settings from OUT/config.json.
    cfg = train.resolve_config(train.parse_args(["--out", str(out), "--resume"]))
    assert cfg.d_model == 8 and cfg.steps == STEPS and cfg.data_root == str(data)


def test_overwrite_replaces_a_run_and_excludes_resume(data, reference, tmp_path, capsys):
    """A folder holding a run is refused without --overwrite (naming it); with it the old
    run's files go before the new run reads its data (here it then stops: too few
    examples); --resume with --overwrite is refused when parsed."""
    out = tmp_path / "run"
    shutil.copytree(reference[1], out)
    assert train.main(_args(data, out)) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert "already holds a run" in line and "--overwrite" in line and "--resume" in line
    assert train.main(_args(data, out, "--resume", "--overwrite")) == 2
    assert "argument --overwrite: --resume continues" in capsys.readouterr().err
    assert (out / "last.eqx").exists() and (out / "best.eqx").exists()
    with pytest.raises(train.UsageError, match="fewer than --batch-size"):
        train.run(_args(data, out, "--overwrite", "--batch-size", "200"))
    old = ("config.json", "metrics.jsonl", "results.json", "last.eqx", "last.json", "best.eqx")
    assert not [name for name in old if (out / name).exists()]
    # A folder of the user's own files is no run: refused, with --overwrite too, untouched.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.json").write_text("mine")
    for extra in ((), ("--overwrite",)):
        with pytest.raises(train.UsageError, match="results.json exists and was not written"):
            train.run(_args(data, mine, *extra))
    assert (mine / "results.json").read_text() == "mine"


def test_checkpoint_detects_a_torn_pair(tmp_path):
    tree = (np.arange(3.0), np.asarray(2, np.int64))
    ckpt.save(tmp_path, "last", tree, {"step": 2})
    loaded, meta = ckpt.load(tmp_path, "last", tree, step_of=lambda t: t[-1])
    assert eqx.tree_equal(loaded, tree) and meta["step"] == 2
    ckpt.save(tmp_path, "other", (np.arange(3.0), np.asarray(3, np.int64)), {"step": 3})
    os.replace(tmp_path / "other.eqx", tmp_path / "last.eqx")  # as if killed between files
    with pytest.raises(ValueError, match="killed between writing the two files"):
        ckpt.load(tmp_path, "last", tree, step_of=lambda t: t[-1])
    assert not list(tmp_path.glob(".*.tmp"))


def test_time_limit_stops_cleanly_and_resumes_exactly(data, reference, tmp_path):
    """`--time-limit 1` (minute) with a fake clock that advances 10 s per step: the run
    stops (status 0, "stopped") when one more step plus its checkpoint might not fit,
    and resumes into the uninterrupted run, bit for bit."""
    out, now = tmp_path / "run", [0.0]
    first = train.run(
        _args(data, out, "--time-limit", "1"),
        hook=lambda step: now.__setitem__(0, 10.0 * step),
        clock=lambda: now[0],
    )
    # Reserve before step 6 at t = 50 s: 1.5 x 10 s (slowest step) + 2 s > the 10 s left.
    assert first["status"] == "stopped" and first["step"] == 5
    assert json.loads((out / "last.json").read_text())["step"] == 5
    assert train.main(_args(data, out, "--resume", "--time-limit", "1"), clock=lambda: 0.0) == 0
    assert _losses(out) == _losses(reference[1])
    assert _last_tree(out) == _last_tree(reference[1])


def test_backend_environment():
    """Deterministic GPU ops are added to XLA_FLAGS (kept, not duplicated, the user's own
    choice respected); big tasks allocate on demand unless the user chose an allocator."""
    env = _env.backend_env(
        {"XLA_FLAGS": "--xla_dump_to=/tmp/d"}, deterministic=True, task="listops"
    )
    assert env["set"] == {"XLA_FLAGS": "--xla_dump_to=/tmp/d --xla_gpu_deterministic_ops=true"}
    assert env["record"] == {
        "deterministic": True,
        "xla_flags": env["set"]["XLA_FLAGS"],
        "allocator": "preallocate",
    }
    again = _env.backend_env(
        {"XLA_FLAGS": env["set"]["XLA_FLAGS"]}, deterministic=True, task="listops"
    )
    assert again["set"] == {} and again["record"]["deterministic"]
    user = _env.backend_env(
        {"XLA_FLAGS": "--xla_gpu_deterministic_ops=false"},
        deterministic=True,
        task="pathx",
        on_demand=tasks.on_demand,
    )
    assert (
        user["set"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        and not user["record"]["deterministic"]
    )
    fast = _env.backend_env({}, deterministic=False, task="pathx", on_demand=tasks.on_demand)
    assert "XLA_FLAGS" not in fast["set"] and fast["record"]["allocator"] == "on demand"
    mine = _env.backend_env(
        {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"},
        deterministic=False,
        task="pathx",
        on_demand=tasks.on_demand,
    )
    assert mine["set"] == {} and mine["record"]["allocator"] == "user"
    # The look-up is the caller's: without one (the language model), no task allocates on
    # demand.
    assert _env.backend_env({}, deterministic=False, task="pathx")["set"] == {}


@pytest.mark.parametrize("deterministic", [True, False])
def test_deterministic_flag_set_before_the_backend(
    deterministic, data, reference, tmp_path, monkeypatch
):
    """`run` puts the flag into XLA_FLAGS, next to the user's flags, before it touches a
    device (in a fresh process that is before JAX reads XLA_FLAGS); config.json records
    the choice."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    out = tmp_path / "run"
    extra = [] if deterministic else ["--nondeterministic"]
    assert train.main(_args(data, out, "--stop-at", "1", *extra)) == 0
    flags = os.environ["XLA_FLAGS"].split()
    assert flags[0] == "--xla_force_host_platform_device_count=1"
    assert flags[1:] == (["--xla_gpu_deterministic_ops=true"] if deterministic else [])
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["deterministic"] is deterministic and cfg["allocator"] == "preallocate"
    if not deterministic:  # --resume keeps the run's choice
        assert train.main(_args(data, out, "--stop-at", "2", "--resume")) == 0
        assert json.loads((out / "config.json").read_text())["deterministic"] is False


@pytest.mark.parametrize(
    "core",
    [
        "lru",
        pytest.param("s4d", marks=pytest.mark.slow),
        pytest.param("s5", marks=pytest.mark.slow),
    ],
)
def test_every_core_trains_through_the_cli(core, data, reference, tmp_path):
    """`--core`: the LRU and the S4D / S5 baselines train in the same pipeline."""
    out = reference[1]
    if core != "lru":
        baselines = pytest.importorskip(
            "eqx_lru.baselines", reason="eqx_lru.baselines not available"
        )
        if not hasattr(baselines, core.upper()):
            pytest.skip(f"eqx_lru.baselines has no {core.upper()} yet")
        out = tmp_path / "run"
        # S5's ListOps setting has J = 8 blocks, which needs P a multiple of 16; d_state 4
        # takes J = 2.
        extra = ("--blocks", "2") if core == "s5" else ()
        assert train.main(_args(data, out, "--core", core, "--stop-at", "4", *extra)) == 0
    records = read_records(out / "metrics.jsonl")
    losses = [r["loss"] for r in records if r["split"] == "train"]
    assert len(losses) >= 4 and np.all(np.isfinite(losses))
    val = [r for r in records if r["split"] == "val"]
    assert val and 0 <= val[0]["accuracy"] <= 1
    assert json.loads((out / "config.json").read_text())["core"] == core


def test_importing_the_trainer_leaves_the_backend_alone():
    """`configure_backend` only works if nothing started JAX's backend before `run`: not
    importing the trainer, its model code or eqx_lru (checked in a fresh process)."""
    code = (
        "from experiments.lra import train\nfrom jax._src import xla_bridge as xb\n"
        "print(getattr(xb, '_backends', None))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    if last == "None":
        pytest.skip("this JAX keeps its backends elsewhere")
    assert last == "{}"


# --------------------------------------------------------------------------- issue 20: no lost run


@pytest.mark.parametrize("state", ["new_eqx_without_json", "old_pair_half_moved"])
def test_resume_after_a_kill_inside_a_save_is_bit_exact(state, data, reference, tmp_path, capsys):
    """`kill -9` during a checkpoint write leaves the new checkpoint or the previous one
    complete, and --resume continues from it bit for bit (it used to refuse: the whole run
    was lost). The run stopped at 5 holds last.* (step 5) and last.prev.* (step 3)."""
    out = tmp_path / "run"
    train.run(_args(data, out, "--stop-at", "5"))
    assert json.loads((out / "last.prev.json").read_text())["step"] == 3
    if state == "new_eqx_without_json":  # killed after the new last.eqx, before its last.json
        (out / "last.json").unlink()
    else:  # killed while the next save moved the step-5 pair aside (.eqx moved, .json not yet)
        os.replace(out / "last.eqx", out / "last.prev.eqx")
    capsys.readouterr()
    assert train.main(_args(data, out, "--resume")) == 0
    err = capsys.readouterr().err
    assert ("resuming from the previous one" in err) == (state == "new_eqx_without_json")
    assert f"at step {3 if state == 'new_eqx_without_json' else 5}/{STEPS}" in err
    assert _losses(out) == _losses(reference[1])
    assert _last_tree(out) == _last_tree(reference[1])


def test_second_signal_during_a_save_waits_for_it(data, reference, tmp_path, monkeypatch):
    """A second Ctrl-C arriving between the two files of a checkpoint write: the write
    completes, then the run aborts (130); the checkpoint resumes exactly (it used to abort
    between the files and leave a pair that --resume refused)."""
    out, armed = tmp_path / "run", []
    real_replace = os.replace

    def replace(src, dst, **kwargs):
        real_replace(src, dst, **kwargs)
        if armed and Path(dst).name == "last.eqx":
            armed.clear()
            os.kill(os.getpid(), signal.SIGINT)  # the second signal, mid-save

    def hook(step):
        if step == 5:
            armed.append(True)
            os.kill(os.getpid(), signal.SIGINT)  # the first: finish the step, save, stop

    def unhandled(signum, frame):
        raise AssertionError("the second SIGINT reached the default handler during the save")

    monkeypatch.setattr(os, "replace", replace)
    previous = signal.signal(signal.SIGINT, unhandled)
    try:
        code = _main_with_hook(_args(data, out), hook)
    finally:
        signal.signal(signal.SIGINT, previous)
        monkeypatch.undo()
    assert code == 130
    assert json.loads((out / "last.json").read_text())["step"] == 5
    assert train.main(_args(data, out, "--resume")) == 0
    assert _losses(out) == _losses(reference[1])
    assert _last_tree(out) == _last_tree(reference[1])


def _main_with_hook(argv, hook) -> int:
    """`train.main` with a step hook (main has none): the same exit statuses."""
    try:
        results = train.run(argv, hook=hook)
    except train.Abort:
        return 130
    return 130 if results["status"] == "interrupted" else 0


def test_sighup_is_handled_like_sigterm(data, reference, tmp_path):
    """A closed terminal (SIGHUP) stops the run after a checkpoint, as SIGTERM does (it used
    to kill the trainer at once, with nothing saved)."""
    out = tmp_path / "run"

    def unhandled(signum, frame):
        raise AssertionError("SIGHUP reached the default handler: the trainer does not handle it")

    previous = signal.signal(signal.SIGHUP, unhandled)
    try:
        first = train.run(
            _args(data, out), hook=lambda step: step == 5 and os.kill(os.getpid(), signal.SIGHUP)
        )
        assert signal.getsignal(signal.SIGHUP) is unhandled  # restored
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert first["status"] == "interrupted"
    assert json.loads((out / "last.json").read_text())["step"] == 5
    assert train.main(_args(data, out, "--resume")) == 0
    assert _last_tree(out) == _last_tree(reference[1])


def test_time_limit_too_short_for_one_step_is_an_error(data, tmp_path, capsys):
    """A limit already used up before the first step (by start-up and loading, which count:
    the limit runs from `started`) is an error, status 1 (it used to "stop" at step 0 with
    status 0, so a chain of such jobs never progressed and each reported success)."""
    out = tmp_path / "run"
    assert train.main(_args(data, out, "--time-limit", "1"), clock=lambda: 100.0, started=0.0) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "--time-limit 1 min is too short for one step: 100 s of it went to" in line
    assert not (out / "last.eqx").exists()


def test_second_signal_between_saves_aborts_at_once(data, reference, tmp_path):
    """Two Ctrl-C in a row between checkpoints, in-process (`hard_abort=False`, as in a
    notebook): `Abort` at once, the last checkpoint (step 3) complete and resumable."""
    out = tmp_path / "run"

    def hook(step):
        if step == 5:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(train.Abort, match="second SIGINT"):
        train.run(_args(data, out), hook=hook)
    assert json.loads((out / "last.json").read_text())["step"] == 3
    assert train.main(_args(data, out, "--resume")) == 0
    assert _losses(out) == _losses(reference[1])

"""The language-model trainer (`python -m experiments.lm train`) on a small structured corpus
the tests write: it learns (below its own bigram), resumes after an interrupt with identical
metrics and checkpoint, refuses another corpus on resume, refuses bad flags in one line,
and its run samples from the command line.

One tiny configuration throughout, so the programs compile once per process (the trainer
keeps them per configuration)."""

import argparse
import json
import os
import shutil
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from lm_corpus import lm_argv, write_corpus

from experiments.lm import cli, config, train, weights
from experiments.runs.errors import UsageError
from experiments.runs.metrics import read_records

STEPS = 60

# The trainer sets XLA_FLAGS for deterministic GPU ops; conftest puts them back.
pytestmark = pytest.mark.usefixtures("restore_backend_env")


def _metrics(out):
    """The records of a run, without the wall-clock fields."""
    drop = ("steps_per_sec", "seconds")
    return [
        {k: v for k, v in r.items() if k not in drop} for r in read_records(out / "metrics.jsonl")
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("lm") / "corpus")


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm") / "reference"
    results = train.run(lm_argv(corpus, out, steps=STEPS))
    assert results["status"] == "finished" and results["step"] == STEPS
    return out


def test_training_beats_its_own_bigram(reference):
    """60 steps of the tiny model: held-out bits per byte far below the Kneser-Ney bigram
    fitted on the same training split (measured 0.37 bits at step 50 against 1.90)."""
    results = json.loads((reference / "results.json").read_text())
    baselines = results["baselines_bits_per_byte"]
    assert results["val_bits_per_byte"] < 0.5 * baselines["val"]["bigram_kneser_ney"]
    assert results["test_bits_per_byte"] < 0.5 * baselines["test"]["bigram_kneser_ney"]
    assert baselines["val"]["bigram_kneser_ney"] < baselines["val"]["unigram"]


def test_run_writes_its_outputs(reference):
    names = {"config.json", "corpus.json", "metrics.jsonl", "results.json", "curve.png"}
    assert names <= {p.name for p in reference.iterdir()}
    results = json.loads((reference / "results.json").read_text())
    assert results["test_bits_per_byte"] > 0
    records = _metrics(reference)
    assert [r["step"] for r in records if r["split"] == "val"] == [30, 60]
    assert records[-1]["split"] == "test"
    corpus = json.loads((reference / "corpus.json").read_text())
    config = json.loads((reference / "config.json").read_text())
    assert config["corpus_sha256"] == corpus["corpus"]["sha256"]


def test_interrupt_then_resume_gives_identical_metrics(corpus, reference, tmp_path):
    out = tmp_path / "run"

    def hook(step):
        if step == 37:  # Ctrl-C mid-run (not at a checkpoint step): saved after step 37
            os.kill(os.getpid(), signal.SIGINT)

    assert train.run(lm_argv(corpus, out, steps=STEPS), hook=hook)["status"] == "interrupted"
    assert json.loads((out / "last.json").read_text())["step"] == 37
    assert train.run(lm_argv(corpus, out, "--resume", steps=STEPS))["status"] == "finished"
    assert _metrics(out) == _metrics(reference)
    assert (out / "last.eqx").read_bytes() == (reference / "last.eqx").read_bytes()


def test_time_limit_stops_cleanly_and_resumes_exactly(corpus, reference, tmp_path):
    ticks = iter(range(10**6))
    clock = lambda: float(next(ticks))  # noqa: E731 - one second per reading
    out = tmp_path / "run"
    results = train.run(lm_argv(corpus, out, "--time-limit=1", steps=STEPS), clock=clock)
    assert results["status"] == "stopped" and 0 < results["step"] < STEPS
    assert json.loads((out / "last.json").read_text())["step"] == results["step"]
    assert train.run(lm_argv(corpus, out, "--resume", steps=STEPS))["status"] == "finished"
    assert _metrics(out) == _metrics(reference)


def test_resume_refuses_another_corpus(corpus, tmp_path):
    mine = shutil.copytree(corpus, tmp_path / "corpus")
    out = tmp_path / "run"
    train.run(lm_argv(mine, out, "--stop-at=4", steps=STEPS))
    for path in mine.glob("*.py"):
        path.write_text(path.read_text().replace("fox", "cat"))
    with pytest.raises(UsageError, match="the corpus differs from the one the run") as e:
        train.run(lm_argv(mine, out, "--resume", steps=STEPS))
    assert "Python" in str(e.value) and "another --out" in str(e.value)


#: Numeric flags for which 0 is a valid value.
ZERO_OK = {"--seed", "--weight-decay", "--dropout", "--warmup-fraction", "--r-min", "--r-max"}
ZERO_OK |= {"--temperature"}


@pytest.mark.parametrize("command", ["train", "sample"])
def test_every_numeric_flag_refuses_bad_values(command, capsys):
    """As `test_cli_flags.py` for the other commands: "abc", "nan", "inf", "1e400", "-4" and
    (unless valid) "0" are refused at parse time, as one `error: argument --flag` line."""
    parser = cli.parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    base = {"train": ["--out", "OUT"], "sample": ["--run", "OUT"]}[command]
    flags = [
        a.option_strings[-1]
        for a in sub.choices[command]._actions
        if a.option_strings
        and getattr(a.type, "__name__", "").startswith(("an integer", "a finite number"))
    ]
    assert "--lr" in flags or command == "sample"
    for flag in flags:
        for value in ["abc", "nan", "inf", "1e400", "-4"] + ([] if flag in ZERO_OK else ["0"]):
            with pytest.raises(SystemExit) as e:
                parser.parse_args([command, *base, flag, value])
            err = capsys.readouterr().err
            lines = [line for line in err.splitlines() if "error:" in line]
            assert e.value.code == 2 and len(lines) == 1 and f"argument {flag}" in lines[0]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--lr=0"], "error: argument --lr: expected a finite number > 0, got '0'"),
        (["--preset=tpu"], "error: argument --preset: invalid choice: 'tpu'"),
        (["--chunk=100000"], "error: the training split (24,000 bytes) is too short"),
        (["--r-min=0.99", "--r-max=0.9"], "error: need --r-min <= --r-max"),
    ],
)
def test_bad_flags_are_one_line_errors(argv, message, corpus, tmp_path, capsys):
    code = train.main(["train", *lm_argv(corpus, tmp_path / "run", *argv)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err  # (argparse adds a usage line)


def test_resume_refuses_changed_settings_and_a_second_run_in_a_folder(
    corpus, reference, tmp_path, capsys
):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    assert train.main(["train", *lm_argv(corpus, out, "--resume", d_model=64)]) == 2
    assert "cannot change (--d-model: 32 in the run, 64 now)" in capsys.readouterr().err
    assert train.main(["train", *lm_argv(corpus, out)]) == 2
    assert "already holds a run. Pass --resume" in capsys.readouterr().err
    assert train.main(["sample", "--run", str(tmp_path / "none")]) == 2
    assert "holds no language-model run" in capsys.readouterr().err


def test_sample_command_writes_the_same_text_in_both_forms(reference, capsys):
    argv = ["sample", "--run", str(reference), "--prompt", "# the", "--length", "40"]
    assert train.main(argv) == 0
    complex_text = capsys.readouterr().out
    assert train.main([*argv, "--form", "real"]) == 0
    assert capsys.readouterr().out == complex_text
    assert complex_text.startswith("# the") and len(complex_text.encode()) >= 45


def test_presets_are_valid_settings():
    cpu, gpu = config.new_run({}), config.new_run({"preset": "gpu", "form": "real"})
    assert cpu.preset == "cpu" and cpu.steps == 1000 and cpu.run_id != gpu.run_id
    assert (gpu.depth, gpu.d_model, gpu.form) == (6, 512, "real")
    with pytest.raises(config.ConfigError, match="not a language-model run's settings"):
        config.resumed_run({"task": "listops"}, {}, out="OUT")


@pytest.mark.parametrize("fmt", ["stablehlo", "onnx"])
def test_export_step_follows_the_model(fmt, reference, tmp_path):
    """`export --step` through `eqx_lru.export`: the exported step, fed its own carry byte
    after byte, gives the logits of the model's parallel call at every position."""
    if fmt == "onnx":
        ort = pytest.importorskip("onnxruntime")
    argv = ["export", "--run", str(reference), "--format", fmt, "--step", "--dest", str(tmp_path)]
    assert train.main(argv) == 0
    manifest = json.loads((tmp_path / f"step.{fmt}.json").read_text())
    assert manifest["vocab_size"] == 256 and manifest["source"]["step"] == STEPS
    loaded = weights.load_model(reference)
    text = np.frombuffer(b"# the quick brown fox", np.uint8).astype(np.int32)
    want, _ = loaded.model(jnp.asarray(text), loaded.state, inference=True)
    carry = [
        np.zeros([2 if d == "batch" else d for d in c["shape"]], c["dtype"])
        for c in manifest["carry"]
    ]
    if fmt == "onnx":
        session = ort.InferenceSession(str(tmp_path / "step.onnx"))  # pyright: ignore[reportPossiblyUnboundVariable]
        names = [i.name for i in session.get_inputs()]
        run = lambda *xs: session.run(None, dict(zip(names, xs, strict=True)))  # noqa: E731
    else:
        program = jax.export.deserialize(bytearray((tmp_path / "step.stablehlo").read_bytes()))
        run = lambda *xs: [np.asarray(y) for y in program.call(*xs)]  # noqa: E731
    for t, byte in enumerate(text):
        y_t, *carry = run(np.full(2, byte, np.int32), *carry)
        np.testing.assert_allclose(y_t[1], want[t], rtol=1e-4, atol=1e-4)


def _plant_export(folder) -> None:
    """An artifact and manifest in `folder` as `eqx_lru.export.write` leaves them (its
    manifest's entries, the artifact's SHA-256): what `--overwrite` recognises by content."""
    import hashlib

    folder.mkdir(parents=True, exist_ok=True)
    data = b"old weights"
    (folder / "model.stablehlo").write_bytes(data)
    manifest = {
        "format": "stablehlo",
        "eqx_lru": "0",
        "artifact": "model.stablehlo",
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    (folder / "model.stablehlo.json").write_text(json.dumps(manifest))


def test_a_folder_of_the_users_files_is_not_a_run_and_overwrite_removes_only_the_runs(
    corpus, reference, tmp_path, capsys
):
    """A folder holding only the user's own config.json and results.json was called "a
    run", and the --overwrite that the refusal advised deleted both; a replaced run kept
    its old RUN/export/ (weights a server would still read)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "settings"}')
    (mine / "results.json").write_text('{"my": "results"}')
    for extra in ([], ["--overwrite"]):
        assert train.main(["train", *lm_argv(corpus, mine, *extra)]) == 2
        err = capsys.readouterr().err
        assert "config.json exists and was not written by `lm train`" in err, err
    assert (mine / "config.json").read_text() == '{"my": "settings"}'
    assert (mine / "results.json").read_text() == '{"my": "results"}'
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    _plant_export(out / "export")
    (out / "export" / "notes.txt").write_text("mine")
    (out / "notes.txt").write_text("mine")
    # The new run's folder is cleaned, then it stops at its corpus (a chunk too long).
    assert train.main(["train", *lm_argv(corpus, out, "--overwrite", chunk=100_000)]) == 2
    capsys.readouterr()
    assert not (out / "export" / "model.stablehlo").exists()
    assert not (out / "export" / "model.stablehlo.json").exists()
    left = sorted(p.name for p in out.iterdir())
    assert left == [".lock", ".outputs.json", "export", "notes.txt"], left
    assert (out / "export" / "notes.txt").read_text() == "mine"


def test_a_lock_that_is_a_link_loop_is_named(corpus, tmp_path, capsys):
    """It was "--out is not a writable folder", blaming the folder."""
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").symlink_to(out / ".lock")
    assert train.main(["train", *lm_argv(corpus, out)]) == 2
    err = capsys.readouterr().err
    assert f"cannot open its lock file {out / '.lock'}" in err and "writable" not in err, err

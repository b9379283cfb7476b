"""What a user gives the language-model commands (`python -m experiments.lm train|sample|
export`, `experiments.lm.plot`), checked where it enters (issues 32 and 34): numbers against
the values they meet, text that is not UTF-8, run files edited by hand, a folder another
trainer holds, a full disk, a finished run resumed, the bytes `sample` prints; and a
property-based walk over every flag: each value parses to valid settings or is refused
with one line, never a traceback.

Nothing here compiles a training step: the run folders are written by `_fake_run` (a
model initialised and saved as the trainer saves it), and the trainer is stopped at the
point each case is about.
"""

import argparse
import contextlib
import errno
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from lm_corpus import TINY, lm_argv, write_corpus

from experiments.lm import cli, config, plot, train, weights
from experiments.lm.model import build_model, make_optimizer, stream_carry
from experiments.lm.sample import shown
from experiments.runs import checkpoint as ckpt
from experiments.runs.errors import UsageError

pytestmark = pytest.mark.usefixtures("restore_backend_env")

NOT_UTF8 = "\udcff"  # the byte 0xff in `sys.argv` (a surrogate escape)


def _one_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if "error:" in x]
    assert len(lines) == 1, err
    return lines[0]


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = train.main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("lm_commands") / "corpus")


def _fake_run(folder: Path, step: int = 3, **over) -> config.LMConfig:
    """A run folder as the trainer leaves it at `step` (its weights those at init), without
    training: `config.json`, `corpus.json` and the `last` checkpoint."""
    cfg = config.new_run({**TINY, "steps": 60, **over})
    cfg = config.LMConfig(**{**cfg.to_json(), "corpus_sha256": "0" * 64})
    model, _ = build_model(cfg, jax.random.PRNGKey(0))
    params, _ = eqx.partition(model, eqx.is_inexact_array)
    optim, _ = make_optimizer(cfg)
    tree = (
        params,
        optim.init(params),
        stream_carry(model, cfg.streams),
        jax.random.PRNGKey(1),
        np.asarray(step, np.int64),
    )
    meta = {"step": step, "pending": [], "config": cfg.to_json(), "run_id": cfg.run_id}
    folder.mkdir(parents=True)
    ckpt.save(folder, "last", tree, {**meta, "corpus_sha256": cfg.corpus_sha256})
    (folder / "config.json").write_text(json.dumps(cfg.to_json(), indent=1))
    baselines = {"unigram": 4.6, "bigram_add_one": 2.3, "bigram_kneser_ney": 1.9}
    corpus = {"baselines_bits_per_byte": {"val": baselines, "test": baselines}}
    (folder / "corpus.json").write_text(json.dumps(corpus))
    return cfg


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm_commands") / "run"
    _fake_run(folder)
    return folder


# ------------------------------------------------------------------ numbers and text


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--seed", str(2**63)], "argument --seed: expected an integer >= 0 and <= 4294967295"),
        (["--steps", str(10**30)], "argument --steps: expected an integer >= 1 and <= 2147483647"),
        (["--d-state", str(10**12)], "argument --d-state: expected an integer >= 1 and <= 2147"),
        (["--r-min", "0", "--r-max", "0"], "--r-max 0.0: its square underflows float32"),
        (["--r-max", "0.99999999"], "--r-max 0.99999999 rounds to 1 in float32"),
        (["--lr", "1e-320"], "argument --lr: expected a finite number >= 1.17549e-38"),
        (["--lr-factor", "1e39"], "argument --lr-factor: expected a finite number >= 1.17549e"),
        (["--lr", "1e-30", "--lr-factor", "1e-10"], "= 1e-40 is outside float32's range"),
        (["--max-phase", "1e-40"], "argument --max-phase: expected a finite number >= 1.17549e"),
        (["--save-signals", "KILL"], "argument --save-signals: expected 'none' or signal names"),
        (["--corpus", NOT_UTF8], "argument --corpus: expected UTF-8 text, got bytes"),
        (["--out", NOT_UTF8], "argument --out: expected UTF-8 text, got bytes"),
        (["--corpus", "{missing}"], "--corpus '{missing}' is not a folder"),
    ],
)
def test_train_refuses_numbers_and_text_beyond_what_they_meet(argv, words, corpus, tmp_path):
    """`--seed 2**63`, `--steps 10**30`, `--d-state 10**12` and `--r-min 0 --r-max 0` were
    tracebacks; `--lr 1e-320` trained to a NaN reported as divergence ("lower --lr")."""
    missing = str(tmp_path / "missing")
    argv = [a.replace("{missing}", missing) for a in argv]
    base = [a for a in lm_argv(corpus, tmp_path / "run") if not a.startswith("--corpus")]
    code, _, err = _main(["train", *base, *argv])
    line = _one_error(err)
    assert code == 2 and words.replace("{missing}", missing) in line, line
    assert not (tmp_path / "run").exists()  # refused before anything is written


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--length", str(2**63)], "argument --length: expected an integer >= 1 and <= 2147483647"),
        (["--samples", str(10**30)], "argument --samples: expected an integer >= 1 and <= 2147"),
        (["--seed", str(2**63)], "argument --seed: expected an integer >= 0 and <= 4294967295"),
        (["--temperature", "1e-320"], "argument --temperature: expected 0 or a number >= 1.17"),
        (["--prompt", "ab" + NOT_UTF8], "argument --prompt: expected UTF-8 text, got bytes that"),
        (["--run", NOT_UTF8], "argument --run: expected UTF-8 text"),
    ],
)
def test_sample_refuses_numbers_and_text_beyond_what_they_meet(argv, words, run):
    """`--length 2**63` and a non-UTF-8 `--prompt` were tracebacks."""
    code, out, err = _main(["sample", "--run", str(run), *argv])
    assert code == 2 and words in _one_error(err) and out == ""


def test_sample_shows_every_byte_that_is_not_text_as_an_escape():
    """A NUL (the corpus's file separator, which the model writes) or an escape sequence
    never reaches the terminal; text, tabs and newlines do."""
    raw = b"def f():\n\treturn 1\x00\x1b[2J\r\x7f\xff\xfe caf\xc3\xa9 \xc2\x85"
    text = shown(raw)
    assert text == "def f():\n\treturn 1\\x00\\x1b[2J\\x0d\\x7f\\xff\\xfe café \\x85"
    assert all(c in "\t\n" or c.isprintable() for c in text)
    every = shown(bytes(range(256)))
    assert "\x00" not in every and "\t" in every and "\n" in every
    assert all(c in "\t\n" or c.isprintable() for c in every)


# ------------------------------------------------------------------ run files edited


def _edit_json(name: str, change):
    def edit(folder: Path) -> None:
        path = folder / name
        path.write_text(change(path.read_text()))

    return edit


def _cut_eqx(folder: Path) -> None:
    path = folder / "last.eqx"
    path.write_bytes(path.read_bytes()[:-7])


def _as(key, value):
    return lambda text: json.dumps({**json.loads(text), key: value})


EDITS = {
    "last.json step text": (_edit_json("last.json", _as("step", "x")), "its 'step' is \"x\""),
    "last.json step < 0": (_edit_json("last.json", _as("step", -3)), "its 'step' is -3"),
    "last.json config a list": (_edit_json("last.json", _as("config", [])), "its 'config'"),
    "last.json a list": (_edit_json("last.json", lambda t: "[]"), "not a JSON object"),
    "last.json cut": (_edit_json("last.json", lambda t: t[:20]), "not valid JSON"),
    "last.eqx cut": (_cut_eqx, "last.eqx is corrupt or truncated"),
    "config.json a list": (_edit_json("config.json", lambda t: "[]"), "(not a JSON object)"),
    "config.json corpus": (_edit_json("config.json", _as("corpus", 5)), "its 'corpus': expec"),
    "config.json digest": (_edit_json("config.json", _as("corpus_sha256", "ab")), "a SHA-256"),
    "config.json seed": (_edit_json("config.json", _as("seed", 2**70)), "its 'seed': expected"),
    "config.json lr nan": (_edit_json("config.json", _as("lr", float("nan"))), "its 'lr': exp"),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_sample_and_export_refuse_an_edited_run_file_in_one_line(what, run, tmp_path):
    """An edited `last.json` (a step that is text) was a traceback in `sample`; so were a
    `config.json` that is not an object, and settings of the wrong kind were read."""
    edit, words = EDITS[what]
    folder = shutil.copytree(run, tmp_path / "run")
    edit(folder)
    for command in (["sample"], ["export", "--format", "stablehlo"]):
        code, out, err = _main([*command, "--run", str(folder)])
        line = _one_error(err)
        assert code == 2 and words in line and str(folder) in line and out == "", line
    assert not (folder / "export").exists()


def test_plot_refuses_an_existing_png_and_edited_files(run, tmp_path):
    png = tmp_path / "curve.png"
    png.write_bytes(b"written before")
    code, _, err = _main_plot(["--run", str(run), "--out", str(png)])
    assert code == 2 and "pass --overwrite" in _one_error(err)
    assert png.read_bytes() == b"written before"
    folder = shutil.copytree(run, tmp_path / "run")
    (folder / "corpus.json").write_text('{"baselines_bits_per_byte": {"val": [1]}}')
    code, _, err = _main_plot(["--run", str(folder), "--out", str(tmp_path / "b.png")])
    assert code == 2 and "cannot read its corpus.json" in _one_error(err)


def _main_plot(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = plot.main(argv)
    return code, "", err.getvalue()


# ------------------------------------------------------------------ the run folder


def test_resume_of_a_finished_run_says_so_and_redoes_nothing(tmp_path):
    """It read the corpus, built the model, scored the test split again and printed
    `- steps/s`."""
    out = tmp_path / "run"
    cfg = _fake_run(out, step=60)
    results = {"status": "finished", "step": 60, "steps": 60, "test_bits_per_byte": 0.84}
    (out / "results.json").write_text(json.dumps(results))
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    code, _, err = _main(["train", "--out", str(out), "--resume", "--no-progress"])
    assert code == 0 and "steps/s" not in err and "corpus:" not in err, err
    assert f"The run in {out} is finished (step 60/60; test 0.840 bits/byte)" in err
    # (A run from before the folder's record, `.outputs.json`, gains one: nothing else.)
    own = (".lock", ".outputs.json")
    after = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name not in own}
    assert after == {k: v for k, v in before.items() if k not in own}
    assert cfg.steps == 60


def test_a_second_trainer_on_a_folder_is_refused_in_one_line(corpus, tmp_path):
    """The folder's lock (`RunLock`, held here as a running trainer holds it)."""
    out = tmp_path / "run"
    out.mkdir()
    held = ckpt.RunLock(out).acquire()
    try:
        code, _, err = _main(["train", *lm_argv(corpus, out)])
    finally:
        held.release()
    line = _one_error(err)
    assert code == 2 and f"in use by another trainer (pid {os.getpid()} on " in line
    assert sorted(p.name for p in out.iterdir()) == [".lock"]


def test_a_folder_holding_a_run_is_replaced_only_with_overwrite(corpus, run, tmp_path):
    """As every command that writes files: kept and refused in one line naming
    `--overwrite`; with it the old run's files go before the new run starts (here it stops
    at once, at a corpus too small for its budget)."""
    out = shutil.copytree(run, tmp_path / "run")

    def files():
        return {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".lock"}

    before = files()
    code, _, err = _main(["train", *lm_argv(corpus, out)])
    assert code == 2 and "Pass --resume to continue it, --overwrite to replace it" in (
        _one_error(err)
    )
    assert files() == before
    code, _, err = _main(["train", *lm_argv(corpus, out, "--resume", "--overwrite")])
    assert code == 2 and "pass one of them" in _one_error(err)
    code, _, err = _main(["train", *lm_argv(corpus, out, "--overwrite", train_bytes=10**9)])
    assert code == 2 and "holds too little text" in _one_error(err)
    assert not {"config.json", "last.json", "last.eqx"} & {p.name for p in out.iterdir()}


@pytest.fixture
def full_disk(monkeypatch):
    """`os.fsync` fails with ENOSPC for the files whose name contains a word of `names`
    (as a full disk fails a write): `full_disk.add("corpus.json")`."""
    names: set[str] = set()
    real = os.fsync

    def fsync(fd):
        target = os.readlink(f"/proc/self/fd/{fd}")
        if any(name in Path(target).name for name in names):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return names


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("name", ["corpus.json", "config.json"])
def test_a_full_disk_is_one_line_and_leaves_nothing_partial(name, full_disk, corpus, tmp_path):
    """ENOSPC while the trainer writes a run file: one line naming the file, status 2, and
    no file half written (the writes are atomic: no temporary is left either)."""
    full_disk.add(name)
    out = tmp_path / "run"
    code, _, err = _main(["train", *lm_argv(corpus, out)])
    line = _one_error(err)
    assert code == 2 and f"{out / name}: No space left on device" in line, line
    assert not (out / name).exists()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------ every flag, any value

_PARSER = cli.parser()  # built once: the examples only parse


def _value_flags(command: str) -> list:
    commands = next(a for a in _PARSER._actions if a.dest == "command")
    assert isinstance(commands, argparse._SubParsersAction)
    sub = commands.choices[command]
    skip = {"-h", "--out", "--run", "--resume", "--corpus", "--dest", "--format"}
    return [a for a in sub._actions if a.option_strings and not skip & set(a.option_strings)]


_TEXT = st.sampled_from(
    ["0", "-1", "1", "2", "1.5", "0.5", "0.999", "1e-50", "1e-38", "1e-320", "3.5e38", "1e39"]
    + ["nan", "inf", "-0.0", "6.3", "7", str(2**31 - 1), str(2**31), str(2**32), str(2**63)]
    + [str(10**30), "", " ", "abc", "none", "USR1", "usr1,xcpu", "KILL", "1_000", "\u0661"]
    + ["0x10", "1e400", "gpu", "real", NOT_UTF8, "a\udcfeb", "$x$", "\x1b[2J"]
) | st.text(max_size=8)


@st.composite
def _argv(draw, command: str):
    argv = [command, "--out" if command == "train" else "--run", "OUT"]
    argv += ["--format", "onnx"] if command == "export" else []
    for action in draw(st.lists(st.sampled_from(_value_flags(command)), max_size=6)):
        name = action.option_strings[-1]
        if action.nargs == 0:
            argv.append(name)
        elif action.choices:
            argv += [name, draw(st.sampled_from(list(action.choices)) | _TEXT)]
        else:
            argv += [name, draw(_TEXT)]
    return argv


def _refused_in_one_line(argv) -> bool:
    """Parse `argv`; True if refused with argparse's one line (status 2)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            _PARSER.parse_args(argv)
    except SystemExit as e:
        assert e.code == 2
        line = _one_error(err.getvalue())
        assert "argument " in line or "unrecognized arguments" in line, line
        return True
    return False


_SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@settings(_SETTINGS, max_examples=120)
@given(_argv("train"))
def test_every_train_flag_value_gives_valid_settings_or_one_line(argv):
    if _refused_in_one_line(argv):
        return
    args = _PARSER.parse_args(argv)
    try:
        cfg = config.new_run(cli.given(args))
    except config.ConfigError as e:
        assert str(e) and "\n" not in str(e) and "--" in str(e), str(e)
        return
    saved = json.loads(json.dumps(cfg.to_json()))
    assert config.resumed_run(saved, {}, out="OUT") == cfg  # and config.json reads back
    assert 0 <= cfg.seed < 2**32 and 1 <= cfg.steps < 2**31
    assert 2.0**-126 <= cfg.lr * cfg.lr_factor <= 3.4e38 and 0 < cfg.r_max < 1


@settings(_SETTINGS, max_examples=60)
@given(st.sampled_from(["sample", "export"]).flatmap(_argv))
def test_every_sample_and_export_flag_value_parses_or_is_one_line(argv):
    if _refused_in_one_line(argv):
        return
    args = _PARSER.parse_args(argv)
    for name in ("length", "samples"):
        assert 1 <= getattr(args, name, 1) < 2**31
    assert 0 <= getattr(args, "seed", 0) < 2**32
    temperature = getattr(args, "temperature", 0)
    assert temperature == 0 or 2.0**-126 <= temperature <= 3.5e38


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


@settings(_SETTINGS, max_examples=80)
@given(st.sampled_from(sorted(config.LMConfig.__dataclass_fields__)), _JSON)
def test_any_value_in_config_json_gives_settings_or_one_line(key, value):
    """A `config.json` edited at any setting: read as valid settings or refused with one
    line naming the file (what `sample`, `export` and `--resume` read first)."""
    saved = {**config.new_run({}).to_json(), key: value}
    try:
        cfg = config.resumed_run(saved, {}, out="OUT")
    except config.ConfigError as e:
        assert str(e).startswith("OUT/config.json ") and "\n" not in str(e), str(e)
        return
    assert getattr(cfg, key) == value


@settings(_SETTINGS, max_examples=12)
@given(key=st.sampled_from(["step", "pending", "config", "run_id", "sha256"]), value=_JSON)
def test_any_value_in_last_json_gives_the_weights_or_one_line(run, key, value):
    """`last.json` edited at any field: `sample` and `export` load the weights or refuse
    with one line naming the file (`weights.load_model`, which both read through)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = shutil.copytree(run, Path(tmp) / "run")
        path = folder / "last.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
        try:
            loaded = weights.load_model(folder)
        except UsageError as e:
            assert "\n" not in str(e) and str(folder) in str(e), str(e)
            return
        assert loaded.step == 3

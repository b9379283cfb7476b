"""Setting a language-model run up: its settings and folder (`set_up`), the corpus and
baselines (`load_corpus`), and the model, programs and initial or resumed state
(`build`)."""

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import equinox as eqx
import jax

from ..runs import checkpoint as ckpt
from ..runs import env as _env
from ..runs.atomic import write_atomic
from ..runs.errors import UsageError
from ..runs.metrics import MetricsLog
from ..runs.outputs import CHECKPOINT_FILES, RunFiles, trainer_run
from ..runs.resume import saved_settings
from ..runs.signals import Stop
from . import baselines, cli
from . import config as _config
from ._resume import resume
from ._run import Loaded, Run, Session, TrainState
from .corpus import CorpusError, read_corpus
from .model import build_model, make_optimizer, make_programs, stream_carry
from .streams import TrainStreams, eval_layout

__all__ = ["set_up", "load_corpus", "build", "run_files"]


def _settings(args) -> _config.LMConfig:
    out, given = Path(args.out), cli.given(args)
    try:
        if not args.resume:
            return _config.new_run(given)
        return _config.resumed_run(saved_settings(out), given, out=str(out))
    except _config.ConfigError as e:
        raise UsageError(str(e)) from None


def set_up(args, *, started: float, stop: Stop | None = None) -> Session:
    """Settings, backend environment (before JAX touches a device), the run folder and
    its lock. `started`, `stop`: see `train.run`."""
    cfg = _settings(args)
    if cfg.corpus is not None and not Path(cfg.corpus).expanduser().is_dir():
        raise UsageError(
            f"--corpus {cfg.corpus!r} is not a folder; give a folder of *.py files (or leave "
            "--corpus out for the Python standard library)."
        )
    _env.configure_backend(deterministic=True, task="lm")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / ".write-test", b"")
        (out / ".write-test").unlink()
    except OSError as e:
        raise UsageError(
            f"--out {str(out)!r} is not a writable folder ({e.strerror or e})."
        ) from None
    lock = ckpt.take_lock(out)
    try:
        run_files(out).claim(resume=args.resume, overwrite=args.overwrite)
    except BaseException:
        lock.release()
        raise
    return Session(args=args, cfg=cfg, out=out, lock=lock, started=started, stop=stop)


#: The files of a run in its folder, checkpoints first (`--overwrite` removes them, and
#: the exports in `OUT/export/`; others stay).
_RUN_FILES = CHECKPOINT_FILES("last") + (
    "config.json",
    "corpus.json",
    "metrics.jsonl",
    "results.json",
    "curve.png",
)


def run_files(out: Path) -> RunFiles:
    """The language-model trainer's files in `out` (`runs.outputs`)."""
    return RunFiles(out, "lm train", _RUN_FILES, legacy=trainer_run(("streams", "chunk")))


def load_corpus(s: Session) -> Loaded:
    """Read the corpus (refusing, on `--resume`, another than the run's), lay its splits
    out, and score the baselines on the held-out text. Records the corpus's digest in
    `s.cfg`."""
    cfg = s.cfg
    budgets = {"train": cfg.train_bytes, "val": cfg.val_bytes, "test": cfg.test_bytes}
    try:
        corpus = read_corpus(cfg.corpus, budgets)
        streams = TrainStreams(corpus.train, cfg.streams, cfg.chunk)
        val = eval_layout(corpus.val, cfg.eval_streams, cfg.eval_chunk)
        test = eval_layout(corpus.test, cfg.eval_streams, cfg.eval_chunk)
    except (CorpusError, ValueError) as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        if e.filename is None:
            raise
        raise UsageError(f"cannot read the corpus: {e.filename}: {e.strerror or e}.") from None
    fingerprint = corpus.fingerprint()
    if cfg.corpus_sha256 is not None and cfg.corpus_sha256 != fingerprint["sha256"]:
        raise UsageError(_other_corpus(s.out, cfg.corpus_sha256, fingerprint))
    s.cfg = dataclasses.replace(cfg, corpus_sha256=fingerprint["sha256"])
    scores = baselines.report(corpus.train, {"val": val.text, "test": test.text})
    record = {"corpus": fingerprint, "baselines_bits_per_byte": scores}
    write_atomic(s.out / "corpus.json", json.dumps(record, indent=1).encode())
    return Loaded(corpus, streams, val, test, scores)


def _other_corpus(out: Path, recorded: str, now: dict[str, Any]) -> str:
    try:
        then = json.loads((out / "corpus.json").read_text())["corpus"]
        was = f"Python {then['python']}'s files in {then['folder']}"
    except (OSError, ValueError, KeyError, TypeError):
        was = "its recorded corpus"
    return (
        f"--resume: the corpus differs from the one the run in {out} was trained on: SHA-256 "
        f"{now['sha256'][:12]}... (Python {now['python']}'s files in {now['folder']}) where the "
        f"run recorded {recorded[:12]}... ({was}); the standard library differs "
        "between Python versions. Resume with the Python (or --corpus folder) the run started "
        "with, or start a new run with another --out."
    )


def build(session: Session, loaded: Loaded) -> tuple[Run, TrainState]:
    """Model, optimiser, programs and the initial (or resumed) state; returns the built
    run and that state."""
    cfg, began = session.cfg, time.perf_counter()
    init_key, run_key = jax.random.split(jax.random.PRNGKey(cfg.seed))
    try:
        model, state = build_model(cfg, init_key)
    except ValueError as e:  # the library's own check: too large for this host, ...
        raise UsageError(
            f"--depth {cfg.depth} --d-model {cfg.d_model} --d-state {cfg.d_state}: {e}"
        ) from None
    params, static = eqx.partition(model, eqx.is_inexact_array)
    programs = make_programs(cfg, static, state)
    log = MetricsLog(session.out / "metrics.jsonl")
    r = Run.built(session, loaded, static=static, state=state, programs=programs, log=log)
    optim, _ = make_optimizer(cfg)
    s = TrainState(0, params, optim.init(params), stream_carry(model, cfg.streams), run_key)
    if r.args.resume:
        s = resume(r, s)
    text = json.dumps(cfg.to_json(), indent=1, sort_keys=True)
    write_atomic(r.out / "config.json", text.encode())
    if session.stop is not None:  # the run's settings are saved: it can be continued
        session.stop.go_on("continue with the same command plus --resume")
    r.log.truncate(s.step)
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
    sizes = r.corpus.fingerprint()["bytes"]
    base = r.baselines["val"]
    r.say(
        f"corpus: {sizes['train']:,}/{sizes['val']:,}/{sizes['test']:,} train/val/test bytes "
        f"of {r.corpus.folder}; val baselines (bits/byte): unigram {base['unigram']:.3f}, "
        f"bigram add-one {base['bigram_add_one']:.3f}, bigram Kneser-Ney "
        f"{base['bigram_kneser_ney']:.3f}.\nmodel: {cfg.form} LRU, depth {cfg.depth}, "
        f"H={cfg.d_model}, N={cfg.d_state} ({n_params:,} parameters); {cfg.streams} streams x "
        f"{cfg.chunk} bytes per step, {cfg.steps} steps; built in "
        f"{time.perf_counter() - began:.1f}s."
    )
    return r, s

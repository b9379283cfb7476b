"""A small corpus with structure for the language model's tests, and its command line.

Each file holds lines drawn at random from a few fixed sentences: within a line every byte
after the first few is determined by the line so far, which a model with memory learns and
a bigram cannot (after `e` comes ` `, `r`, `n`, ...).
"""

from pathlib import Path

import numpy as np

SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "pack my box with five dozen liquor jugs",
    "sphinx of black quartz, judge my vow",
    "how vexingly quick daft zebras jump",
)


def write_corpus(folder: Path, *, files: int = 160, lines: int = 12, seed: int = 0) -> Path:
    """`files` Python files of `lines` lines each in `folder` (created); returns it."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        picks = rng.integers(0, len(SENTENCES), lines)
        text = "".join(f"# {SENTENCES[k]}\n" for k in picks)
        (folder / f"m{i:03d}.py").write_text(text)
    return folder


#: The tiny run of the tests: a model of one block, 4 streams of 32 bytes per step; dropout
#: on, so its keys are part of what must resume exactly.
TINY = dict(
    depth=1,
    d_model=32,
    d_state=16,
    streams=4,
    chunk=32,
    lr=1e-2,
    dropout=0.1,
    train_bytes=24_000,
    val_bytes=1_500,
    test_bytes=1_500,
    eval_streams=2,
    eval_chunk=64,
    log_every=5,
)


def lm_argv(corpus: Path, out: Path, *extra: str, steps: int = 60, **settings) -> list[str]:
    """`python -m experiments.lm train` arguments (after `train`) of the tiny run."""
    flags = {**TINY, "corpus": corpus, "out": out, "steps": steps, **settings}
    flags.setdefault("eval_every", 30)
    flags.setdefault("checkpoint_every", 25)
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in flags.items()]
    return [*argv, "--no-progress", *extra]

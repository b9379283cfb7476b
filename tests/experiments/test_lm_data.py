"""The language model's data (no JAX): the corpus read by file, deterministically and within
budget; the streams of truncated BPTT and the scoring layout; the n-gram baselines against
a plain-Python reference."""

import math
from collections import Counter

import numpy as np
import pytest
from lm_corpus import write_corpus

from experiments.lm import baselines
from experiments.lm.corpus import SEPARATOR, CorpusError, read_corpus
from experiments.lm.streams import TrainStreams, eval_layout

BUDGETS = {"train": 20_000, "val": 1_000, "test": 1_000}


def _distinct_corpus(folder):
    """Files whose contents are all different (each line names its file)."""
    folder.mkdir()
    for i in range(200):
        (folder / f"f{i:03d}.py").write_text("".join(f"x_{i}_{j} = {j}\n" for j in range(25)))
    (folder / "site-packages").mkdir()
    (folder / "site-packages" / "skip.py").write_text("SKIPPED = 1\n" * 400)
    return folder


def test_corpus_splits_by_file_deterministically(tmp_path):
    folder = _distinct_corpus(tmp_path / "c")
    a, b = read_corpus(folder, BUDGETS), read_corpus(folder, BUDGETS)
    assert a.sha256 == b.sha256
    for name, budget in BUDGETS.items():
        assert a.split(name).dtype == np.uint8 and a.split(name).size == budget
    text = {n: a.split(n).tobytes() for n in ("train", "val", "test")}
    assert b"SKIPPED" not in b"".join(text.values())
    # Every file lies in one split only: the names of the files each split holds (but the
    # one cut at the budget) are disjoint.
    owners = {}
    for name, data in text.items():
        for piece in data.split(bytes([SEPARATOR]))[:-1]:
            owners.setdefault(piece.split(b"_")[1], set()).add(name)
    assert owners and all(len(v) == 1 for v in owners.values())
    assert {n for v in owners.values() for n in v} == {"train", "val", "test"}
    # Changing the files changes the digest the run records.
    for path in folder.glob("*.py"):
        path.write_text(path.read_text().replace("= 1\n", "= one\n"))
    assert read_corpus(folder, BUDGETS).sha256 != a.sha256
    assert a.fingerprint()["bytes"] == BUDGETS


def test_corpus_refuses_too_little_text_and_a_missing_folder(tmp_path):
    folder = write_corpus(tmp_path / "c", files=10, lines=2)
    with pytest.raises(CorpusError, match="too little text.*--train-bytes"):
        read_corpus(folder, BUDGETS)
    with pytest.raises(CorpusError, match="--corpus .* is not a folder"):
        read_corpus(tmp_path / "missing", BUDGETS)


def test_training_streams_continue_from_chunk_to_chunk():
    text = np.arange(1000, dtype=np.int64).astype(np.uint8)
    s = TrainStreams(text, streams=3, chunk=10)
    assert s.length == 333 and s.per_pass == 33
    x0, y0, reset0 = s.batch(0)
    x1, y1, reset1 = s.batch(1)
    assert reset0 and not reset1 and x0.shape == (3, 10)
    np.testing.assert_array_equal(y0[:, :-1], x0[:, 1:])  # targets: the next byte
    np.testing.assert_array_equal(x1[:, 0], y0[:, -1])  # chunk 1 continues chunk 0
    np.testing.assert_array_equal(x0[:, 0], text[[0, 333, 666]])
    x33, _, reset33 = s.batch(33)  # a new pass starts the streams again
    assert reset33
    np.testing.assert_array_equal(x33, x0)
    with pytest.raises(ValueError, match="too short for --streams 64 of --chunk 32"):
        TrainStreams(text, streams=64, chunk=32)


def test_eval_layout_predicts_every_position_once():
    text = np.random.default_rng(0).integers(0, 256, 1000).astype(np.uint8)
    layout = eval_layout(text, streams=3, chunk=16)
    # 999 targets over 3 streams of 16-byte chunks: 3 * 320 positions.
    assert layout.inputs.shape == (20, 3, 16) and layout.positions == 960
    assert layout.text.size == 961
    inputs = layout.inputs.transpose(1, 0, 2).reshape(-1)
    targets = layout.targets.transpose(1, 0, 2).reshape(-1)
    np.testing.assert_array_equal(inputs, text[:960])
    np.testing.assert_array_equal(targets, text[1:961])
    with pytest.raises(ValueError, match="--eval-streams 64 of --eval-chunk 16"):
        eval_layout(text, streams=64, chunk=16)


def _reference_bits(train: bytes, text: bytes) -> dict[str, float]:
    """The three baselines by their formulas, one probability at a time (dicts, floats)."""
    V, D = 256, 0.75
    uni = Counter(train)
    pairs = Counter(zip(train[:-1], train[1:], strict=True))
    context = Counter(train[:-1])
    after = Counter(v for v, _ in pairs)  # N1+(v .)
    before = Counter(w for _, w in pairs)  # N1+(. w)
    distinct = len(pairs)

    def kn(v, w):
        cont = (before[w] + 1) / (distinct + V)
        if context[v] == 0:
            return cont
        return max(pairs[(v, w)] - D, 0) / context[v] + D * after[v] / context[v] * cont

    bits = {"unigram": 0.0, "bigram_add_one": 0.0, "bigram_kneser_ney": 0.0}
    for v, w in zip(text[:-1], text[1:], strict=True):
        bits["unigram"] -= math.log2((uni[w] + 1) / (len(train) + V))
        bits["bigram_add_one"] -= math.log2((pairs[(v, w)] + 1) / (context[v] + V))
        bits["bigram_kneser_ney"] -= math.log2(kn(v, w))
    return {k: b / (len(text) - 1) for k, b in bits.items()}


def test_baselines_match_their_formulas():
    rng = np.random.default_rng(0)
    train = bytes(rng.choice(np.frombuffer(b"abcdeeeffg \n", np.uint8), 3000).tolist())
    text = b"a bad cafe \n feed a cab \xff\x00 zz"  # unseen bytes and contexts too
    got = baselines.report(np.frombuffer(train, np.uint8), {"t": np.frombuffer(text, np.uint8)})
    want = _reference_bits(train, text)
    assert got["t"] == pytest.approx(want, rel=1e-12)
    for probs in (
        baselines.bigram_add_one(np.frombuffer(train, np.uint8)),
        baselines.bigram_kneser_ney(np.frombuffer(train, np.uint8)),
    ):
        np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-12)
        assert np.all(probs > 0)


def test_a_file_name_that_is_not_utf8_is_read_like_any_other(tmp_path):
    """A corpus file whose name is not UTF-8 ended the run with the codec's words
    ("surrogates not allowed"); it is read, digested by its name's bytes, and a UTF-8
    name's split is unchanged."""
    import os

    folder = write_corpus(tmp_path / "c")
    before = read_corpus(folder, {"train": 100, "val": 10, "test": 10})
    odd = folder / os.fsdecode(b"caf\xe9.py")
    odd.write_text("# caf\n")
    after = read_corpus(folder, {"train": 100, "val": 10, "test": 10})
    assert sum(after.files.values()) >= sum(before.files.values())
    assert after.train.size == before.train.size

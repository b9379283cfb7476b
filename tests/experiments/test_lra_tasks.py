"""The LRA task registry (`experiments/lra/tasks.py`): the six entries against the paper
and `shared/LRA.md`, the checks of a new entry, and a new task added as one registry entry
plus its loader, loaded, trained and evaluated through the trainer's public path."""

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from experiments.lra import data, steps, tasks, train
from experiments.runs.metrics import read_records

# The trainer sets XLA_FLAGS / XLA_PYTHON_CLIENT_PREALLOCATE; conftest puts them back.
pytestmark = pytest.mark.usefixtures("restore_backend_env")

#: name: (folder, classes, l_max, vocabulary or None, channels or None, model), from
#: shared/LRA.md §0-6 and the loaders' documented formats.
EXPECTED = {
    "listops": ("listops-1000", 10, 2048, 18, None, "classifier"),
    "text": ("aclImdb", 2, 4096, 135, None, "classifier"),
    "retrieval": ("tsv_data", 2, 4000, 98, None, "retrieval"),
    "image": ("cifar-10-batches-py", 10, 1024, None, 3, "classifier"),
    "pathfinder": ("pathfinder32/curv_contour_length_14", 2, 1024, None, 1, "classifier"),
    "pathx": ("pathfinder128/curv_contour_length_14", 2, 16384, None, 1, "classifier"),
}


def test_registry_holds_the_six_lra_tasks():
    assert tasks.names() == tuple(EXPECTED)
    for name, (folder, classes, length, vocab, channels, model) in EXPECTED.items():
        t = tasks.get_task(name)
        assert (t.name, t.folder, t.num_classes, t.seq_len) == (name, folder, classes, length)
        assert (t.vocab_size, t.in_channels, t.model) == (vocab, channels, model)
        assert steps.task_spec(name) == steps.TaskSpec(name, classes, length, vocab, channels)
        assert t.settings["eval_every"] == t.train_size // t.settings["batch_size"]
    assert {n for n, t in tasks.REGISTRY.items() if t.remat} == {"retrieval", "pathx"}
    on_demand = {n for n, t in tasks.REGISTRY.items() if t.allocate_on_demand}
    assert on_demand == {"text", "retrieval", "pathx"}
    assert tasks.get_task("image").pixel_mean == (0.4914, 0.4822, 0.4465)
    assert tasks.get_task("pathx").pixel_std == (0.5,)
    assert {n: t.image_side for n, t in tasks.REGISTRY.items() if t.image_side} == {
        "image": 32,
        "pathfinder": 32,
        "pathx": 128,
    }


def _entry(**changes) -> tasks.Task:
    fields = dict(
        name="tiny",
        folder="tiny",
        loader=_load_parity,
        num_classes=2,
        seq_len=16,
        vocab_size=5,
        train_size=12,
        defaults=dict(
            d_model=8,
            d_state=6,
            steps=6,
            batch_size=4,
            lr=3e-3,
            lr_factor=0.5,
            dropout=0.0,
            bidirectional=False,
            r_min=0.0,
            r_max=0.99,
            max_phase=1.0,
        ),
    )
    return tasks.Task(**{**fields, **changes})


def test_lookups_and_bad_entries_say_what_is_wrong():
    with pytest.raises(ValueError, match="Unknown LRA task 'imdb'.*'listops'"):
        tasks.get_task("imdb")
    with pytest.raises(ValueError, match="'listops' is already registered; pass replace=True"):
        tasks.register(_entry(name="listops"))
    with pytest.raises(TypeError, match="expects a Task"):
        tasks.register(tasks.get_task("listops").settings)  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValueError, match="token task .* needs vocab_size"):
        _entry(vocab_size=None)
    with pytest.raises(ValueError, match="square image, got 12"):
        _entry(in_channels=1, vocab_size=None, seq_len=12)
    with pytest.raises(ValueError, match="pixel task must use the 'classifier'"):
        _entry(in_channels=1, vocab_size=None, model="retrieval")
    with pytest.raises(ValueError, match="one value per channel"):
        _entry(in_channels=3, vocab_size=None, pixel_mean=(0.1, 0.2))
    with pytest.raises(ValueError, match="bad defaults.*depht"):
        _entry(defaults={**_entry().defaults, "depht": 2})
    # The learning rate has one name, the trainer's (`--lr`).
    renamed = {**_entry().defaults, "base_lr": 3e-3}
    del renamed["lr"]
    with pytest.raises(ValueError, match=r"bad defaults \(unknown \['base_lr'\]\)"):
        _entry(defaults=renamed)
    with pytest.raises(ValueError, match=r"bad defaults \(missing \['dropout'\]\)"):
        _entry(defaults={k: v for k, v in _entry().defaults.items() if k != "dropout"})
    with pytest.raises(ValueError, match="need 0 <= r_min <= r_max < 1"):
        _entry(defaults={**_entry().defaults, "r_max": 1.5})
    with pytest.raises(ValueError, match="needs? a batch_size"):
        _entry(defaults={k: v for k, v in _entry().defaults.items() if k != "batch_size"})
    with pytest.raises(ValueError, match="name must be a word"):
        _entry(name="two words")
    assert "tiny" not in tasks.REGISTRY  # building a Task does not register it


# --------------------------------------------------------------------------- a new task


def _load_parity(task: tasks.Task, folder: Path, store: data.Store, max_examples) -> dict:
    """The loader of the new task: `<split>.tsv` with lines `bits<TAB>label`."""

    def source(split):
        def examples():
            for n, line in data.read_lines(folder / f"{split}.tsv"):
                bits, label = line.split("\t")
                yield data.parse_label(label, task.num_classes, f"{split}.tsv:{n}"), (list(bits),)

        return lambda: data.take(examples(), max_examples)

    sources = {split: source(split) for split in data.SPLITS}
    return data.build_token_task(store, sources, chars=False, min_freq=1, n_docs=1)


SIZES = {"train": 12, "val": 5, "test": 7}


def _write_parity(root: Path) -> dict[str, list[str]]:
    """Random bit strings of length 2..9, label = parity; one file per split."""
    rng = np.random.default_rng(3)
    rows = {}
    for split, n in SIZES.items():
        rows[split] = ["".join(rng.choice(["0", "1"], size=rng.integers(2, 10))) for _ in range(n)]
        lines = [f"{bits}\t{bits.count('1') % 2}" for bits in rows[split]]
        folder = root / "nested" / "tiny"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return rows


@pytest.fixture
def tiny():
    task = tasks.register(_entry())
    try:
        yield task
    finally:
        del tasks.REGISTRY["tiny"]


def test_new_task_loads_from_its_entry_and_loader(tiny, tmp_path):
    rows = _write_parity(tmp_path / "data")
    loaded = tasks.load_task("tiny", tmp_path / "data", cache_dir=tmp_path / "cache")
    # the vocabulary by hand: specials, then train tokens by descending count
    counts = Counter("".join(rows["train"]))
    vocab = ("<pad>", "<unk>", "<eos>") + tuple(sorted(counts, key=lambda t: (-counts[t], t)))
    assert loaded.vocab == vocab and loaded.sizes == SIZES and loaded.num_classes == 2
    width = max(len(b) for split in rows.values() for b in split) + 1
    assert loaded.seq_len == width and loaded.in_channels is None
    for split, bits in rows.items():
        got = loaded.batch(getattr(loaded, split), np.arange(len(bits)))
        for i, b in enumerate(bits):
            pad = [data.PAD_ID] * (width - len(b) - 1)
            want = [vocab.index(c) for c in b] + [data.EOS_ID] + pad
            assert got["inputs"][i].tolist() == want
            assert got["lengths"][i] == len(b) + 1 and got["labels"][i] == b.count("1") % 2
    again = tasks.load_task("tiny", tmp_path / "data", cache_dir=tmp_path / "cache")
    assert isinstance(again.train.inputs, np.memmap)  # reopened from the cache
    np.testing.assert_array_equal(again.test.inputs, loaded.test.inputs)
    assert steps.task_spec("tiny") == steps.TaskSpec("tiny", 2, 16, 5, None)
    tasks.register(_entry(model="retrieval"), replace=True)  # an entry its loader contradicts
    with pytest.raises(ValueError, match="single token sequences, but .* model='retrieval'"):
        tasks.load_task("tiny", tmp_path / "data")


@pytest.mark.slow
def test_new_task_trains_and_evaluates_through_the_trainer(tiny, tmp_path):
    _write_parity(tmp_path / "data")
    out = tmp_path / "run"
    argv = [
        "--task",
        "tiny",
        "--data-root",
        str(tmp_path / "data"),
        "--out",
        str(out),
        "--depth",
        "1",
        "--log-every",
        "1",
        "--no-progress",
    ]
    results = train.run(argv)
    assert results["status"] == "finished" and results["step"] == 6 and results["task"] == "tiny"
    assert 0 <= results["test_accuracy"] <= 1 and results["test_examples"] == SIZES["test"]
    cfg = json.loads((out / "config.json").read_text())
    defaults = tiny.defaults
    assert (cfg["d_model"], cfg["d_state"], cfg["steps"], cfg["batch_size"]) == (8, 6, 6, 4)
    assert (cfg["lr"], cfg["max_phase"], cfg["eval_every"]) == (defaults["lr"], 1.0, 3)
    assert cfg["remat"] is False
    records = read_records(out / "metrics.jsonl")
    assert [r["step"] for r in records if r["split"] == "train"] == [1, 2, 3, 4, 5, 6]
    val = [r for r in records if r["split"] == "val"]
    assert [r["step"] for r in val] == [3, 6] and {r["examples"] for r in val} == {SIZES["val"]}
    assert all(math.isfinite(r["loss"]) for r in records)
    assert (out / "best.eqx").is_file() and (out / "last.eqx").is_file()


def test_unregistered_task_is_refused_by_the_parser(tmp_path):
    assert "tiny" not in tasks.REGISTRY
    with pytest.raises(SystemExit):
        train.parse_args(["--task", "tiny", "--out", str(tmp_path)])

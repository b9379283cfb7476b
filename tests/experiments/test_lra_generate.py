"""Tests of `experiments.lra.generate`: ListOps and Pathfinder generators and their CLI."""

import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from experiments.lra import generate
from experiments.lra import synthetic as gen
from experiments.lra.tasks import load_task

REPO = Path(__file__).resolve().parents[2]
SMALL = dict(min_length=20, max_length=120, max_depth=6, max_args=5)


def files_of(folder: Path) -> dict[str, bytes]:
    paths = sorted(p for p in folder.rglob("*") if p.is_file())
    return {str(p.relative_to(folder)): p.read_bytes() for p in paths}


# --------------------------------------------------------------------------- ListOps oracle


def parse_pairs(tokens: list[str]):
    """Parse the official serialisation: an atom, or `( A B )` with exactly two parts."""
    token = tokens.pop(0)
    if token != "(":
        return token
    pair = (parse_pairs(tokens), parse_pairs(tokens))
    assert tokens.pop(0) == ")", "every pair has exactly two elements"
    return pair


def evaluate_pairs(node) -> int:
    """Evaluate `((([OP c1) c2) ...) ])` chains with statistics.median as MED."""
    if isinstance(node, str):
        assert node.isdigit() and len(node) == 1
        return int(node)
    chain, close = node
    assert close == "]"
    args = []
    while isinstance(chain, tuple):
        chain, child = chain
        args.append(evaluate_pairs(child))
    assert chain.startswith("[") and args
    ops = {
        "MIN": min,
        "MAX": max,
        "MED": lambda v: int(statistics.median(v)),
        "SM": lambda v: sum(v) % 10,
    }
    return ops[chain[1:]](args[::-1])


def independent_value(expr: str) -> int:
    tokens = expr.split()
    tree = parse_pairs(tokens)
    assert not tokens, "one expression per line"
    return evaluate_pairs(tree)


def listops_length(expr: str) -> int:
    return len(expr.replace("(", " ").replace(")", " ").split())


# --------------------------------------------------------------------------- ListOps


def test_serialization_matches_official_example():
    assert gen.serialize_listops(("MAX", (2, 9))) == "( ( ( [MAX 2 ) 9 ) ] )"
    nested = ("SM", (("MIN", (4, 7)), 8, 9))
    expr = gen.serialize_listops(nested)
    assert expr == "( ( ( ( [SM ( ( ( [MIN 4 ) 7 ) ] ) ) 8 ) 9 ) ] )"
    assert gen.evaluate_listops(expr) == gen.evaluate_listops_tree(nested) == 1
    assert independent_value(expr) == 1


@pytest.mark.parametrize(
    "tree, value",
    [
        (("MED", (1, 2, 3, 4)), 2),  # int(np.median) truncates 2.5
        (("MED", (9, 8, 8)), 8),
        (("MED", (1, 4)), 2),
        (("SM", (5, 7, 9)), 1),
        (("MIN", (3, ("MAX", (0, 6)), 4)), 3),
        (7, 7),
    ],
)
def test_evaluators_agree_on_known_values(tree, value):
    expr = gen.serialize_listops(tree)
    assert gen.evaluate_listops_tree(tree) == value
    assert gen.evaluate_listops(expr) == value
    assert independent_value(expr) == value


@pytest.mark.parametrize(
    "expr", ["( ( [MAX 2 ) ] ", "( [FOO 1 ) ] )", "1 2", "( ( [MAX ) ] )", "] )"]
)
def test_evaluate_listops_rejects_malformed(expr):
    with pytest.raises(ValueError):
        gen.evaluate_listops(expr)


def test_generate_listops_labels_lengths_uniqueness():
    examples = gen.generate_listops(300, seed=1, **SMALL)
    assert len(examples) == 300
    assert len({e for e, _ in examples}) == 300
    for expr, label in examples:
        assert 20 < listops_length(expr) < 120
        assert label == gen.evaluate_listops(expr) == independent_value(expr)
    labels = [label for _, label in examples]
    assert len(set(labels)) == 10  # every class occurs
    assert gen.generate_listops(300, seed=1, **SMALL) == examples
    assert gen.generate_listops(300, seed=2, **SMALL) != examples


def bracket_depth(expr: str) -> int:
    depth = deepest = 0
    for token in expr.split():
        depth += token.startswith("[") - (token == "]")
        deepest = max(deepest, depth)
    return deepest


def test_generate_listops_depth_and_arity():
    shallow = gen.generate_listops(
        40, seed=0, min_length=3, max_length=13, max_depth=2, max_args=10
    )
    assert {bracket_depth(e) for e, _ in shallow} == {1}  # max_depth 2: one operator over digits
    assert max(listops_length(e) for e, _ in shallow) > 8  # up to max_args children
    depths = [bracket_depth(e) for e, _ in gen.generate_listops(200, seed=0, **SMALL)]
    assert max(depths) == SMALL["max_depth"] - 1


def test_generate_listops_trees_are_unique():
    # length 4 only: an operator over two digits, 4 * 100 distinct trees
    tiny = dict(min_length=3, max_length=5, max_depth=2, max_args=2)
    examples = gen.generate_listops(400, seed=0, **tiny)
    assert len({e for e, _ in examples}) == 400
    with pytest.raises(RuntimeError, match="Only 400 of 401"):
        gen.generate_listops(401, seed=0, max_attempts=20_000, **tiny)


def test_generate_listops_official_bounds_and_errors():
    examples = gen.generate_listops(5, seed=0)
    assert all(500 < listops_length(e) < 2000 for e, _ in examples)
    assert all(label == independent_value(e) for e, label in examples)
    with pytest.raises(ValueError, match="strictly between"):
        gen.generate_listops(5, seed=0, min_length=10, max_length=11)
    with pytest.raises(RuntimeError, match="accepted"):
        gen.generate_listops(
            5, seed=0, min_length=100, max_length=200, max_depth=2, max_attempts=500
        )


def test_listops_cli_layout_and_roundtrip(tmp_path):
    bounds = ["--min-length", "20", "--max-length", "100"]
    args = ["--task", "listops", "--size", "50", "--seed", "3", *bounds]
    assert generate.main([*args, "--out", str(tmp_path / "a")]) == 0
    folder = tmp_path / "a" / "listops-1000"
    splits = ("train", "val", "test")
    lines = {s: (folder / f"basic_{s}.tsv").read_text().splitlines() for s in splits}
    assert all(rows[0] == "Source\tTarget" for rows in lines.values())
    assert [len(rows) - 1 for rows in lines.values()] == [40, 5, 5]  # (--size 50: 10% each)
    for rows in lines.values():
        for row in rows[1:]:
            expr, label = row.split("\t")
            assert int(label) == independent_value(expr) and 20 < listops_length(expr) < 100
    task = load_task("listops", tmp_path / "a")
    assert [len(task.train), len(task.val), len(task.test)] == [40, 5, 5]  # (--size 50: 10% each)
    expected = [int(row.split("\t")[1]) for row in lines["train"][1:]]
    np.testing.assert_array_equal(task.train.labels, expected)
    tokens = {"<pad>", "<unk>", "<eos>", "[MIN", "[MAX", "[MED", "[SM", "X", *"0123456789"}
    assert task.vocab is not None
    assert set(task.vocab) <= tokens
    generate.main([*args, "--out", str(tmp_path / "b")])
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")
    sizes = ["--split-sizes", "5", "2", "3"]
    generate.main(["--task", "listops", *sizes, *bounds, "--out", str(tmp_path / "c")])
    folder = tmp_path / "c" / "listops-1000"
    counts = [len((folder / f"basic_{s}.tsv").read_text().splitlines()) - 1 for s in splits]
    assert counts == [5, 2, 3]


def test_listops_split_sizes():
    assert gen.listops_split_sizes(100_000) == (96_000, 2_000, 2_000)
    assert gen.listops_split_sizes(10) == (8, 1, 1)
    # The official ratio alone gave 80 validation examples at 4,000.
    assert gen.listops_split_sizes(4_000) == (3_200, 400, 400)
    assert gen.listops_split_sizes(20_000) == (16_000, 2_000, 2_000)
    assert gen.listops_split_sizes(1_000_000) == (960_000, 20_000, 20_000)
    with pytest.raises(ValueError, match="at least 3"):
        gen.listops_split_sizes(2)


# --------------------------------------------------------------------------- Pathfinder


def components(mask: np.ndarray) -> np.ndarray:
    """8-connected component labels of a boolean image (0 = background)."""
    labels = np.zeros(mask.shape, int)
    count = 0
    for start in zip(*np.nonzero(mask), strict=True):
        if labels[start]:
            continue
        count += 1
        labels[start] = count
        stack = [start]
        while stack:
            r, c = stack.pop()
            for rr in range(max(r - 1, 0), min(r + 2, mask.shape[0])):
                for cc in range(max(c - 1, 0), min(c + 2, mask.shape[1])):
                    if mask[rr, cc] and not labels[rr, cc]:
                        labels[rr, cc] = count
                        stack.append((rr, cc))
    return labels


def pixel(point) -> tuple[int, int]:
    return int(point[0]), int(point[1])


@pytest.mark.parametrize("resolution, count", [(32, 24), (128, 4)])
def test_pathfinder_label_is_marker_connectivity(resolution, count):
    for i in range(count):
        sample = gen.generate_pathfinder_image(np.random.default_rng([7, i]), resolution)
        image, label, curves, markers = sample
        assert image.shape == (resolution, resolution) and image.dtype == np.uint8
        assert image.max() == 255 and (image == 0).mean() > 0.5  # bright curves, black background
        comp = components(image > 0)
        a, b = comp[pixel(markers[0])], comp[pixel(markers[1])]
        assert a and b
        assert (a == b) == (label == 1)
        # every curve is one component of its own: distractors never touch the targets
        ids = [{comp[pixel(p)] for p in curve} for curve in curves]
        assert all(len(s) == 1 and 0 not in s for s in ids)
        assert len({s.pop() for s in ids}) == len(curves) == comp.max()
        np.testing.assert_allclose(markers[0], curves[0][0])
        np.testing.assert_allclose(markers[1], curves[0][-1] if label else curves[1][-1])


def test_pathfinder_cli_layout_balance_and_loader(tmp_path):
    args = ["--task", "pathfinder", "--size", "60", "--seed", "5", "--images-per-batch", "25"]
    assert generate.main([*args, "--out", str(tmp_path / "a")]) == 0
    folder = tmp_path / "a" / "pathfinder32" / "curv_contour_length_14"
    assert sorted(p.name for p in (folder / "metadata").iterdir()) == ["0.npy", "1.npy", "2.npy"]
    labels = []
    for batch in range(3):
        rows = (folder / "metadata" / f"{batch}.npy").read_text().splitlines()
        assert len(rows) == (25 if batch < 2 else 10)
        for k, row in enumerate(rows):
            fields = row.split(" ")
            assert len(fields) == 11 and fields[:3] == [f"imgs/{batch}", f"sample_{k}.png", str(k)]
            with Image.open(folder / fields[0] / fields[1]) as img:
                assert (img.mode, img.size) == ("L", (32, 32))
            labels.append(int(fields[3]))
    assert 0.3 < np.mean(labels) < 0.7
    task = load_task("pathfinder", tmp_path / "a")
    assert [len(task.train), len(task.val), len(task.test)] == [48, 6, 6] and task.dropped == {}
    loaded = np.concatenate([task.train.labels, task.val.labels, task.test.labels])
    assert sorted(loaded) == sorted(labels)
    generate.main([*args, "--out", str(tmp_path / "b")])
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")
    generate.main(
        ["--task", "pathfinder", "--size", "5", "--seed", "6", "--out", str(tmp_path / "c")]
    )
    first = files_of(tmp_path / "a" / "pathfinder32")
    other = files_of(tmp_path / "c" / "pathfinder32")
    assert all(other[name] != first[name] for name in other if name.endswith(".png"))


def test_pathfinder_overwrite_guard_and_workers(tmp_path):
    gen.write_pathfinder(tmp_path / "a", 12, seed=1, images_per_batch=4)
    with pytest.raises(FileExistsError, match="--overwrite"):
        gen.write_pathfinder(tmp_path / "a", 4, seed=1, images_per_batch=4)
    gen.write_pathfinder(tmp_path / "a", 4, seed=1, images_per_batch=4, overwrite=True)
    folder = tmp_path / "a" / "pathfinder32" / "curv_contour_length_14"
    assert [p.name for p in (folder / "metadata").iterdir()] == ["0.npy"]  # stale batches removed
    gen.write_pathfinder(tmp_path / "b", 12, seed=1, images_per_batch=4, workers=2)
    gen.write_pathfinder(tmp_path / "c", 12, seed=1, images_per_batch=4)
    assert files_of(tmp_path / "b") == files_of(tmp_path / "c")


def test_pathx_cli_module_roundtrip(tmp_path):
    module = [sys.executable, "-m", "experiments.lra.generate"]
    cmd = [*module, "--task", "pathfinder", "--resolution", "128", "--size", "10"]
    cmd += ["--out", str(tmp_path)]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "Wrote 10 Pathfinder images" in result.stderr
    task = load_task("pathx", tmp_path)
    assert task.seq_len == 128 * 128
    assert [len(task.train), len(task.val), len(task.test)] == [8, 1, 1]
    assert task.train.inputs.max() == 255

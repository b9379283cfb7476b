"""Offline generators for ListOps and Pathfinder, writing the official LRA file formats.

    python -m experiments.lra.generate --task listops --out DIR [--size N] [--seed S]
        [--min-length 500] [--max-length 2000] [--max-depth 10] [--max-args 10]
        [--split-sizes TRAIN VAL TEST]
    python -m experiments.lra.generate --task pathfinder --out DIR [--size N] [--seed S]
        [--resolution 32] [--images-per-batch 1000] [--workers 1] [--overwrite]

**ListOps** (the LRA generator, `shared/LRA.md` §1g). A node is a leaf (a uniform digit)
with probability 0.75 while `depth < max_depth` and always at `max_depth`; otherwise it
applies an operator from MIN, MAX, MED (`int(np.median)`), SM (sum mod 10) to
`randint(2, max_args)` children. Serialised as left-nested pairs: MAX[2, 9] is
`( ( ( [MAX 2 ) 9 ) ] )`. A tree is kept when `min_length < length < max_length`
(strict), where length counts the tokens without parentheses; trees are unique. Files:
`DIR/listops-1000/basic_{train,val,test}.tsv`, header `Source<TAB>Target`, split 96/2/2
in generation order.

**Pathfinder** (a simplified generator with the layout of `shared/LRA.md` §5-6g). Each
image has two target curves (chains of `contour_length` straight segments with smooth
random turns) whose starts lie `seed_distance` apart, distractor curves, and two disc
markers: one on the start of the first target and one on the end of the same curve
(label 1) or of the other target (label 0); labels are fair coin flips. Strokes are drawn
analytically antialiased, `clip(reach - distance, 0, 1)`, on a black background. Curves
never touch: every curve's nonzero pixels stay at least one pixel (8-neighbourhood) away
from every other curve's, so the label equals the connectivity of the two markers in the
image. Files: `DIR/pathfinder{R}/curv_contour_length_14/imgs/<batch>/sample_<k>.png`
(8-bit grayscale) and `.../metadata/<batch>.npy`, plain text, one line of 11 fields per
image: `imgs/<batch> sample_<k>.png <k> <label> <continuity> <contour_length>
<distractor_length> <segment_length> <thickness> <margin> 1`.

Both generators are reproducible: ListOps uses `random.Random(seed)`, Pathfinder image
`i` uses `np.random.default_rng([seed, i])` (so the output does not depend on `--workers`).
"""

import argparse
import concurrent.futures
import dataclasses
import math
import multiprocessing
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from PIL import Image

__all__ = [
    "OPERATORS",
    "Tree",
    "random_listops_tree",
    "serialize_listops",
    "evaluate_listops_tree",
    "evaluate_listops",
    "generate_listops",
    "listops_split_sizes",
    "write_listops",
    "PathfinderParams",
    "PathfinderSample",
    "pathfinder_params",
    "generate_pathfinder_image",
    "write_pathfinder",
    "main",
]

# --------------------------------------------------------------------------- ListOps

OPERATORS = ("MIN", "MAX", "MED", "SM")
Tree = int | tuple[str, tuple["Tree", ...]]
"""A leaf digit, or `(operator, children)`."""


class _TooLong(Exception):
    """Raised while growing a tree that can no longer satisfy `length < max_length`."""


def random_listops_tree(
    rng: random.Random, *, max_depth: int = 10, max_args: int = 10, max_length: int | None = None
) -> tuple[Tree, int]:
    """Draw one tree as in the LRA generator; return it with its length.

    With `max_length`, growth stops early (raising `_TooLong`) once the tree has
    `max_length` tokens. Such a tree would be rejected anyway, so the distribution of the
    accepted trees is unchanged.
    """
    used = [0]

    def grow(depth: int) -> tuple[Tree, int]:
        if depth >= max_depth or rng.random() > 0.25:
            used[0] += 1
            return rng.randrange(10), 1
        used[0] += 2  # the operator token and "]"
        op = rng.choice(OPERATORS)
        children, length = [], 2
        for _ in range(rng.randint(2, max_args)):
            if max_length is not None and used[0] >= max_length:
                raise _TooLong
            child, child_length = grow(depth + 1)
            children.append(child)
            length += child_length
        return (op, tuple(children)), length

    return grow(1)


def serialize_listops(tree: Tree) -> str:
    """The LRA string of a tree: `( ( ( [MAX 2 ) 9 ) ] )` for MAX[2, 9]."""
    if isinstance(tree, int):
        return str(tree)
    op, children = tree
    text = f"[{op}"
    for child in children:
        text = f"( {text} {serialize_listops(child)} )"
    return f"( {text} ] )"


def _apply(op: str, values: Sequence[int]) -> int:
    if op == "MIN":
        return min(values)
    if op == "MAX":
        return max(values)
    if op == "MED":
        return int(np.median(values))
    if op == "SM":
        return sum(values) % 10
    raise ValueError(f"Unknown ListOps operator {op!r}; expected one of {OPERATORS}.")


def evaluate_listops_tree(tree: Tree) -> int:
    """The value of a tree."""
    if isinstance(tree, int):
        return tree
    op, children = tree
    return _apply(op, [evaluate_listops_tree(c) for c in children])


def _median_floor(values: list[int]) -> int:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) // 2


_STRING_OPS = {
    "MIN": min,
    "MAX": max,
    "MED": _median_floor,
    "SM": lambda v: sum(v) % 10,
}


def evaluate_listops(expr: str) -> int:
    """Parse and evaluate a serialised ListOps expression (independently of the generator).

    Accepts the official token forms `[OP`, `]`, digits and balanced parentheses.

    **Raises:** `ValueError` for an unknown token, an operator without arguments,
    unbalanced brackets or parentheses, or not exactly one top-level value.
    """
    stack: list[tuple[str, list[int]]] = []
    result: list[int] = []
    parens = 0
    for token in expr.split():
        if token == "(":
            parens += 1
            continue
        if token == ")":
            parens -= 1
            if parens < 0:
                raise ValueError(f"Unbalanced ')' in ListOps expression {expr[:60]!r}.")
            continue
        if token.startswith("[") and token[1:] in _STRING_OPS:
            stack.append((token[1:], []))
            continue
        if token == "]":
            if not stack or not stack[-1][1]:
                raise ValueError(f"']' without an open operator with arguments in {expr[:60]!r}.")
            op, args = stack.pop()
            value = _STRING_OPS[op](args)
        elif len(token) == 1 and token.isdigit():
            value = int(token)
        else:
            raise ValueError(f"Unknown ListOps token {token!r} in {expr[:60]!r}.")
        (stack[-1][1] if stack else result).append(value)
    if stack or parens or len(result) != 1:
        raise ValueError(
            f"Malformed ListOps expression {expr[:60]!r}: unclosed operator, "
            "unbalanced parentheses or not exactly one top-level value."
        )
    return result[0]


def generate_listops(
    n: int,
    *,
    seed: int = 0,
    min_length: int = 500,
    max_length: int = 2000,
    max_depth: int = 10,
    max_args: int = 10,
    max_attempts: int | None = None,
) -> list[tuple[str, int]]:
    """`n` unique `(expression, label)` pairs with `min_length < length < max_length`.

    **Raises:** `ValueError` for impossible settings; `RuntimeError` if fewer than `n`
    trees were accepted after `max_attempts` draws (default `2000 * n + 100_000`).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}.")
    if max_depth < 1 or max_args < 2:
        raise ValueError(f"Need max_depth >= 1 and max_args >= 2, got {max_depth} and {max_args}.")
    if min_length < 0 or max_length - min_length < 2:
        raise ValueError(
            f"No integer length lies strictly between min_length={min_length} and "
            f"max_length={max_length}; use e.g. --min-length 20 --max-length 200."
        )
    rng = random.Random(seed)
    attempts_left = 2000 * n + 100_000 if max_attempts is None else max_attempts
    seen: set[str] = set()
    examples: list[tuple[str, int]] = []
    while len(examples) < n:
        if attempts_left == 0:
            raise RuntimeError(
                f"Only {len(examples)} of {n} ListOps trees were accepted; widen "
                f"min_length/max_length ({min_length}, {max_length}) or raise max_depth/max_args."
            )
        attempts_left -= 1
        try:
            tree, length = random_listops_tree(
                rng, max_depth=max_depth, max_args=max_args, max_length=max_length
            )
        except _TooLong:
            continue
        if not min_length < length < max_length:
            continue
        expr = serialize_listops(tree)
        if expr not in seen:
            seen.add(expr)
            examples.append((expr, evaluate_listops_tree(tree)))
    return examples


def listops_split_sizes(total: int) -> tuple[int, int, int]:
    """Train/val/test sizes in the official 96/2/2 ratio (at least one of each)."""
    if total < 3:
        raise ValueError(f"Need at least 3 ListOps examples (one per split), got {total}.")
    small = max(1, round(total * 0.02))
    return total - 2 * small, small, small


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_listops(
    out: str | os.PathLike, sizes: tuple[int, int, int], *, seed: int = 0, **kwargs
) -> Path:
    """Generate `sum(sizes)` examples and write `out/listops-1000/basic_{train,val,test}.tsv`.

    `kwargs` go to `generate_listops`. Returns the `listops-1000` folder.
    """
    examples = generate_listops(sum(sizes), seed=seed, **kwargs)
    folder = Path(out) / "listops-1000"
    folder.mkdir(parents=True, exist_ok=True)
    start = 0
    for split, size in zip(("train", "val", "test"), sizes, strict=True):
        rows = "".join(f"{expr}\t{label}\n" for expr, label in examples[start : start + size])
        _write_text_atomic(folder / f"basic_{split}.tsv", "Source\tTarget\n" + rows)
        start += size
    return folder


# --------------------------------------------------------------------------- Pathfinder


@dataclasses.dataclass(frozen=True)
class PathfinderParams:
    """Geometry of one resolution, in pixels (see `pathfinder_params`)."""

    resolution: int
    contour_length: int  # segments per target curve (the "hard" setting: 14)
    distractor_length: int  # segments per distractor curve
    n_distractors: int  # distractors attempted per image (fewer if there is no room)
    segment_length: float
    thickness: float  # stroke width; intensity is clip(thickness/2 + 0.5 - distance, 0, 1)
    marker_radius: float
    seed_distance: float  # distance between the starts of the two target curves
    max_turn: float  # radians per segment; turn weights cos(pi/2 * turn / max_turn)^2
    continuity: float  # recorded in the metadata only (the original's parameter)
    margin: int = 1  # minimum gap in pixels between different curves
    padding: float = 1.0  # minimum gap between any stroke and the border


def pathfinder_params(resolution: int = 32) -> PathfinderParams:
    """Settings close to LRA's Pathfinder-32 (resolution 32) and Path-X (128)."""
    if resolution < 16:
        raise ValueError(f"resolution must be >= 16, got {resolution}.")
    scale = resolution / 32
    return PathfinderParams(
        resolution=resolution,
        contour_length=14,
        distractor_length=4,
        n_distractors=round(5 * scale),
        segment_length=2.0 * scale,
        thickness=1.0 if resolution <= 32 else 1.5,
        marker_radius=1.5 * math.sqrt(scale),
        seed_distance={32: 7.0, 128: 20.0}.get(resolution, 7.0 * scale),
        max_turn=math.pi / 4,
        continuity=1.0 if resolution <= 32 else 1.8,
    )


class PathfinderSample(NamedTuple):
    """One generated image and what is needed to check its label.

    `curves` holds each curve's points `(k, 2)` as `(row, col)` with pixel `(i, j)`
    centred at `(i + 0.5, j + 0.5)`; the two targets come first. `markers` are the
    two marker centres in the same coordinates.
    """

    image: np.ndarray  # uint8 (R, R)
    label: int
    curves: tuple[np.ndarray, ...]
    markers: tuple[tuple[float, float], tuple[float, float]]


def _distances(
    p: np.ndarray, q: np.ndarray, reach: float, side: int
) -> tuple[tuple[slice, slice], np.ndarray]:
    """Distances from the pixel centres near segment `pq` (a point if `p == q`)."""
    pr, pc, qr, qc = float(p[0]), float(p[1]), float(q[0]), float(q[1])
    r0, r1 = max(math.floor(min(pr, qr) - reach), 0), min(math.ceil(max(pr, qr) + reach) + 1, side)
    c0, c1 = max(math.floor(min(pc, qc) - reach), 0), min(math.ceil(max(pc, qc) + reach) + 1, side)
    rows = (np.arange(r0, r1) + (0.5 - pr))[:, None]
    cols = (np.arange(c0, c1) + (0.5 - pc))[None, :]
    vr, vc = qr - pr, qc - pc
    vv = vr * vr + vc * vc
    if vv > 0:
        t = (rows * (vr / vv) + cols * (vc / vv)).clip(0.0, 1.0)
        rows, cols = rows - t * vr, cols - t * vc
    return (slice(r0, r1), slice(c0, c1)), np.hypot(rows, cols)


def _dilate(mask: np.ndarray, steps: int) -> np.ndarray:
    """Binary dilation with the 3x3 square, `steps` times."""
    for _ in range(steps):
        padded = np.pad(mask, 1)
        grown = np.zeros_like(mask)
        for dr in range(3):
            for dc in range(3):
                grown |= padded[dr : dr + mask.shape[0], dc : dc + mask.shape[1]]
        mask = grown
    return mask


_Mark = tuple[tuple[slice, slice], np.ndarray]  # a window of the image and a bool mask in it


class _Canvas:
    """Intensity and occupancy of one image under construction."""

    def __init__(self, params: PathfinderParams):
        self.p = params
        side = params.resolution
        self.intensity = np.zeros((side, side), np.float64)
        self.blocked = np.zeros((side, side), bool)  # other curves, dilated by the margin
        self.stroke_reach = params.thickness / 2 + 0.5
        self.marker_reach = params.marker_radius + 0.5

    def inside(self, point: np.ndarray, reach: float) -> bool:
        low = self.p.padding + reach
        high = self.p.resolution - low
        return low <= point[0] <= high and low <= point[1] <= high

    def mark(self, p: np.ndarray, q: np.ndarray, reach: float) -> _Mark:
        """The pixels a stroke (or a disc, if `p == q`) would make nonzero, in a window."""
        window, dist = _distances(p, q, reach, self.p.resolution)
        return window, dist < reach

    def full(self, marks: Sequence[_Mark]) -> np.ndarray:
        """The union of `marks` as a full-size mask."""
        mask = np.zeros(self.blocked.shape, bool)
        for window, local in marks:
            mask[window] |= local
        return mask

    def hits(self, mark: _Mark, also: np.ndarray | None = None) -> bool:
        """Whether `mark` touches `blocked` (or `also`)."""
        window, local = mark
        busy = self.blocked[window] if also is None else self.blocked[window] | also[window]
        return bool((local & busy).any())

    def draw(self, p: np.ndarray, q: np.ndarray, reach: float) -> None:
        window, dist = _distances(p, q, reach, self.p.resolution)
        patch = self.intensity[window]
        np.maximum(patch, np.clip(reach - dist, 0.0, 1.0), out=patch)

    def step(
        self,
        rng: np.random.Generator,
        point: np.ndarray,
        heading: float,
        own: np.ndarray,
        reach: float,
    ) -> tuple[np.ndarray, float, _Mark] | None:
        """One new segment from `point` avoiding `blocked` and `own`: its end, heading and
        mark, or None.

        Turns up to `max_turn` are drawn with weight `cos(pi/2 * turn / max_turn)^2`; sharper
        ones (up to 90 degrees) are tried only when all of those are blocked.
        """
        turns = self.p.max_turn * (np.linspace(-1, 1, 9) + rng.uniform(-0.1, 0.1, 9))
        weights = np.cos(np.clip(turns / self.p.max_turn, -1, 1) * np.pi / 2) ** 2 + 1e-9
        keys = np.log(weights) - np.log(-np.log(rng.uniform(1e-12, 1.0, 9)))  # Gumbel top-k
        sharp = np.sign(rng.uniform(-1, 1, 4)) * rng.uniform(self.p.max_turn, np.pi / 2, 4)
        for turn in [*turns[np.argsort(-keys)], *sharp]:
            angle = heading + float(turn)
            q = point + self.p.segment_length * np.array([math.sin(angle), math.cos(angle)])
            if not self.inside(q, reach):
                continue
            mark = self.mark(point, q, self.stroke_reach)
            if not self.hits(mark, own):
                return q, angle, mark
        return None

    def grow(
        self,
        rng: np.random.Generator,
        start: np.ndarray,
        heading: float,
        n_segments: int,
        reach: float,
    ) -> tuple[list[np.ndarray], np.ndarray] | None:
        """Grow a curve avoiding `blocked` and its own segments (but the last two); return
        its points and footprint, or None. A blocked step backtracks two segments (at most
        8 times). All points keep `reach` (plus padding) away from the border."""
        points, headings, marks = [start], [heading], []
        own = np.zeros(self.blocked.shape, bool)  # segments older than the last two
        backtracks = 0
        while len(marks) < n_segments:
            step = self.step(rng, points[-1], headings[-1], own, reach)
            if step is None:
                backtracks += 1
                if backtracks > 8 or not marks:
                    return None
                keep = max(len(marks) - 2, 0)
                del points[keep + 1 :], headings[keep + 1 :], marks[keep:]
                own = self.full(marks[:-2])
                continue
            points.append(step[0])
            headings.append(step[1])
            marks.append(step[2])
            if len(marks) > 2:
                window, local = marks[-3]
                own[window] |= local
        return points, self.full(marks)

    def commit(self, points: list[np.ndarray], footprint: np.ndarray) -> None:
        for p, q in zip(points[:-1], points[1:], strict=True):
            self.draw(p, q, self.stroke_reach)
        self.blocked |= _dilate(footprint, self.p.margin)


def _place_targets(rng: np.random.Generator, canvas: _Canvas) -> list[list[np.ndarray]] | None:
    """Two target curves with reserved discs at both ends, or None on failure."""
    p, side = canvas.p, canvas.p.resolution
    spread = max(side / 2 - 2 * p.seed_distance, side / 16)
    first = rng.uniform(side / 2 - spread, side / 2 + spread, 2)
    angle = rng.uniform(-math.pi, math.pi)
    starts = [first, first + p.seed_distance * np.array([math.sin(angle), math.cos(angle)])]
    curves = []
    for start in starts:
        reach = canvas.marker_reach
        disc = canvas.mark(start, start, reach)
        if not canvas.inside(start, reach) or canvas.hits(disc):
            return None
        grown = canvas.grow(rng, start, rng.uniform(-math.pi, math.pi), p.contour_length, reach)
        if grown is None:
            return None
        points, footprint = grown
        end_disc = canvas.mark(points[-1], points[-1], reach)
        if canvas.hits(end_disc):
            return None
        canvas.commit(points, footprint | canvas.full([disc, end_disc]))
        curves.append(points)
    return curves


def _place_distractors(rng: np.random.Generator, canvas: _Canvas) -> list[list[np.ndarray]]:
    p, curves = canvas.p, []
    low, high = p.padding + canvas.stroke_reach, p.resolution - p.padding - canvas.stroke_reach
    for _ in range(p.n_distractors):
        for _attempt in range(10):
            start = rng.uniform(low, high, 2)
            heading = rng.uniform(-math.pi, math.pi)
            grown = canvas.grow(rng, start, heading, p.distractor_length, canvas.stroke_reach)
            if grown is not None:
                canvas.commit(*grown)
                curves.append(grown[0])
                break
    return curves


def generate_pathfinder_image(
    rng: np.random.Generator, resolution: int = 32, params: PathfinderParams | None = None
) -> PathfinderSample:
    """Draw one Pathfinder image; see the module docstring.

    **Raises:** `RuntimeError` if 1000 layouts in a row fail (settings too crowded).
    """
    params = pathfinder_params(resolution) if params is None else params
    label = int(rng.integers(2))
    for _ in range(1000):
        canvas = _Canvas(params)
        targets = _place_targets(rng, canvas)
        if targets is not None:
            break
    else:
        raise RuntimeError(
            f"Could not place two target curves in a {params.resolution}px image; "
            "reduce contour_length or segment_length."
        )
    distractors = _place_distractors(rng, canvas)
    markers = (targets[0][0], targets[1 - label][-1])  # label 1: both ends of the first target
    for centre in markers:
        canvas.draw(centre, centre, canvas.marker_reach)
    image = np.round(canvas.intensity * 255).astype(np.uint8)
    curves = tuple(np.stack(c) for c in targets + distractors)
    return PathfinderSample(image, label, curves, (tuple(markers[0]), tuple(markers[1])))


def _metadata_line(batch: int, k: int, label: int, p: PathfinderParams) -> str:
    return (
        f"imgs/{batch} sample_{k}.png {k} {label} {p.continuity:g} {p.contour_length} "
        f"{p.distractor_length} {p.segment_length:g} {p.thickness:g} {p.margin} 1\n"
    )


def _write_pathfinder_batch(
    folder: Path, batch: int, indices: range, seed: int, params: PathfinderParams
) -> list[int]:
    """Write the images of one batch folder and then its metadata; return the labels."""
    img_dir = folder / "imgs" / str(batch)
    img_dir.mkdir(parents=True, exist_ok=True)
    lines, labels = [], []
    for k, index in enumerate(indices):
        sample = generate_pathfinder_image(np.random.default_rng([seed, index]), params=params)
        Image.fromarray(sample.image).save(img_dir / f"sample_{k}.png", format="PNG")
        lines.append(_metadata_line(batch, k, sample.label, params))
        labels.append(sample.label)
    _write_text_atomic(folder / "metadata" / f"{batch}.npy", "".join(lines))
    return labels


def write_pathfinder(
    out: str | os.PathLike,
    n: int,
    *,
    seed: int = 0,
    resolution: int = 32,
    images_per_batch: int = 1000,
    workers: int = 1,
    overwrite: bool = False,
) -> Path:
    """Write `n` images to `out/pathfinder{resolution}/curv_contour_length_14`; return it.

    **Raises:** `FileExistsError` if that folder already holds `imgs` or `metadata` and
    `overwrite` is False (stale batches would otherwise be mixed in).
    """
    if n < 1 or images_per_batch < 1 or workers < 1:
        raise ValueError(
            f"n, images_per_batch and workers must be >= 1, got {n}, {images_per_batch}, {workers}."
        )
    params = pathfinder_params(resolution)
    folder = Path(out) / f"pathfinder{resolution}" / "curv_contour_length_14"
    existing = [folder / name for name in ("imgs", "metadata") if (folder / name).exists()]
    if existing and not overwrite:
        raise FileExistsError(
            f"{folder} already contains {[p.name for p in existing]}; pass --overwrite "
            "(overwrite=True) to replace them or choose another --out."
        )
    for path in existing:
        shutil.rmtree(path)
    (folder / "metadata").mkdir(parents=True, exist_ok=True)
    jobs = [
        (folder, b, range(s, min(s + images_per_batch, n)), seed, params)
        for b, s in enumerate(range(0, n, images_per_batch))
    ]
    if workers == 1:
        for job in jobs:
            _write_pathfinder_batch(*job)
    else:
        # "spawn": forking a process that has JAX loaded (the trainer, the tests) can deadlock.
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            list(pool.map(_write_pathfinder_batch, *zip(*jobs, strict=True)))
    return folder


# --------------------------------------------------------------------------- CLI


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line as one `error: ...` line, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            what = "a positive integer" if low == 1 else f"an integer >= {low}"
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def _parser() -> argparse.ArgumentParser:
    positive, natural = _int_at_least(1), _int_at_least(0)
    parser = _Parser(
        prog="python -m experiments.lra.generate",
        description="Generate ListOps or Pathfinder data in the official LRA file formats.",
    )
    parser.add_argument("--task", required=True, choices=("listops", "pathfinder"))
    parser.add_argument("--out", required=True, type=Path, help="output folder (the data root)")
    parser.add_argument(
        "--size", type=positive, help="total examples (default: the official 100000 / 200000)"
    )
    parser.add_argument("--seed", type=natural, default=0)
    listops = parser.add_argument_group("listops")
    listops.add_argument("--min-length", type=natural, default=500, help="keep length > this")
    listops.add_argument("--max-length", type=positive, default=2000, help="keep length < this")
    listops.add_argument("--max-depth", type=positive, default=10)
    listops.add_argument("--max-args", type=_int_at_least(2), default=10)
    listops.add_argument(
        "--split-sizes",
        type=positive,
        nargs=3,
        metavar=("TRAIN", "VAL", "TEST"),
        help="explicit split sizes instead of --size split 96/2/2",
    )
    pathfinder = parser.add_argument_group("pathfinder")
    pathfinder.add_argument(
        "--resolution", type=_int_at_least(16), default=32, help="32 (Pathfinder) or 128 (Path-X)"
    )
    pathfinder.add_argument("--images-per-batch", type=positive, default=1000)
    pathfinder.add_argument("--workers", type=positive, default=1, help="processes (same output)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the task's existing files under --out (refused otherwise)",
    )
    return parser


def _listops_sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[int, ...]:
    if args.split_sizes is not None and args.size is not None:
        parser.error("give either --size or --split-sizes, not both")
    if args.split_sizes:
        return tuple(args.split_sizes)
    if args.size is not None and args.size < 3:
        parser.error(
            f"argument --size: ListOps needs at least 3 examples (one per split), got {args.size}"
        )
    return listops_split_sizes(args.size or 100_000)


def _generate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, Path]:
    if args.task == "listops":
        sizes = _listops_sizes(parser, args)
        folder = Path(args.out) / "listops-1000"
        existing = [folder / f"basic_{s}.tsv" for s in ("train", "val", "test")]
        existing = [p.name for p in existing if p.exists() or p.is_symlink()]
        if existing and not args.overwrite:
            raise FileExistsError(
                f"{folder} already holds {', '.join(existing)}; pass --overwrite to replace them, "
                "or choose another --out."
            )
        folder = write_listops(
            args.out,
            sizes,
            seed=args.seed,
            min_length=args.min_length,
            max_length=args.max_length,
            max_depth=args.max_depth,
            max_args=args.max_args,
        )
        return f"{sum(sizes)} ListOps examples (train/val/test {'/'.join(map(str, sizes))})", folder
    n = args.size or 200_000
    folder = write_pathfinder(
        args.out,
        n,
        seed=args.seed,
        resolution=args.resolution,
        images_per_batch=args.images_per_batch,
        workers=args.workers,
        overwrite=args.overwrite,
    )
    return f"{n} Pathfinder images ({args.resolution}x{args.resolution})", folder


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Bad flags, impossible settings and unwritable output give one
    `error: ...` line on stderr and status 2."""
    parser = _parser()
    args = parser.parse_args(argv)
    began = time.perf_counter()
    try:
        what, folder = _generate(parser, args)
    except (ValueError, RuntimeError, OSError) as e:
        if (
            isinstance(e, OSError)
            and not isinstance(e, FileExistsError)
            and e.filename is not None
            and e.strerror
        ):
            e = f"--out: cannot write {e.filename} ({e.strerror})"
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"Wrote {what} to {folder} in {time.perf_counter() - began:.1f}s.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

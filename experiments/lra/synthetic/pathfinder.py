"""Pathfinder images, written in the official files' layout.

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

Reproducible: image `i` uses `np.random.default_rng([seed, i])` (so the output does not
depend on `workers`).
"""

import concurrent.futures
import dataclasses
import math
import multiprocessing
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from PIL import Image

from ...runs.atomic import write_atomic

__all__ = [
    "PathfinderParams",
    "PathfinderSample",
    "pathfinder_params",
    "generate_pathfinder_image",
    "write_pathfinder",
]


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
    write_atomic(folder / "metadata" / f"{batch}.npy", "".join(lines).encode("utf-8"))
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

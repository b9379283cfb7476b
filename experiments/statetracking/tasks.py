"""The state-tracking tasks, generated offline with NumPy from a seed.

Each task is a monoid acting on a state: a sequence of tokens $g_1, \\dots, g_L$ and, at
every position $t$, the label $s_t = g_t \\cdot s_{t-1}$ (the running product, $s_0$ the
identity):

- `parity`: tokens 0/1, the label the number of 1s modulo 2 (the group $\\mathbb{Z}_2$);
- `mod3`, `mod5`: tokens 0/1, the number of 1s modulo 3 or 5 ($\\mathbb{Z}_3$,
  $\\mathbb{Z}_5$: abelian, rotations by $2\\pi/k$);
- `s3`, `s5`: tokens the elements of the symmetric group $S_3$ (6) or $S_5$ (120), the
  label the element $g_t g_{t-1} \\cdots g_1$ (non-abelian: the order matters).

Pure NumPy: no JAX import (the command lines answer `--help` before it loads).
"""

import dataclasses
import itertools

import numpy as np

__all__ = ["Task", "TASKS", "task", "generate"]


@dataclasses.dataclass(frozen=True)
class Task:
    """A task: `vocab` input tokens, `classes` labels, `table[s, g]` the label after token
    `g` from label `s`, `claim`: what the literature says it needs."""

    name: str
    vocab: int
    classes: int
    table: np.ndarray
    claim: str


def _cyclic(k: int) -> np.ndarray:
    """Counting 1s modulo k: token 0 keeps the count, token 1 adds one."""
    s = np.arange(k)
    return np.stack([s, (s + 1) % k], axis=1)


def _symmetric(n: int) -> np.ndarray:
    """S_n: `table[s, g]` = the index of the permutation g∘s (apply s, then g)."""
    perms = list(itertools.permutations(range(n)))
    index = {p: i for i, p in enumerate(perms)}
    table = np.empty((len(perms), len(perms)), np.int64)
    for i, s in enumerate(perms):
        for j, g in enumerate(perms):
            table[i, j] = index[tuple(g[s[k]] for k in range(n))]
    return table


TASKS = {
    "parity": Task("parity", 2, 2, _cyclic(2), "a negative eigenvalue (Grazzi et al. 2025)"),
    "mod3": Task("mod3", 2, 3, _cyclic(3), "a complex eigenvalue (rotation by 2π/3)"),
    "mod5": Task("mod5", 2, 5, _cyclic(5), "a complex eigenvalue (rotation by 2π/5)"),
    "s3": Task("s3", 6, 6, _symmetric(3), "non-commuting transitions (S3 is not abelian)"),
    "s5": Task("s5", 120, 120, _symmetric(5), "non-commuting transitions (S5 is not solvable)"),
}


def task(name: str) -> Task:
    """The task `name`; a `ValueError` naming the choices otherwise."""
    if name not in TASKS:
        raise ValueError(f"`task` must be one of {sorted(TASKS)}; got {name!r}.")
    return TASKS[name]


def generate(name: str, n: int, length: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` sequences of `length` uniformly random tokens of task `name` and their labels at
    every position: `(tokens, labels)`, both int32 `(n, length)`."""
    t = task(name)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, t.vocab, (n, length))
    labels = np.empty_like(tokens)
    state = np.zeros(n, np.int64)  # the identity (the count 0; the identity permutation)
    for i in range(length):
        state = t.table[state, tokens[:, i]]
        labels[:, i] = state
    return tokens.astype(np.int32), labels.astype(np.int32)

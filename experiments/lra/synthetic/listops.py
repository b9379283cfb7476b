"""ListOps expressions, evaluated and written in the official files' format.

**ListOps** (the LRA generator, `shared/LRA.md` §1g). A node is a leaf (a uniform digit)
with probability 0.75 while `depth < max_depth` and always at `max_depth`; otherwise it
applies an operator from MIN, MAX, MED (`int(np.median)`), SM (sum mod 10) to
`randint(2, max_args)` children. Serialised as left-nested pairs: MAX[2, 9] is
`( ( ( [MAX 2 ) 9 ) ] )`. A tree is kept when `min_length < length < max_length`
(strict), where length counts the tokens without parentheses; trees are unique. Files:
`DIR/listops-1000/basic_{train,val,test}.tsv`, header `Source<TAB>Target`, split 96/2/2
in generation order.

Reproducible: `random.Random(seed)`.
"""

import os
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...runs.atomic import write_atomic

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
]

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
    """Train/val/test sizes: val and test get 2,000 examples each (the official count,
    96/2/2 of the official 100,000) or 10% of `total` each when that is fewer, and never
    less than 2% of it (nor than one example); train the rest. At `total` 4,000:
    3,200/400/400 (the official ratio alone gave 80 validation examples, whose accuracy is
    uncertain by ±5 points); at 100,000: 96,000/2,000/2,000; at 1,000,000: 96/2/2."""
    if total < 3:
        raise ValueError(f"Need at least 3 ListOps examples (one per split), got {total}.")
    small = max(1, round(total * 0.02), min(2_000, round(total * 0.10)))
    return total - 2 * small, small, small


def write_listops(
    out: str | os.PathLike, sizes: tuple[int, ...], *, seed: int = 0, **kwargs
) -> Path:
    """Generate `sum(sizes)` examples (`sizes`: train, val, test) and write
    `out/listops-1000/basic_{train,val,test}.tsv`.

    `kwargs` go to `generate_listops`. Returns the `listops-1000` folder.
    """
    examples = generate_listops(sum(sizes), seed=seed, **kwargs)
    folder = Path(out) / "listops-1000"
    folder.mkdir(parents=True, exist_ok=True)
    start = 0
    for split, size in zip(("train", "val", "test"), sizes, strict=True):
        rows = "".join(f"{expr}\t{label}\n" for expr, label in examples[start : start + size])
        write_atomic(folder / f"basic_{split}.tsv", ("Source\tTarget\n" + rows).encode("utf-8"))
        start += size
    return folder

"""The README's code runs as written: each tested section's Python block is extracted from
README.md and executed verbatim, then its results are checked."""

import pathlib
import re

import jax
import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def python_block(heading: str) -> str:
    """The first ```python block of the README section titled `heading`."""
    text = README.read_text()
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match is not None, f"README has no section '## {heading}'"
    code = re.search(r"^```python\n(.*?)^```", match.group(1), re.M | re.S)
    assert code is not None, f"README section '## {heading}' has no ```python block"
    return code.group(1)


def run(code: str) -> dict:
    namespace = {"__name__": "__readme__"}
    # README code is user code: JAX's default (standard) dtype promotion, as users have it;
    # the suite's strict promotion would trip over optax's Python-float/int32 arithmetic.
    with jax.numpy_dtype_promotion("standard"):
        exec(compile(code, str(README), "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_quick_example():
    ns = run(python_block("Quick example"))
    assert ns["y"].shape == (16, 1000, 64)
    assert ns["grads"].nu_log.shape == (128,)
    assert ns["y_t"].shape == (64,)


@pytest.mark.slow
def test_compose_lru_block_in_functional_jax(capsys):
    ns = run(python_block("Compose LRUBlock in functional JAX"))
    losses = np.asarray(ns["losses"])
    assert len(losses) == ns["steps"] and np.all(np.isfinite(losses))
    # It learned: the loss fell well below its start and chance (ln 2), and held-out
    # accuracy is far above chance (50%), in both forms.
    assert losses[-10:].mean() < 0.5 * losses[:10].mean()
    assert losses[-10:].mean() < 0.3
    assert float(ns["acc"]) > 0.85 and float(ns["real_acc"]) > 0.85
    assert "test accuracy" in capsys.readouterr().out

"""Sampling from the language model (`experiments/lm/sample.py`): the complex and real forms
of the same weights write the same text for the same key; greedy sampling through
`chunk` + `step` follows the model's parallel call; top-k and temperature draw from the
distribution they define."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru
from experiments.lm.config import LMConfig
from experiments.lm.model import build_model
from experiments.lm.sample import generate, pick


@pytest.fixture(scope="module")
def model():
    cfg = LMConfig(depth=2, d_model=16, d_state=8, r_min=0.5, r_max=0.99)
    return build_model(cfg, jax.random.PRNGKey(3))


def test_both_forms_write_the_same_text(model):
    model, state = model
    real = eqx_lru.to_real(model)
    texts = set()
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        a = generate(model, state, b"def ", 48, key=key, temperature=1.0, top_k=256)
        b = generate(real, state, b"def ", 48, key=key, temperature=1.0, top_k=256)
        assert a == b and len(a) == 48
        texts.add(a)
    assert len(texts) == 3  # other keys, other text


def test_greedy_sampling_follows_the_parallel_call(model):
    """Temperature 0 through `chunk` (the prompt) and `step` (each new byte) writes the
    argmax of the model's own parallel call on the text so far, at every position."""
    model, state = model
    prompt = b"import os\n"
    out = generate(model, state, prompt, 24, key=jax.random.PRNGKey(0), temperature=0)
    text = np.frombuffer(prompt + out, np.uint8).astype(np.int32)
    logits, _ = model(jnp.asarray(text[:-1]), state, inference=True)
    want = np.asarray(jnp.argmax(logits[len(prompt) - 1 :], axis=-1))
    np.testing.assert_array_equal(want, text[len(prompt) :])


def test_top_k_and_temperature_draw_from_their_distribution():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=256), jnp.float32)
    k, temperature, n = 5, 0.5, 4000
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    draws = np.asarray(jax.vmap(lambda key: pick(logits, key, temperature, k))(keys))
    top = np.argsort(-np.asarray(logits))[:k]
    assert set(np.unique(draws)) <= set(top.tolist())
    top1 = jax.vmap(lambda key: pick(logits, key, 2.0, 1))(keys[:50])
    assert np.all(np.asarray(top1) == int(jnp.argmax(logits)))  # top-1 is greedy at any T
    p = np.exp(np.asarray(logits)[top] / temperature)
    p /= p.sum()
    freq = np.array([(draws == t).mean() for t in top])
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n) + 1e-3), (freq, p)

"""A Hawk model (`LRUModel` of two `HawkBlock`s, RG-LRU cores) learns recall with the
library's optimiser (§D.2), `train_step` and `predict`: a cue token (one of 4 classes) in
the first 8 of 32 positions, noise tokens elsewhere, the class read at the last position
(chance 25%)."""

import functools

import equinox as eqx
import jax
import numpy as np
import pytest
from recall_task import CLASSES, VOCAB, train_on_recall

import eqx_lru

LENGTH, CUE_WITHIN = 32, 8


@pytest.mark.slow
def test_hawk_recall():
    model_key, key = jax.random.split(jax.random.PRNGKey(0))
    core = functools.partial(eqx_lru.RGLRU, r_min=0.99, r_max=0.9999)
    model, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        VOCAB, CLASSES, 16, 16, 2, encoder="embedding", pooling="last",
        block=functools.partial(eqx_lru.HawkBlock, core=core), key=model_key,
    )  # fmt: skip
    losses, accuracy = train_on_recall(model, state, key, length=LENGTH, cue_within=CUE_WITHIN)
    assert np.mean(losses[:10]) > 1.2  # started at chance
    assert accuracy > 0.9, (accuracy, losses[::25])

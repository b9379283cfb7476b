"""The state-tracking experiments (`experiments/statetracking/`): the task generators
against direct computations, and learning tests that train for real (tiny models, a few
hundred steps) at length 32 and test at 128:

- parity: cores with negative transitions (the signed RG-LRU, the selective LRU, a block
  core) reach >= 99% beyond the training length, cores with transitions in [0, 1] (the
  LRU, the default RG-LRU) stay near chance under the same training (Grazzi et al. 2025);
- S3: a non-commuting block core reaches >= 99% at 4x the training length.

Rungs whose core is not in this version (a branch not merged yet) are skipped by name.
"""

import itertools
from typing import Any

import numpy as np
import pytest

from experiments.statetracking import rungs, tasks, train

SMALL = dict(train_length=32, d_model=16, d_state=16, batch=32, test_sequences=64)


def test_counting_tasks_label_the_running_count():
    for name, k in (("parity", 2), ("mod3", 3), ("mod5", 5)):
        x, y = tasks.generate(name, 4, 50, seed=1)
        np.testing.assert_array_equal(y, np.cumsum(x, axis=1) % k)


@pytest.mark.parametrize("name, n", [("s3", 3), ("s5", 5)])
def test_group_tasks_label_the_running_product(name, n):
    perms = list(itertools.permutations(range(n)))
    x, y = tasks.generate(name, 3, 20, seed=2)
    for row, labels in zip(x, y, strict=True):
        state = tuple(range(n))
        for g, label in zip(row, labels, strict=True):
            state = tuple(perms[g][state[i]] for i in range(n))  # g after the product so far
            assert perms[label] == state
    table = tasks.TASKS[name].table
    assert sorted(table[0]) == list(range(len(perms)))  # a group: each row a permutation
    assert not np.array_equal(table, table.T)  # not abelian


def test_generation_is_seeded():
    a, b = tasks.generate("s3", 2, 9, seed=5), tasks.generate("s3", 2, 9, seed=5)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], tasks.generate("s3", 2, 9, seed=6)[0])
    with pytest.raises(ValueError, match="`task` must be one of"):
        tasks.generate("s4", 1, 1, seed=0)


def _cell(task, core, *, steps, seed=0, **options):
    if core not in rungs.available():
        pytest.skip(f"{core}: {rungs.missing()[core]}")
    return train.train(task, core, seed=seed, steps=steps, **{**SMALL, **options})


#: The parity runs' training, the same for every core: a larger rate and no weight decay
#: (the transitions sharpen towards +-1 faster), and label smoothing: without it the loss
#: falls to ~0 by growing the logits and stops pulling the transitions once they are good
#: enough for length 32 (the signed RG-LRU then kept a_t(1) ~ -0.94 and reached 97.8-99.9%
#: at 128; the selective LRU's phases stalled 1-2% of pi short of 0 and pi). With it the
#: best margin is finite, and a transition that drifts over the positions keeps costing.
PARITY: dict[str, Any] = dict(learning_rate=1e-2, weight_decay=0.0, label_smoothing=0.1)

#: Steps per signed core: the fewest with 100% at length 128 over seeds 0-4 (see
#: docs/concepts/state-tracking.md; the signed RG-LRU at 400 steps: 86.7-100%).
SIGNED = {"rglru_signed": 600, "selective_complex": 300, "block2": 400}


@pytest.mark.slow
@pytest.mark.parametrize("core", sorted(SIGNED))
def test_parity_is_learned_by_signed_transitions(core):
    result = _cell("parity", core, steps=SIGNED[core], **PARITY)
    assert result["extrapolated"] >= 0.99, result


@pytest.mark.slow
@pytest.mark.parametrize("core", ["lru", "rglru"])
def test_parity_is_not_learned_by_positive_transitions(core):
    result = _cell("parity", core, steps=400, **PARITY)
    assert result["in_length"] > 0.5  # it trained (the first positions are easy)
    assert result["extrapolated"] < 0.6, result


@pytest.mark.slow
def test_s3_is_learned_by_a_non_commuting_block_core():
    result = _cell("s3", "block3", steps=1500, d_model=32, d_state=32)
    assert result["extrapolated"] >= 0.99, result

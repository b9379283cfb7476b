"""The state-tracking experiments (`experiments/statetracking/`): the task generators
against direct computations, and learning tests that train for real (tiny models, a few
hundred steps) at length 32 and test at 128:

- parity: cores with negative transitions learn it beyond the training length (the block
  core >= 99%, the signed RG-LRU >= 95% at this budget), cores with transitions in [0, 1]
  stay near chance (Grazzi et al. 2025);
- S3: a non-commuting block core reaches >= 99% at 4x the training length.

Rungs whose core is not in this version (a branch not merged yet) are skipped by name.
"""

import itertools

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


#: Parity beyond the training length, per signed core: its budget and the accuracy it
#: reaches. The signed RG-LRU needs a larger rate and no weight decay to sharpen its
#: transitions towards +-1, and at this budget reaches 97-100% (seeds 0-2: 97.8, 99.9,
#: 99.7%), not 99% every time: asserted at 95%, well above the positive cores' chance.
SIGNED = {
    "rglru_signed": (dict(steps=1200, learning_rate=1e-2, weight_decay=0.0), 0.95),
    "block2": (dict(steps=600), 0.99),
}


@pytest.mark.slow
@pytest.mark.parametrize("core", sorted(SIGNED))
def test_parity_is_learned_by_signed_transitions(core):
    budget, accuracy = SIGNED[core]
    result = _cell("parity", core, **budget)
    assert result["extrapolated"] >= accuracy, result


@pytest.mark.slow
@pytest.mark.parametrize("core", ["lru", "rglru"])
def test_parity_is_not_learned_by_positive_transitions(core):
    result = _cell("parity", core, steps=600)
    assert result["in_length"] > 0.5  # it trained (the first positions are easy)
    assert result["extrapolated"] < 0.6, result


@pytest.mark.slow
def test_s3_is_learned_by_a_non_commuting_block_core():
    result = _cell("s3", "block3", steps=1500, d_model=32, d_state=32)
    assert result["extrapolated"] >= 0.99, result

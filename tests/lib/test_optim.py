"""`lru_param_labels`, `lru_schedule`, `lru_optimizer` (paper §D.2)."""

import functools
from typing import Any, ClassVar, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqx_lru

RECURRENT = ("nu_log", "theta_log", "gamma_log", "B_re", "B_im")
OTHER_LRU = ("C_re", "C_im", "D")


def _assert_lru_labels(labels, *, d="decay"):
    for name in RECURRENT:
        assert getattr(labels, name) == "recurrent", name
    for name in OTHER_LRU:
        assert getattr(labels, name) == d, name


@pytest.mark.parametrize("decay_norm_and_bias", [True, False])
def test_labels_of_an_lru_model(decay_norm_and_bias):
    model = eqx.nn.make_with_state(eqx_lru.LRUModel)(
        7,
        2,
        6,
        5,
        2,
        encoder="embedding",
        key=jax.random.PRNGKey(0),
        block=functools.partial(eqx_lru.LRUBlock, bidirectional=True),
    )[0]
    labels = eqx_lru.lru_param_labels(model, decay_norm_and_bias=decay_norm_and_bias)
    params = eqx.filter(model, eqx.is_inexact_array)
    assert jax.tree_util.tree_structure(labels) == jax.tree_util.tree_structure(params)
    vector = "decay" if decay_norm_and_bias else "no_decay"
    for block in labels.blocks:
        _assert_lru_labels(block.core)  # D is inside the LRU: decayed as in the paper
        _assert_lru_labels(block.reverse_core)
        assert block.norm.weight == block.norm.bias == vector
        assert block.glu.linear.weight == "decay" and block.glu.linear.bias == vector
    assert labels.encoder.weight == "decay"  # the embedding matrix
    tables = eqx_lru.lru_param_labels(model, decay_embeddings=False)
    assert tables.encoder.weight == "no_decay" and tables.head.bias == "decay"
    assert labels.head.weight == "decay" and labels.head.bias == vector
    counts = {}
    for label in jax.tree_util.tree_leaves(labels):
        counts[label] = counts.get(label, 0) + 1
    assert counts["recurrent"] == 2 * 2 * len(RECURRENT)


class DenseCore(eqx_lru.AbstractRecurrentCore):
    """A custom core: a subclass of the contract, its recurrent group declared by field."""

    recurrent_fields: ClassVar[tuple[str, ...]] = ("A",)
    A: jax.Array
    C: jax.Array

    def init_state(self):
        return jnp.zeros(self.A.shape[0])

    def step(self, state, u_t, *, dt=None):
        return state, cast(jax.Array, u_t)

    def run(self, u, *, initial_state=None, reverse=False, length=None, segment_ids=None, dt=None):
        return cast(jax.Array, u), self.init_state()


def test_labels_of_any_pytree():
    lru = eqx_lru.ComplexLRU(3, 2, key=jax.random.PRNGKey(0))
    tree = {
        "cores": [lru, eqx_lru.RealLRU.from_complex(lru), DenseCore(jnp.eye(2), jnp.ones((3, 2)))],
        "mlp": eqx.nn.Linear(3, 4, key=jax.random.PRNGKey(1)),
        "steps": jnp.array(3),  # not a parameter
        "name": "not a parameter",
    }
    labels = eqx_lru.lru_param_labels(tree)
    _assert_lru_labels(labels["cores"][0])
    _assert_lru_labels(labels["cores"][1])
    assert labels["cores"][2].A == "recurrent" and labels["cores"][2].C == "decay"
    assert labels["mlp"].weight == labels["mlp"].bias == "decay"
    assert labels["steps"] is None and labels["name"] is None

    class Wrong(DenseCore):
        recurrent_fields: ClassVar[tuple[str, ...]] = ("Lambda",)

    with pytest.raises(ValueError, match="Lambda"):
        eqx_lru.lru_param_labels(Wrong(jnp.eye(2), jnp.ones(2)))


def test_schedule_shape():
    peak, total = 1e-3, 1000
    schedule = eqx_lru.lru_schedule(peak, total)

    def at(s):
        return float(cast(jax.Array, schedule(s)))

    np.testing.assert_allclose(at(0), 1e-7, rtol=1e-5)
    np.testing.assert_allclose(at(50), (peak + 1e-7) / 2, rtol=1e-4)  # linear warmup
    np.testing.assert_allclose(at(100), peak, rtol=1e-5)  # 10% of training
    np.testing.assert_allclose(at(550), (peak + 1e-7) / 2, rtol=1e-4)  # cosine midpoint
    np.testing.assert_allclose(at(1000), 1e-7, rtol=1e-3)
    np.testing.assert_allclose(at(2000), 1e-7, rtol=1e-3)
    values = np.array([at(s) for s in range(0, 1001, 25)])
    assert np.all(np.diff(values[:5]) > 0) and np.all(np.diff(values[4:]) < 0)
    with pytest.raises(ValueError, match="total_steps"):
        eqx_lru.lru_schedule(peak, 0)
    with pytest.raises(ValueError, match="warmup_fraction"):
        eqx_lru.lru_schedule(peak, 10, warmup_fraction=1.0)


def _tree():
    return {
        "lru": eqx_lru.ComplexLRU(3, 2, key=jax.random.PRNGKey(0)),
        "linear": eqx.nn.Linear(3, 2, key=jax.random.PRNGKey(1)),
    }


def test_optimizer_groups_and_weight_decay():
    """With Adam's first step on a constant gradient g, the update is -lr·sign(g) exactly
    (up to eps); AdamW adds -lr·wd·p. So every group's learning rate and decay is visible."""
    lr, factor, wd = 1e-2, 0.25, 0.1
    tree = _tree()
    params = eqx.filter(tree, eqx.is_inexact_array)
    updates: Any  # optax's update tree: here a dict like `params`
    with jax.numpy_dtype_promotion("standard"):  # optax mixes Python floats and int32 counts
        for decay_norm_and_bias in (True, False):
            optim = eqx_lru.lru_optimizer(
                learning_rate=lr,
                total_steps=10,
                lr_factor=factor,
                weight_decay=wd,
                warmup_fraction=0.0,
                decay_norm_and_bias=decay_norm_and_bias,
            )
            state = optim.init(params)
            # Zero gradients: only weight decay moves anything, and never the recurrent params.
            zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
            updates, _ = optim.update(zeros, state, params)
            for name in RECURRENT:
                assert bool(jnp.all(getattr(updates["lru"], name) == 0)), name
            for name in OTHER_LRU:
                expected = -lr * wd * getattr(params["lru"], name)
                np.testing.assert_allclose(getattr(updates["lru"], name), expected, rtol=1e-5)
            bias_decay = wd if decay_norm_and_bias else 0.0
            expected = -lr * bias_decay * params["linear"].bias
            np.testing.assert_allclose(updates["linear"].bias, expected, rtol=1e-5, atol=1e-12)
            # Unit gradients: the recurrent group moves at lr × lr_factor, the rest at lr.
            ones = jax.tree_util.tree_map(jnp.ones_like, params)
            updates, _ = optim.update(ones, state, params)
            for name in RECURRENT:
                np.testing.assert_allclose(getattr(updates["lru"], name), -lr * factor, rtol=1e-5)
            np.testing.assert_allclose(
                updates["linear"].weight, -lr * (1 + wd * params["linear"].weight), rtol=1e-5
            )
            np.testing.assert_allclose(
                updates["linear"].bias, -lr * (1 + bias_decay * params["linear"].bias), rtol=1e-5
            )


def test_optimizer_follows_the_schedule():
    """Constant unit gradients make Adam's step equal the learning rate: read the schedule
    of both groups off the actual updates."""
    lr, factor, total = 1e-2, 0.5, 20
    params = eqx.filter(_tree(), eqx.is_inexact_array)
    optim = eqx_lru.lru_optimizer(
        learning_rate=lr, total_steps=total, lr_factor=factor, weight_decay=0.0
    )
    # Both groups warm up from 1e-7 and decay to 1e-7; only their peaks differ.
    schedule = eqx_lru.lru_schedule(lr, total)
    slow = eqx_lru.lru_schedule(lr * factor, total)
    ones = jax.tree_util.tree_map(jnp.ones_like, params)
    with jax.numpy_dtype_promotion("standard"):
        update = jax.jit(optim.update)
        state = optim.init(params)
        for step in range(total + 1):
            updates, state = update(ones, state, params)
            np.testing.assert_allclose(-updates["linear"].weight, schedule(step), rtol=1e-4)
            np.testing.assert_allclose(-updates["lru"].nu_log, slow(step), rtol=1e-4)
            if step == total // 10:  # end of warmup: the peaks
                np.testing.assert_allclose(-updates["lru"].B_re, lr * factor, rtol=1e-4)
    with pytest.raises(ValueError, match="lr_factor"):
        eqx_lru.lru_optimizer(learning_rate=lr, total_steps=total, lr_factor=0.0)


def test_a_core_moves_single_fields_to_other_groups():
    """`param_groups` (the baselines' argument) moves fields out of the core's default
    groups, including to the fourth group: lr × lr_factor with weight decay."""
    from eqx_lru.baselines import S4D, S5

    lr, factor, wd = 1e-2, 0.25, 0.1
    moved = {"log_dt": "no_decay", "C_re": "recurrent_decay", "C_im": "recurrent_decay"}
    core = S4D(3, 4, param_groups=moved, key=jax.random.PRNGKey(0))
    labels = eqx_lru.lru_param_labels(core)
    assert (labels.log_dt, labels.C_re, labels.C_im) == ("no_decay",) + 2 * ("recurrent_decay",)
    assert (labels.A_re_log, labels.B_im, labels.D) == ("recurrent", "recurrent", "decay")
    assert eqx_lru.to_real(core).param_groups == core.param_groups  # kept by conversions
    params = eqx.filter({"core": core}, eqx.is_inexact_array)
    params = jax.tree_util.tree_map(jnp.ones_like, params)  # p = 1: AdamW's step -lr (1 + wd)
    optim = eqx_lru.lru_optimizer(
        learning_rate=lr, total_steps=10, lr_factor=factor, weight_decay=wd, warmup_fraction=0.0
    )
    updates: Any  # optax's update tree: here a dict like `params`
    state: Any  # optax's states: `PartitionState`s
    plain: Any
    with jax.numpy_dtype_promotion("standard"):
        state = optim.init(params)
        updates, _ = optim.update(params, state, params)
    step = {name: float(getattr(updates["core"], name)[0, 0]) for name in ("C_re", "A_im")}
    np.testing.assert_allclose(step["C_re"], -lr * factor * (1 + wd), rtol=1e-5)
    np.testing.assert_allclose(step["A_im"], -lr * factor, rtol=1e-5)
    np.testing.assert_allclose(updates["core"].log_dt, -lr, rtol=1e-5)
    np.testing.assert_allclose(updates["core"].D, -lr * (1 + wd), rtol=1e-5)
    # The fourth group is in a state only where used: other models' states keep their shape.
    plain = optim.init(eqx.filter(eqx.nn.Linear(2, 3, key=jax.random.PRNGKey(1)), eqx.is_array))
    assert set(plain.inner_states) == {"recurrent", "decay", "no_decay"}
    assert set(state.inner_states) == {"recurrent", "decay", "no_decay", "recurrent_decay"}
    with pytest.raises(ValueError, match=r"S5: `param_groups` names fields \['b'\]"):
        S5(3, 4, param_groups={"b": "decay"}, key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"S4D: `param_groups` has groups \['fast'\]"):
        S4D(3, 4, param_groups={"D": "fast"}, key=jax.random.PRNGKey(0))

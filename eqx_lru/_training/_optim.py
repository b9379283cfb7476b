r"""The optimiser of paper §D.2: AdamW, warmup + cosine schedule, slower recurrent parameters.

Parameters are labelled by where they live, for `optax.multi_transform`:

- `"recurrent"`: the fields every `eqx_lru.AbstractRecurrentCore` declares in its class
    attribute `recurrent_fields` — for the LRU (`AbstractLRU.recurrent_fields`) `nu_log`,
    `theta_log`, `gamma_log`, `B_re`, `B_im` ($A$, $\gamma$ and $B$ of the paper) —
    learning rate × `lr_factor`, no weight decay;
- `"decay"`: every other parameter — AdamW with weight decay, as the paper ("weight decay
    for all parameters except $A$ and $B$ (and $\gamma$)"), including the LRU's $C$, $D$,
    norm scales and biases;
- `"no_decay"`: with `decay_norm_and_bias=False`, the 1-D parameters outside recurrent
    cores (biases, norm scales and shifts), and with `decay_embeddings=False` the tables
    of `eqx.nn.Embedding` — Adam at the base learning rate;
- `"recurrent_decay"`: AdamW at learning rate × `lr_factor` with weight decay, for fields
    a core puts there itself (below).

A core may move single fields to another group through an attribute `param_groups`,
pairs `(field, group)` over its top-level fields (the baselines' `param_groups=`, which
the LRA trainer uses for the per-parameter settings of S4's and S5's recipes).

optax is imported lazily, so `import eqx_lru` does not need it.
"""

import dataclasses
import functools
from collections.abc import Hashable
from typing import Any

import equinox as eqx
import jax
from jaxtyping import PyTree

from .._checks import Size, check_float, check_size
from .._cores._core import AbstractRecurrentCore

RECURRENT = "recurrent"
DECAY = "decay"
NO_DECAY = "no_decay"
RECURRENT_DECAY = "recurrent_decay"
#: Every group, and the ones every `lru_optimizer` state holds (the others only where used,
#: so the states of runs saved before a group existed keep their structure).
GROUPS = (RECURRENT, DECAY, NO_DECAY, RECURRENT_DECAY)
_ALWAYS = (RECURRENT, DECAY, NO_DECAY)


def _is_core(node) -> bool:
    return isinstance(node, AbstractRecurrentCore)


def _is_labelled_module(node) -> bool:
    return _is_core(node) or isinstance(node, eqx.nn.Embedding)


def check_param_groups(owner: str, param_groups, names) -> tuple[tuple[str, str], ...]:
    """`param_groups` (a mapping or pairs `field -> group`) as sorted pairs, checked against
    the field `names` of `owner` and the groups of `lru_optimizer`."""
    pairs = tuple(sorted(dict(param_groups or {}).items()))
    unknown = sorted({f for f, _ in pairs} - set(names))
    if unknown:
        raise ValueError(
            f"{owner}: `param_groups` names fields {unknown} it does not have; its fields "
            f"are {sorted(names)}."
        )
    wrong = sorted({g for _, g in pairs} - set(GROUPS))
    if wrong:
        raise ValueError(f"{owner}: `param_groups` has groups {wrong}; expected {list(GROUPS)}.")
    return pairs


def _label_core(core: AbstractRecurrentCore) -> AbstractRecurrentCore:
    """The core with each array replaced by its label, by top-level field name: its
    `recurrent_fields` "recurrent", the others "decay", then its `param_groups`."""
    fields = tuple(core.recurrent_fields)
    names = {f.name for f in dataclasses.fields(core)}
    unknown = set(fields) - names
    if unknown:
        raise ValueError(
            f"{type(core).__name__} declares recurrent fields {sorted(unknown)} it does "
            f"not have; its fields are {sorted(names)}."
        )
    moved = dict(
        check_param_groups(type(core).__name__, getattr(core, "param_groups", None), names)
    )

    def label(path, leaf):
        name = path[0].name
        return moved.get(name, RECURRENT if name in fields else DECAY)

    return jax.tree_util.tree_map_with_path(label, core)


def lru_param_labels(
    tree: PyTree, *, decay_norm_and_bias: bool = True, decay_embeddings: bool = True
) -> PyTree[str]:
    r"""Label every trainable array of `tree` for `optax.multi_transform`.

    Works on any pytree containing recurrent cores (an `LRUModel`, your own model, a
    filtered model or its gradients): every `eqx_lru.AbstractRecurrentCore` (the LRU
    layers, the ablation and baseline cores, your own subclass — e.g.
    `recurrent_fields: ClassVar = ("A", "B")`), anywhere, has the top-level fields its
    class declares in `recurrent_fields` labelled `"recurrent"` and its other arrays
    `"decay"`, except the fields its `param_groups` (if it has one) moves.

    **Arguments:**

    - `tree`: the model (or `eqx.filter(model, eqx.is_inexact_array)`).
    - `decay_norm_and_bias`: if `False`, 1-D arrays outside recurrent cores (biases, norm
        scales and shifts) get `"no_decay"` instead of `"decay"`.
    - `decay_embeddings`: if `False`, the tables of `eqx.nn.Embedding` layers get
        `"no_decay"`.

    **Returns:** a pytree shaped like `eqx.filter(tree, eqx.is_inexact_array)`, with
    `"recurrent"`, `"decay"`, `"no_decay"` or `"recurrent_decay"` at every inexact array
    and `None` elsewhere.
    """
    params = eqx.filter(tree, eqx.is_inexact_array)

    def label(node):
        if _is_core(node):
            return _label_core(node)
        if isinstance(node, eqx.nn.Embedding):
            table = DECAY if decay_embeddings else NO_DECAY
            return jax.tree_util.tree_map(lambda _: table, node)
        if decay_norm_and_bias or node.ndim >= 2:
            return DECAY
        return NO_DECAY

    return jax.tree_util.tree_map(label, params, is_leaf=_is_labelled_module)


def _optax():
    try:
        import optax
    except ImportError as e:  # pragma: no cover - optax is in the test group
        raise ImportError("eqx_lru's optimiser helpers need optax: `pip install optax`.") from e
    return optax


def lru_schedule(
    learning_rate: float,
    total_steps: Size,
    *,
    warmup_fraction: float = 0.1,
    init_value: float = 1e-7,
    end_value: float = 1e-7,
):
    r"""The learning-rate schedule of §D.2, an `optax.Schedule`.

    Linear warmup from `init_value` to `learning_rate` over the first
    $w = \lfloor \text{warmup_fraction} \cdot \text{total_steps} \rceil$ steps, then cosine
    decay to `end_value` at step `total_steps` (constant afterwards):

    $$\eta(s) = \begin{cases} \eta_0 + (\eta_\max - \eta_0)\, s / w & s < w \\
    \eta_\text{end} + \tfrac12 (\eta_\max - \eta_\text{end})
    \big(1 + \cos\big(\pi \tfrac{s - w}{\text{total} - w}\big)\big) & s \ge w. \end{cases}$$
    """
    optax = _optax()
    total_steps = check_size("total_steps", total_steps)
    _check_schedule(learning_rate, warmup_fraction, init_value, end_value, "lru_schedule")
    return optax.warmup_cosine_decay_schedule(
        init_value=init_value,
        peak_value=learning_rate,
        warmup_steps=round(warmup_fraction * total_steps),
        decay_steps=total_steps,
        end_value=end_value,
    )


def _check_schedule(learning_rate, warmup_fraction, init_value, end_value, owner: str) -> None:
    """The numbers of `lru_schedule`, each finite, in range and a normal float32 number
    once used (optax's schedules and updates run in float32)."""
    check_float("learning_rate", learning_rate, low=0, low_open=True, owner=owner)
    check_float("warmup_fraction", warmup_fraction, low=0, high=1, high_open=True, owner=owner)
    check_float("init_value", init_value, low=0, owner=owner)
    check_float("end_value", end_value, low=0, owner=owner)


def lru_optimizer(
    *,
    learning_rate: float,
    total_steps: int,
    lr_factor: float = 1.0,
    weight_decay: float = 0.05,
    warmup_fraction: float = 0.1,
    init_value: float = 1e-7,
    end_value: float = 1e-7,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    decay_norm_and_bias: bool = True,
    decay_embeddings: bool = True,
):
    r"""The optimiser of paper §D.2, as one `optax.GradientTransformation`.

    `optax.multi_transform` over `lru_param_labels`:

    - `"recurrent"` ($\nu$, $\theta$, $\gamma$, $B$ of every LRU layer): Adam, schedule
        peaking at `learning_rate × lr_factor`, **no** weight decay;
    - `"decay"` (everything else): AdamW, schedule peaking at `learning_rate`, decoupled
        weight decay `weight_decay` (scaled by the schedule, as `optax.adamw`);
    - `"no_decay"` (with `decay_norm_and_bias=False` or `decay_embeddings=False`, or a
        core's `param_groups`): Adam at `learning_rate`;
    - `"recurrent_decay"` (only a core's `param_groups`): AdamW at
        `learning_rate × lr_factor` with weight decay `weight_decay`.

    All schedules are `lru_schedule` (warmup from `init_value`, cosine to `end_value`).
    Labels are computed from the parameter tree at `init` and `update`, so this works for
    any model containing LRU layers. Usage:

    ```python
    optim = eqx_lru.lru_optimizer(learning_rate=1e-3, total_steps=10_000, lr_factor=0.5)
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))
    updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
    model = eqx.apply_updates(model, updates)
    ```

    **Arguments:**

    - `learning_rate`: the peak (base) learning rate.
    - `total_steps`: the length of the schedule (number of `update` calls).
    - `lr_factor`: the recurrent parameters' learning rate multiplier (Table 9: 0.1–0.5).
    - `weight_decay`: AdamW weight decay (Table 9: 0.05).
    - `warmup_fraction`, `init_value`, `end_value`: see `lru_schedule`.
    - `b1`, `b2`, `eps`: Adam's.
    - `decay_norm_and_bias`, `decay_embeddings`: see `lru_param_labels`.

    **Returns:** an `optax.GradientTransformation`.
    """
    optax = _optax()
    owner = "lru_optimizer"
    check_size("total_steps", total_steps)
    _check_schedule(learning_rate, warmup_fraction, init_value, end_value, owner)
    check_float("lr_factor", lr_factor, low=0, low_open=True, owner=owner)
    check_float(
        "learning_rate × lr_factor",
        float(learning_rate) * float(lr_factor),
        low=0,
        low_open=True,
        owner=owner,
    )
    check_float("weight_decay", weight_decay, low=0, owner=owner)
    check_float("b1", b1, low=0, high=1, high_open=True, owner=owner)
    check_float("b2", b2, low=0, high=1, high_open=True, owner=owner)
    # Adam divides by sqrt(v) + eps: a zero eps is 0/0 for a parameter whose gradient is 0.
    check_float("eps", eps, low=0, low_open=True, owner=owner)
    schedule = functools.partial(
        lru_schedule,
        total_steps=total_steps,
        warmup_fraction=warmup_fraction,
        init_value=init_value,
        end_value=end_value,
    )
    base = schedule(learning_rate)
    slow = schedule(learning_rate * lr_factor)
    adam = functools.partial(optax.adam, b1=b1, b2=b2, eps=eps)
    adamw = functools.partial(optax.adamw, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
    transforms = {
        RECURRENT: adam(slow),
        DECAY: adamw(base),
        NO_DECAY: adam(base),
        RECURRENT_DECAY: adamw(slow),
    }

    def labels(params):
        return lru_param_labels(
            params, decay_norm_and_bias=decay_norm_and_bias, decay_embeddings=decay_embeddings
        )

    return _partition(transforms, labels)


def _partition(transforms, labels):
    """`optax.multi_transform(transforms, labels)` over the groups in `_ALWAYS` and those
    `labels` uses: a state has no entry for a group no parameter is in (beyond the first
    three), so adding a group leaves the states of existing models as they were."""
    optax = _optax()

    def build(tree):
        used = set(jax.tree_util.tree_leaves(labels(tree)))
        chosen: dict[Hashable, Any] = {
            name: t for name, t in transforms.items() if name in _ALWAYS or name in used
        }
        return optax.multi_transform(chosen, labels)

    def init(params):
        return build(params).init(params)

    def update(updates, state, params=None, **extra_args):
        return build(updates).update(updates, state, params, **extra_args)

    return optax.GradientTransformationExtraArgs(init, update)

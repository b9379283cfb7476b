"""The baselines' published LRA settings, per task, as data: what their authors ran.

Each `Official` record holds the settings of one core on one task as `RunConfig` fields,
the file they come from (`source`), the optimiser groups of single core fields
(`param_groups`) and options of `eqx_lru.lru_optimizer` (`optimizer`) that reproduce the
authors' per-parameter learning rates and weight decay, and the published settings the
trainer cannot follow, with the reason (`not_honoured`). `experiments/lra/cores.py` gives
them to the core records, so `--core s5 --task listops` trains S5 as its authors did. The
LRU's own settings (the paper's Table 9) are the task records' defaults
(`experiments/lra/tasks.py`).

**S5** (lindermanlab/S5 @3c18fdb, `bin/run_experiments/run_lra_<task>.sh`, read with
`run_train.py`, `s5/train.py`, `s5/train_helpers.py`, `s5/ssm.py`, `s5/layers.py`):
`n_layers` -> `depth`, `d_model` -> H, `ssm_size_base` -> P (`d_state`), `blocks` -> J,
`C_init`, `dt_min`/`dt_max` (default 0.001/0.1), `bsz`, `epochs` x (train size // `bsz`)
-> `steps`, `warmup_end` epochs -> `warmup_fraction`, `p_dropout`, `weight_decay`; S5's
global learning rate is `lr_factor x ssm_lr_base`, and its "ssm" group gets
`ssm_lr_base`: here `lr` = the global rate and `lr_factor` = `ssm_lr_base / lr` (this
trainer's factor multiplies the base rate). Every script trains bidirectionally with
batch norm (pre-norm, `run_train.py`'s default) and mean pooling; the GLU is S5's
`half_glu1` (`glu="half"`) unless the script says `half_glu2`. The optimiser groups
(`create_train_state` in `s5/train_helpers.py`) are chosen by each parameter's own key
(`map_nested_fn` calls its rule on leaf keys only): "ssm" (`ssm_lr`, no weight decay)
is `B`, `Lambda_re`, `Lambda_im` and `log_step`, less `log_step` with `--dt_global`,
less `B` with `--opt_config BfastandCdecay` (B at the global rate with weight decay) or
`BandCdecay` (B at `ssm_lr` with weight decay); every other parameter, C, D, the
encoder, the decoder and the batch norms among them, gets the global rate with weight
decay. (The rule also lists "norm", a module's key, never a leaf's: the norms' `scale`
and `bias` are not in "ssm".) Here the recurrent group is the same three fields, and
`param_groups` moves `log_step` or $\tilde B$ where a script does.

**S4D** (state-spaces/s4 @e757cef, `configs/experiment/lra/s4-<task>.yaml`, the LRA
configs of S4 and S4D: S4D is `model.layer.mode=diag` of the same configs,
`models/s4/README.md`; `init: legs` is S4D-LegS): `n_layers`, `d_model`, `layer.d_state`
(N, N/2 complex modes), `layer.init` (`s4d_init`), `layer.dt_min`/`dt_max`,
`optimizer.lr`, the layer's `lr` -> `lr_factor = layer lr / lr`,
`optimizer.weight_decay`, `loader.batch_size`, `trainer.max_epochs` x (train size //
batch size, `loader.drop_last: true`) -> `steps` (where it stops: ImDB and AAN stop before
their scheduler's `num_training_steps`), `scheduler.num_warmup_steps`, `dropout`,
`layer.bidirectional`; the final activation is a full GLU. The optimiser groups: the SSM
kernel registers each parameter with its own settings (`Kernel.register`,
`src/models/sequence/kernels/kernel.py`; `SSMKernelDiag.register_params`,
`kernels/ssm.py`): Delta, A and B get the layer's `lr` for their name (a number: every
name; a dict: its entries, `null` for the global rate) and weight decay `wd` (0.0);
C gets the layer's `lr` for "C" (with a number: that rate; with a dict: the global one)
and the global weight decay; `train.optimizer_param_grouping` (`configs/config.yaml`,
`src/utils/optim_groups.py`) then sets weight decay 0 for biases, norms and embeddings.
Here: Delta without decay at the global rate (`"no_decay"`) where `lr.dt` is `null`, C at
the layer rate with decay (`"recurrent_decay"`) where the layer's `lr` is a number, and
`decay_norm_and_bias=False`, `decay_embeddings=False`.
"""

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from . import tasks

#: The groups of `eqx_lru.lru_optimizer` the recipes move core fields into (named here, not
#: imported, so that the command line imports no JAX; a test checks they are the library's
#: `eqx_lru._training._optim.GROUPS`).
DECAY, NO_DECAY, RECURRENT_DECAY = "decay", "no_decay", "recurrent_decay"

__all__ = ["Official", "S5", "S4D"]


@dataclasses.dataclass(frozen=True)
class Official:
    """One core's published settings for one task.

    **Fields:** `source` (repository, commit and file), `settings` (`RunConfig` fields),
    `param_groups` (`{core field: eqx_lru.lru_optimizer group}`, moving single fields out
    of the core's default groups; the core's `param_groups=`), `optimizer` (further
    `eqx_lru.lru_optimizer` options), `not_honoured` (published settings this trainer
    cannot follow: `{setting: why}`).
    """

    source: str
    settings: Mapping[str, Any]
    not_honoured: Mapping[str, str] = dataclasses.field(default_factory=dict)
    param_groups: Mapping[str, str] = dataclasses.field(default_factory=dict)
    optimizer: Mapping[str, Any] = dataclasses.field(default_factory=dict)


_S5 = "lindermanlab/S5 @3c18fdb bin/run_experiments/{}"
_S4 = "state-spaces/s4 @e757cef configs/experiment/lra/{}"

#: What no S5 script can have here: S5's bidirectional layer shares Lambda and B~ between
#: the directions (two C~); this trainer's bidirectional block runs a second core.
_S5_ALWAYS = {
    "bidirectional": "S5 shares Lambda, B~, Delta and D between the directions (two C~); "
    "LRUBlock(bidirectional=True) runs a second S5 with its own parameters",
}
_HALF_GLU2 = {
    "activation_fn=half_glu2": "S5's half_glu2 gates the GELU's input, x * sigmoid(W "
    "gelu(x)); eqx_lru.GLU has 'full' and 'half' (half_glu1), so 'half' is used",
}
_BN_095 = {
    "bn_momentum=0.95": "S5's default batch-norm momentum; eqx_lru's MaskedBatchNorm in "
    "LRUBlock uses 0.9",
}


def _s5_dropout(p: float) -> dict[str, str]:
    return {
        f"p_dropout={p}": "S5 drops out twice per layer, after the GELU and after the GLU, "
        "each time with one mask per channel for all positions (nn.Dropout(broadcast_dims="
        "[0]), s5/layers.py); LRUBlock drops out once, after the GLU, elementwise"
    }


#: S5's optimiser variants as the groups of single fields (`param_groups`).
_B_FAST = {"B_re": DECAY, "B_im": DECAY}  # --opt_config BfastandCdecay
_B_DECAY = {"B_re": RECURRENT_DECAY, "B_im": RECURRENT_DECAY}  # --opt_config BandCdecay
_DT_GLOBAL = {"log_step": DECAY}  # --dt_global True


def _s5(task: str, script: str, *, epochs: int, bsz: int, ssm_lr: float, factor: float,
        warmup_end: int, not_honoured: Mapping[str, str],
        param_groups: Mapping[str, str], **settings) -> Official:  # fmt: skip
    """An S5 record from its script's values (see the module docstring for the mapping)."""
    lr = factor * ssm_lr
    steps = epochs * (tasks.get_task(task).train_size // bsz)
    values = dict(
        batch_size=bsz, steps=steps, lr=lr, lr_factor=ssm_lr / lr,
        warmup_fraction=warmup_end / epochs, bidirectional=True, norm="batch",
        pooling="mean", glu="half", dt_min=0.001, dt_max=0.1,
    )  # fmt: skip
    values.update(settings)
    warmup = warmup_end * (steps // epochs)
    if warmup:
        not_honoured = {**not_honoured, **_s5_schedule(steps, warmup)}
    return Official(_S5.format(script), values, {**_S5_ALWAYS, **not_honoured}, dict(param_groups))


def _s5_schedule(total: int, warmup: int) -> dict[str, str]:
    """S5's schedule with a warmup (s5/train.py, s5/train_helpers.py): the rates are set
    after each step (the first step runs at the peak); the cosine takes the global step
    over `total - warmup` steps, so it ends `warmup` steps early and stays at lr_min 0."""
    return {
        "cosine_anneal=True": f"S5 sets the rates after each step (its first step runs at the "
        f"peak) and indexes its cosine by the global step, warmup included, over "
        f"{total - warmup} steps: it reaches lr_min 0 at step {total - warmup} and stays there "
        f"for the last {warmup} or so steps; here the cosine runs from the peak at step "
        f"{warmup} to 1e-7 at step {total}",
    }


#: S5's per-task settings, by task.
S5: dict[str, Official] = {
    tasks.LISTOPS: _s5(
        tasks.LISTOPS,
        "run_lra_listops.sh",
        epochs=40,
        bsz=50,
        ssm_lr=0.001,
        factor=3,
        warmup_end=1,
        depth=8,
        d_model=128,
        d_state=16,
        blocks=8,
        c_init="lecun_normal",
        weight_decay=0.04,
        dropout=0.0,
        param_groups=_B_FAST,
        not_honoured={**_HALF_GLU2, **_BN_095},
    ),
    tasks.TEXT: _s5(
        tasks.TEXT,
        "run_lra_imdb.sh",
        epochs=35,
        bsz=50,
        ssm_lr=0.001,
        factor=4,
        warmup_end=0,
        depth=6,
        d_model=256,
        d_state=192,
        blocks=12,
        c_init="lecun_normal",
        weight_decay=0.07,
        dropout=0.1,
        param_groups=_DT_GLOBAL,
        not_honoured={**_HALF_GLU2, **_BN_095, **_s5_dropout(0.1)},
    ),
    tasks.RETRIEVAL: _s5(
        tasks.RETRIEVAL,
        "run_lra_aan.sh",
        epochs=20,
        bsz=32,
        ssm_lr=0.001,
        factor=2,
        warmup_end=1,
        depth=6,
        d_model=128,
        d_state=256,
        blocks=16,
        c_init="trunc_standard_normal",
        weight_decay=0.05,
        dropout=0.0,
        param_groups=_DT_GLOBAL,
        not_honoured=_BN_095,
    ),
    tasks.IMAGE: _s5(
        tasks.IMAGE,
        "run_lra_cifar.sh",
        epochs=250,
        bsz=50,
        ssm_lr=0.001,
        factor=4.5,
        warmup_end=1,
        depth=6,
        d_model=512,
        d_state=384,
        blocks=3,
        c_init="lecun_normal",
        weight_decay=0.07,
        dropout=0.1,
        param_groups=_B_FAST,
        not_honoured={
            "clip_eigs=True": "S5 clips Re(Lambda) <= -1e-4 in the forward pass; "
            "eqx_lru.baselines.S5 trains Re(Lambda) freely",
            "dataset=lra-cifar-classification": "the script trains on grayscale CIFAR; "
            "this task is colour, as in the LRU paper",
            **_BN_095,
            **_s5_dropout(0.1),
        },
    ),
    tasks.PATHFINDER: _s5(
        tasks.PATHFINDER,
        "run_lra_pathfinder.sh",
        epochs=200,
        bsz=64,
        ssm_lr=0.0009,
        factor=5,
        warmup_end=1,
        depth=6,
        d_model=192,
        d_state=256,
        blocks=8,
        c_init="trunc_standard_normal",
        weight_decay=0.03,
        dropout=0.05,
        param_groups={},
        not_honoured=_s5_dropout(0.05),
    ),
    tasks.PATHX: _s5(
        tasks.PATHX,
        "run_lra_pathx.sh",
        epochs=75,
        bsz=32,
        ssm_lr=0.0006,
        factor=3,
        warmup_end=1,
        depth=6,
        d_model=128,
        d_state=256,
        blocks=16,
        c_init="complex_normal",
        dt_min=0.0001,
        weight_decay=0.06,
        dropout=0.0,
        param_groups=_B_DECAY,
        not_honoured={},
    ),
}

#: What no S4 config can have here.
_S4_ALWAYS = {
    "B_clip=2": "S4D-LegS clips Im(V* b) to [-2, 2]; V's eigenvector phases (which parts "
    "the clip touches) are NumPy's here, PyTorch's there",
    "dt_transform=softplus": "S4 parameterises Delta = softplus(p); eqx_lru's S4D uses "
    "exp(log_dt) (the same initial Delta range)",
    "bidirectional": "S4's bidirectional kernel shares A, B and Delta between the directions "
    "(two C); LRUBlock(bidirectional=True) runs a second S4D with its own parameters",
}
_N_SSM_1 = {
    "n_ssm=1": "S4 shares A and B over the H channels; eqx_lru's S4D has one A, B per channel "
    "(initialised alike)",
}
_POSTNORM = {
    "prenorm=false": "S4 normalises after the residual sum here; LRUBlock is pre-norm",
}
#: S4's optimiser hooks: biases, norms and embeddings without weight decay, everywhere.
_S4_OPTIMIZER = {"decay_norm_and_bias": False, "decay_embeddings": False}
#: The layer's `lr` as a dict with `dt: null`: Delta at the global rate, no weight decay.
_DT_NULL = {"log_dt": NO_DECAY}
#: The layer's `lr` as a number: C at that rate too, with the global weight decay.
_C_LAYER = {"C_re": RECURRENT_DECAY, "C_im": RECURRENT_DECAY}


def _s4d(task: str, config: str, *, lr: float, ssm_lr: float, epochs: int, schedule: int,
         warmup: int, param_groups: Mapping[str, str], not_honoured: Mapping[str, str],
         **settings) -> Official:  # fmt: skip
    """An S4D record from its config's values (see the module docstring for the mapping):
    the run stops after `epochs` (`trainer.max_epochs`) of a `schedule`-step scheduler."""
    per_epoch = tasks.get_task(task).train_size // settings["batch_size"]
    steps = epochs * per_epoch
    values = dict(
        lr=lr, lr_factor=ssm_lr / lr, steps=steps, warmup_fraction=warmup / steps,
        bidirectional=True, norm="batch", pooling="mean", glu="full", dt_max=0.1,
        weight_decay=0.05, s4d_init="legs",
    )  # fmt: skip
    values.update(settings)
    if steps != schedule:
        left = 0.5 * (1 + math.cos(math.pi * (steps - warmup) / (schedule - warmup)))
        not_honoured = {
            f"scheduler.num_training_steps={schedule}": f"S4 stops after trainer.max_epochs "
            f"({epochs} epochs of {per_epoch} batches: {steps} steps, as here) with its "
            f"{schedule}-step cosine at {left:.2g} x the peak rate; here the schedule is the "
            f"run's length, so it ends at the last step",
            **not_honoured,
        }
    return Official(
        _S4.format(config), values, {**_S4_ALWAYS, **not_honoured}, dict(param_groups),
        _S4_OPTIMIZER,
    )  # fmt: skip


#: S4D's per-task settings, by task.
S4D: dict[str, Official] = {
    tasks.LISTOPS: _s4d(
        tasks.LISTOPS,
        "s4-listops.yaml",
        lr=0.01,
        ssm_lr=0.001,
        epochs=40,
        schedule=120_000,
        warmup=12_000,
        depth=6,
        d_model=256,
        d_state=4,
        dt_min=0.001,
        batch_size=32,
        dropout=0.0,
        param_groups=_DT_NULL,
        not_honoured={**_N_SSM_1, **_POSTNORM},
    ),
    tasks.TEXT: _s4d(
        tasks.TEXT,
        "s4-imdb.yaml",
        lr=0.01,
        ssm_lr=0.001,
        epochs=32,
        schedule=50_000,
        warmup=5_000,
        depth=6,
        d_model=256,
        d_state=4,
        dt_min=0.001,
        batch_size=16,
        dropout=0.0,
        param_groups=_DT_NULL,
        not_honoured=_N_SSM_1,
    ),
    tasks.RETRIEVAL: _s4d(
        tasks.RETRIEVAL,
        "s4-aan.yaml",
        lr=0.01,
        ssm_lr=0.001,
        epochs=20,
        schedule=50_000,
        warmup=5_000,
        depth=6,
        d_model=256,
        d_state=4,
        dt_min=0.001,
        batch_size=64,
        dropout=0.0,
        param_groups=_DT_NULL,
        not_honoured=_N_SSM_1,
    ),
    tasks.IMAGE: _s4d(
        tasks.IMAGE,
        "s4-cifar.yaml",
        lr=0.01,
        ssm_lr=0.001,
        epochs=200,
        schedule=180_000,
        warmup=18_000,
        depth=6,
        d_model=512,
        d_state=64,
        dt_min=0.001,
        batch_size=50,
        dropout=0.1,
        param_groups=_C_LAYER,
        not_honoured={
            **_N_SSM_1,
            **_POSTNORM,
            "dataset.grayscale=true": "the config trains on grayscale CIFAR; this task is "
            "colour, as in the LRU paper",
            "tie_dropout=true": "S4 drops out three times per layer: elementwise after the "
            "convolution (FFTConv), then after the GELU and on the residual branch after the "
            "GLU with one mask per channel for all positions (DropoutNd); LRUBlock drops out "
            "once, after the GLU, elementwise",
        },
    ),
    tasks.PATHFINDER: _s4d(
        tasks.PATHFINDER,
        "s4-pathfinder.yaml",
        lr=0.004,
        ssm_lr=0.001,
        epochs=200,
        schedule=500_000,
        warmup=50_000,
        depth=6,
        d_model=256,
        d_state=64,
        dt_min=0.001,
        batch_size=64,
        dropout=0.0,
        param_groups=_C_LAYER,
        not_honoured={},
    ),
    tasks.PATHX: _s4d(
        tasks.PATHX,
        "s4-pathx.yaml",
        lr=0.001,
        ssm_lr=0.001,
        epochs=50,
        schedule=500_000,
        warmup=50_000,
        depth=6,
        d_model=256,
        d_state=64,
        dt_min=0.0001,
        batch_size=16,
        dropout=0.0,
        param_groups=_C_LAYER,
        not_honoured={},
    ),
}

"""The core registry (`experiments/lra/cores.py`): a new core trains through the trainer
with one record, and the S5 and S4D models and optimisers the trainer builds for each LRA
task follow their authors' published settings (transcribed here independently of
`experiments/lra/official.py`, from the files each row names)."""

import json
import math
from typing import cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from listops_argv import listops_argv

import eqx_lru
import eqx_lru.ablation
import eqx_lru.baselines
from experiments.lra import cores, steps, synthetic, tasks, train
from experiments.lra.config import ConfigError, RunConfig
from experiments.runs.metrics import read_records

# lindermanlab/S5 @3c18fdb bin/run_experiments/run_lra_{script}.sh (dt_min/dt_max: 0.001 and
# 0.1 unless the script sets them; run_train.py's defaults).
# task: (script, n_layers, d_model, ssm_size_base, blocks, C_init, dt_min, bsz, epochs,
#        ssm_lr_base, lr_factor, weight_decay, p_dropout, warmup_end)
S5_SCRIPTS = {
    "listops": ("listops", 8, 128, 16, 8, "lecun_normal", 0.001, 50, 40, 1e-3, 3, 0.04, 0, 1),
    "text": ("imdb", 6, 256, 192, 12, "lecun_normal", 0.001, 50, 35, 1e-3, 4, 0.07, 0.1, 0),
    "retrieval": ("aan", 6, 128, 256, 16, "trunc_standard_normal", 0.001, 32, 20, 1e-3, 2,
                  0.05, 0.0, 1),
    "image": ("cifar", 6, 512, 384, 3, "lecun_normal", 0.001, 50, 250, 1e-3, 4.5, 0.07, 0.1, 1),
    "pathfinder": ("pathfinder", 6, 192, 256, 8, "trunc_standard_normal", 0.001, 64, 200,
                   9e-4, 5, 0.03, 0.05, 1),
    "pathx": ("pathx", 6, 128, 256, 16, "complex_normal", 0.0001, 32, 75, 6e-4, 3, 0.06, 0.0, 1),
}  # fmt: skip
# The same scripts' --opt_config and --dt_global (default "standard", False).
S5_OPTIMISER = {
    "listops": ("BfastandCdecay", False),
    "text": ("standard", True),
    "retrieval": ("standard", True),
    "image": ("BfastandCdecay", False),
    "pathfinder": ("standard", False),
    "pathx": ("BandCdecay", False),
}
# state-spaces/s4 @e757cef configs/experiment/lra/s4-{config}.yaml (S4D: model.layer.mode=diag).
# Every config: init legs (S4D-LegS with mode=diag), bidirectional, batch norm.
# task: (config, n_layers, d_model, d_state, dt_min, dt_max, optimizer.lr, layer lr,
#        weight_decay, batch_size, num_training_steps, num_warmup_steps, dropout,
#        trainer.max_epochs)
S4_CONFIGS = {
    "listops": ("listops", 6, 256, 4, 0.001, 0.1, 0.01, 0.001, 0.05, 32, 120000, 12000, 0.0, 40),
    "text": ("imdb", 6, 256, 4, 0.001, 0.1, 0.01, 0.001, 0.05, 16, 50000, 5000, 0.0, 32),
    "retrieval": ("aan", 6, 256, 4, 0.001, 0.1, 0.01, 0.001, 0.05, 64, 50000, 5000, 0.0, 20),
    "image": ("cifar", 6, 512, 64, 0.001, 0.1, 0.01, 0.001, 0.05, 50, 180000, 18000, 0.1, 200),
    "pathfinder": ("pathfinder", 6, 256, 64, 0.001, 0.1, 0.004, 0.001, 0.05, 64, 500000,
                   50000, 0.0, 200),
    "pathx": ("pathx", 6, 256, 64, 0.0001, 0.1, 0.001, 0.001, 0.05, 16, 500000, 50000, 0.0,
              50),
}  # fmt: skip
# The layer's `lr` as written: a dict (listops, imdb, aan: dt null, A and B 0.001) or a
# number. S4's training examples per epoch (src/dataloaders/lra.py and configs/dataset:
# ListOps 96,000; IMDB 25,000 with val_split 0; AAN 147,086; CIFAR 50,000 less val_split
# 0.1; Pathfinder 200,000 less val_split and test_split 0.1), batches dropping the last
# partial one (configs/loader/default.yaml: drop_last).
S4_LAYER_LR = {"listops": "dict", "text": "dict", "retrieval": "dict"}
S4_TRAIN_SIZE = {"listops": 96_000, "text": 25_000, "retrieval": 147_086, "image": 45_000,
                 "pathfinder": 160_000, "pathx": 160_000}  # fmt: skip
# What each record lists as not followed (both codes read for each; see official.py's notes).
NOT_HONOURED = {
    "s5": {
        "listops": {"activation_fn=half_glu2", "bn_momentum=0.95", "cosine_anneal=True"},
        "text": {"activation_fn=half_glu2", "bn_momentum=0.95", "p_dropout=0.1"},
        "retrieval": {"bn_momentum=0.95", "cosine_anneal=True"},
        "image": {"clip_eigs=True", "dataset=lra-cifar-classification", "bn_momentum=0.95",
                  "p_dropout=0.1", "cosine_anneal=True"},
        "pathfinder": {"p_dropout=0.05", "cosine_anneal=True"},
        "pathx": {"cosine_anneal=True"},
    },
    "s4d": {
        "listops": {"n_ssm=1", "prenorm=false"},
        "text": {"n_ssm=1", "scheduler.num_training_steps=50000"},
        "retrieval": {"n_ssm=1", "scheduler.num_training_steps=50000"},
        "image": {"n_ssm=1", "prenorm=false", "dataset.grayscale=true", "tie_dropout=true"},
        "pathfinder": set(),
        "pathx": set(),
    },
}  # fmt: skip
ALWAYS = {"s5": {"bidirectional"}, "s4d": {"bidirectional", "B_clip=2", "dt_transform=softplus"}}


def _structure(config: RunConfig):
    """The model the trainer builds for `config`, as shapes (no arrays allocated)."""
    spec = steps.task_spec(config.task)
    return eqx.filter_eval_shape(lambda k: steps.build_model(config, spec, k)[0], jax.random.key(0))


def _blocks(model) -> tuple[eqx_lru.LRUBlock, ...]:
    blocks = (model.encoder if isinstance(model, eqx_lru.LRURetrievalModel) else model).blocks
    return cast("tuple[eqx_lru.LRUBlock, ...]", blocks)  # the LRA models' blocks


def _mean_square_c(core) -> float:
    return float(np.mean(np.asarray(core.C_re) ** 2 + np.asarray(core.C_im) ** 2))


@pytest.mark.parametrize("task", list(S5_SCRIPTS))
def test_s5_follows_its_run_scripts(task):
    script, depth, h, p, j, c_init, dt_min, bsz, epochs, ssm_lr, factor, wd, drop, warm = (
        S5_SCRIPTS[task]
    )
    config = RunConfig.defaults(task, "s5")
    per_epoch = tasks.get_task(task).train_size // bsz
    assert (config.batch_size, config.steps) == (bsz, epochs * per_epoch), script
    assert config.lr == pytest.approx(factor * ssm_lr) and config.weight_decay == wd
    assert config.lr * config.lr_factor == pytest.approx(ssm_lr)  # S5's SSM learning rate
    assert int(config.warmup_fraction * config.steps) == warm * per_epoch
    assert config.dropout == drop and config.bidirectional and config.norm == "batch"
    model = _structure(config)
    assert len(_blocks(model)) == depth
    for block in _blocks(model):
        for core in (block.core, block.reverse_core):
            assert isinstance(core, eqx_lru.baselines.S5) and core.blocks == j
            assert (core.d_model, core.d_state) == (h, p)
    # Values: the trainer's core factory, called at smaller sizes than the task's (the
    # options come from the run's config): C's scale by C_init, the Delta range.
    small_h, small_p = 16, 2 * j * math.ceil(16 / j)
    core = steps.make_core(config)(small_h, small_p, key=jax.random.key(1))
    trunc = 2 / small_p  # the mean square of C~ by C_init; the others differ by >= 16x
    expected = {"trunc_standard_normal": trunc, "lecun_normal": trunc / small_h}.get(c_init, 1)
    assert _mean_square_c(core) == pytest.approx(expected, rel=0.35), c_init
    _check_range(np.asarray(core.log_step), dt_min, 0.1)


def _check_range(log_steps: np.ndarray, dt_min: float, dt_max: float) -> None:
    """Initial steps drawn log-uniformly from [dt_min, dt_max]: all inside, and (where the
    range reaches below the modules' default 0.001) some below 0.001."""
    assert np.all((log_steps >= math.log(dt_min)) & (log_steps <= math.log(dt_max)))
    if dt_min < 0.001:  # at least 16 draws: all above 0.001 has probability < 0.002
        assert log_steps.min() < math.log(0.001)


@pytest.mark.parametrize("task", list(S4_CONFIGS))
def test_s4d_follows_its_configs(task):
    name, depth, h, n, dt_min, dt_max, lr, layer_lr, wd, bsz, total, warmup, drop, epochs = (
        S4_CONFIGS[task]
    )
    config = RunConfig.defaults(task, "s4d")
    stop = epochs * (S4_TRAIN_SIZE[task] // bsz)  # where the run stops: max_epochs
    assert stop <= total, name  # ... of the scheduler's num_training_steps
    assert (config.batch_size, config.steps, config.lr, config.weight_decay) == (bsz, stop, lr, wd)
    assert config.lr * config.lr_factor == pytest.approx(layer_lr), name
    assert int(config.warmup_fraction * config.steps) == warmup
    assert config.dropout == drop and config.bidirectional and config.method is None
    model = _structure(config)
    assert len(_blocks(model)) == depth
    for block in _blocks(model):
        for core in (block.core, block.reverse_core):
            assert isinstance(core, eqx_lru.baselines.S4D) and core.mode == "convolution"
            assert core.init == "legs"
            assert (core.d_model, core.d_state) == (h, n)
    core = steps.make_core(config)(64, n, key=jax.random.key(1))  # one log_dt per channel
    _check_range(np.asarray(core.log_dt), dt_min, dt_max)


# --------------------------------------------------------------------- optimiser groups
#
# What each code's optimiser does with each parameter of the model the trainer builds, as
# (peak learning rate, weight decay), read off the optax transformation itself: with
# params p and unit gradients, Adam's first step is -lr (1 + wd p) (AdamW) or -lr (Adam),
# so a leaf with p = 0 at its first element and 1 elsewhere shows lr and wd.


def _s5_key(path: str) -> str:
    """The key S5's flax model gives the parameter at the trainer model's `path`."""
    field = path.rsplit(".", 1)[-1]
    if ".core." in path or ".reverse_core." in path:
        return {"B_re": "B", "B_im": "B", "C_re": "C", "C_im": "C"}.get(field, field)
    if ".norm." in path:
        return {"weight": "scale", "bias": "bias"}[field]  # nn.BatchNorm
    return {"weight": "kernel", "bias": "bias"}[field]  # nn.Dense (S5 one-hot encodes tokens)


def _s5_expected(task: str, path: str) -> tuple[float, float]:
    """s5/train_helpers.py create_train_state: map_nested_fn labels each leaf by its own
    key; "ssm" is Adam at ssm_lr, "regular" AdamW at lr, "none" (BandCdecay) AdamW at
    ssm_lr."""
    *_, ssm_lr, factor, wd, _, _ = S5_SCRIPTS[task]
    opt_config, dt_global = S5_OPTIMISER[task]
    ssm = ["Lambda_re", "Lambda_im", "log_step", "norm"]
    if opt_config == "standard":
        ssm.append("B")
    if dt_global:
        ssm.remove("log_step")
    none = ["B"] if opt_config == "BandCdecay" else []
    key = _s5_key(path)
    if key in ssm:
        return ssm_lr, 0.0
    if key in none:
        return ssm_lr, wd
    return factor * ssm_lr, wd


def _s4_expected(task: str, path: str, tokens: bool) -> tuple[float, float]:
    """Kernel.register / SSMKernelDiag.register_params (kernels/kernel.py, kernels/ssm.py),
    then add_optimizer_hooks (src/utils/optim_groups.py, configs/config.yaml) and
    configure_optimizers (train.py): a parameter's `_optim` overrides the global lr and
    weight decay."""
    _, _, _, _, _, _, lr, layer, wd, *_ = S4_CONFIGS[task]
    field = path.rsplit(".", 1)[-1]
    optim = {}
    in_core = ".core." in path or ".reverse_core." in path
    name = {"log_dt": "dt", "A_re_log": "A", "A_im": "A", "B_re": "B", "B_im": "B",
            "C_re": "C", "C_im": "C"}.get(field)  # fmt: skip
    if in_core and name is not None:  # a kernel parameter (D is FFTConv's own)
        rates = {"dt": None, "A": layer, "B": layer} if S4_LAYER_LR.get(task) else None
        rate = rates.get(name) if rates is not None else layer  # dict: None for others
        decay = None if name == "C" else 0.0  # register(..., wd_dict[name]) but C: None
        optim = {k: v for k, v in (("lr", rate), ("weight_decay", decay)) if v is not None}
    embedding = tokens and path.endswith("encoder.weight")
    if not in_core and (field == "bias" or ".norm." in path or embedding):
        optim = {"weight_decay": 0.0}  # biases, BatchNorm1d, nn.Embedding
    return optim.get("lr", lr), optim.get("weight_decay", wd)


def _probe(shapes):
    def leaf(s):
        if not jnp.issubdtype(s.dtype, jnp.inexact):
            return None
        p = np.ones(s.shape, s.dtype)
        p.flat[0] = 0
        return jnp.asarray(p)

    arrays = eqx.filter(shapes, lambda s: isinstance(s, jax.ShapeDtypeStruct))
    return eqx.filter(jax.tree_util.tree_map(leaf, arrays), eqx.is_inexact_array)


def _lr_and_decay(config: RunConfig) -> dict[str, tuple[float, float]]:
    """`{parameter path: (lr, weight decay)}` of the optimiser the trainer builds for the
    run (`steps.make_optimizer`, without warmup: step 0 is the peak), on the model
    the trainer builds for `config` (one block, small widths: the groups do not depend on
    them)."""
    spec = steps.task_spec(config.task)
    shapes = eqx.filter_eval_shape(
        lambda k: steps.build_model(config, spec, k)[0], jax.random.key(0)
    )
    params = _probe(shapes)
    optim = steps.make_optimizer(config.replace(warmup_fraction=0.0))[0]  # the trainer's own

    @jax.jit
    def first_step(params):
        ones = jax.tree_util.tree_map(jnp.ones_like, params)
        return optim.update(ones, optim.init(params), params)[0]

    with jax.numpy_dtype_promotion("standard"):  # optax mixes Python floats and int32 counts
        updates = first_step(params)
    found = {}
    for path, u in jax.tree_util.tree_flatten_with_path(updates)[0]:
        u = np.asarray(u).ravel()
        lr = -float(u[0])
        found[jax.tree_util.keystr(path)] = (lr, -float(u[1]) / lr - 1)
    return found


def _check_groups(found, expected):
    assert found.keys() == expected.keys()
    for path, (lr, wd) in expected.items():
        assert found[path] == pytest.approx((lr, wd), rel=1e-4, abs=1e-5), path


@pytest.mark.parametrize("task", list(S5_SCRIPTS))
def test_s5_optimiser_follows_its_run_scripts(task):
    config = RunConfig.defaults(task, "s5")
    j = S5_SCRIPTS[task][4]  # P = 2 J: J HiPPO-N blocks of size 2 (one mode each)
    found = _lr_and_decay(config.replace(depth=1, d_model=6, d_state=2 * j))
    _check_groups(found, {path: _s5_expected(task, path) for path in found})
    assert any(".norm." in path for path in found)  # S5's norms: global rate, decayed


@pytest.mark.parametrize("task", list(S4_CONFIGS))
def test_s4d_optimiser_follows_its_configs(task):
    config = RunConfig.defaults(task, "s4d")
    found = _lr_and_decay(config.replace(depth=1, d_model=6, d_state=4))
    tokens = steps.task_spec(task).vocab_size is not None
    _check_groups(found, {path: _s4_expected(task, path, tokens) for path in found})


@pytest.mark.parametrize("name", ["s5", "s4d"])
def test_what_is_not_followed_is_listed(name):
    for task, record in cores.get_core(name).official.items():
        assert set(record.not_honoured) == ALWAYS[name] | NOT_HONOURED[name][task], task


def test_every_official_record_cites_its_file_and_says_what_is_not_followed():
    for name in cores.names():
        for task, record in cores.get_core(name).official.items():
            assert task in tasks.names() and "@" in record.source and record.not_honoured


def test_official_group_names_are_the_optimisers():
    from eqx_lru._training import _optim
    from experiments.lra import official

    names = (official.DECAY, official.NO_DECAY, official.RECURRENT_DECAY)
    assert names == (_optim.DECAY, _optim.NO_DECAY, _optim.RECURRENT_DECAY)
    assert set(names) <= set(_optim.GROUPS)


def test_the_c_init_choices_are_s5s():
    from experiments.lra import config

    assert config.C_INITS == eqx_lru.baselines.C_INITS


def test_flags_override_the_official_settings_and_mismatches_are_explained():
    config = RunConfig.defaults("listops", "s5").replace(blocks=1, d_state=6)
    assert (config.blocks, config.d_state, config.c_init) == (1, 6, "lecun_normal")
    with pytest.raises(ConfigError, match=r"--d-state \(P, 6\) must be a multiple of 2 x --blocks"):
        RunConfig.defaults("listops", "s5").replace(d_state=6)


@pytest.fixture(scope="module")
def listops(tmp_path_factory):
    root = tmp_path_factory.mktemp("lra")
    synthetic.write_listops(root, (40, 12, 12), seed=2, min_length=8, max_length=30)
    return root


@pytest.mark.slow
def test_a_core_added_with_one_record_trains_through_the_trainer(listops, tmp_path):
    """A dense tanh RNN (the ablation ladder's first rung) as a trainer core: one record."""
    cores.register(
        cores.Core(
            name="tanh_rnn",
            label="tanh RNN",
            factory=lambda config, method: eqx_lru.ablation.ABLATION_CORES["rnn_tanh"],
            scan=False,
            unused_reason="is a dense tanh RNN",
        )
    )
    try:
        out = tmp_path / "run"
        argv = listops_argv(listops, out, "--core", "tanh_rnn", steps=2, eval_every=2)
        results = train.run(argv)
        assert train.main(listops_argv(listops, tmp_path / "b", "--core", "tanh_rnn",
                                       "--method", "sequential")) == 2  # fmt: skip
    finally:
        cores.unregister("tanh_rnn")
    assert (results["status"], results["step"], results["core"]) == ("finished", 2, "tanh_rnn")
    saved = json.loads((out / "config.json").read_text())
    assert saved["core"] == "tanh_rnn" and saved["method"] is None and saved["r_min"] is None
    losses = [r["loss"] for r in read_records(out / "metrics.jsonl") if r["split"] == "train"]
    assert len(losses) == 2 and np.all(np.isfinite(losses))

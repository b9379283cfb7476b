"""The recurrent cores of the LRA trainer: one `Core` record per core, in `REGISTRY`.

The mirror of the task registry (`experiments/lra/tasks.py`): a `Core` says how the core is
built from a run's `RunConfig` (`factory`), which of the core settings it uses
(`settings`, the others are recorded as None), its forms, whether it runs on the scan
(`--method`, `--sequence-parallel`), its defaults, and its authors' per-task settings
(`official`, cited data in `experiments/lra/official.py`), which a new run of the core on
that task starts from, optimiser groups included (`Core.param_groups`, given to the core,
and `optimizer_kwargs`, the arguments of the run's `eqx_lru.lru_optimizer`). `--core`
choices, `RunConfig`, `steps.build_model`, the trainer's messages and the benchmark read
this registry, so adding a core is one `register(Core(...))`:

    import eqx_lru.ablation
    from experiments.lra import cores

    cores.register(cores.Core(
        name="tanh_rnn",
        label="tanh RNN",
        factory=lambda config, method: eqx_lru.ablation.ABLATION_CORES["rnn_tanh"],
        scan=False,  # a nonlinear recurrence: no --method, no --sequence-parallel
        unused_reason="is a dense tanh RNN",
    ))

(`tests/experiments/test_lra_cores.py` registers and trains such a core.) A core that
needs a setting of its own adds a field to `RunConfig` (group `"core"`) and names it in
`settings`.
"""

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

from . import official as _official

__all__ = [
    "Core",
    "REGISTRY",
    "DEFAULT",
    "register",
    "unregister",
    "get_core",
    "names",
    "optimizer_kwargs",
]

#: The core of a run that names none (runs from before `--core`, too).
DEFAULT = "lru"


@dataclasses.dataclass(frozen=True)
class Core:
    """One recurrent core of the trainer.

    **Fields:**
    - `name`: the `--core` name.
    - `label`: how messages and plots name it (`"{form}"` is replaced by the run's form).
    - `factory`: `(config, method) -> (d_model, d_state, *, key) -> core`, the factory
      `eqx_lru.LRUBlock(core=...)` takes; `method` is the scan method the run asks for
      (None for a core without a scan).
    - `settings`: the `RunConfig` core settings (`config.CORE_KEYS`) it reads; the others
      are None in its runs, and given as flags they are refused. (`RunConfig` refuses a
      name that is not one of its core settings.)
    - `forms`: the `--form` values it has.
    - `scan`: whether it runs on `eqx_lru.linear_recurrence` (`--method`,
      `--sequence-parallel`); if not, `method` is None in its runs.
    - `defaults`: values of its `settings` where no official record gives them (a task
      without one; a run saved before the setting was recorded).
    - `official`: `{task: official.Official}`, its authors' settings for the task, which a
      new run starts from (flags override them).
    - `unused_reason`: why the settings it does not use would not be used, for the error
      (`"--core s4d {unused_reason}: --method sequential would not be used"`).
    - `check`: `config -> problem or None`, what the core cannot be built from (in flags'
      words, saying what to change); `RunConfig` raises it as its error.
    - `derive`: `settings -> {name: value}`, settings that follow from the others unless
      given as flags (the RG-LRU's state has its input's width: `d_state` is `d_model`).
    """

    name: str
    label: str
    factory: Callable[[Any, Any], Callable]
    settings: tuple[str, ...] = ()
    forms: tuple[str, ...] = ("complex",)
    scan: bool = True
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    official: Mapping[str, _official.Official] = dataclasses.field(default_factory=dict)
    unused_reason: str = "does not use them"
    check: Callable[[Any], str | None] = lambda config: None
    derive: Callable[[Mapping[str, Any]], Mapping[str, Any]] = lambda settings: {}

    def __post_init__(self):
        if not (isinstance(self.name, str) and self.name.isidentifier()):
            raise ValueError(f"Core {self.name!r}: name must be a word, as in --core NAME.")
        if not self.forms or not set(self.forms) <= {"complex", "real"}:
            raise ValueError(f"Core {self.name!r}: forms must be 'complex' and/or 'real'.")

    def settings_for(self, task: str) -> dict[str, Any]:
        """The settings a new run of this core on `task` starts from, over the task's: its
        official ones for the task, else its `defaults`."""
        record = self.official.get(task)
        return dict(self.defaults) if record is None else {**self.defaults, **record.settings}

    def param_groups(self, task: str) -> dict[str, str]:
        """The optimiser groups of single core fields in its official recipe for `task`
        (`official.Official.param_groups`; none without a record)."""
        record = self.official.get(task)
        return {} if record is None else dict(record.param_groups)

    def describe(self, form: str | None) -> str:
        """How messages name the core of a run in `form`."""
        return self.label.format(form=form)


#: The registered cores by name, in `--core` order.
REGISTRY: dict[str, Core] = {}


def register(core: Core, *, replace: bool = False) -> Core:
    """Add `core` to `REGISTRY` (`replace=True` to redefine a name); returns it."""
    if not isinstance(core, Core):
        raise TypeError(f"register expects a Core, got {type(core).__name__}.")
    if core.name in REGISTRY and not replace:
        raise ValueError(
            f"Core {core.name!r} is already registered; pass replace=True to redefine it."
        )
    REGISTRY[core.name] = core
    return core


def unregister(name: str) -> None:
    """Remove the core `name` (tests that register their own)."""
    REGISTRY.pop(name, None)


def get_core(name: str) -> Core:
    """The registered `Core` called `name`."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"Unknown core {name!r}; expected one of {names()}.") from None


def names() -> tuple[str, ...]:
    """The registered core names, in registration order."""
    return tuple(REGISTRY)


def optimizer_kwargs(config) -> dict[str, Any]:
    """The keyword arguments of `eqx_lru.lru_optimizer` for the run `config`: its numbers,
    and the optimiser options of its core's official recipe for its task (S4D: no weight
    decay on biases, norms and embeddings). The groups of single core fields travel with
    the cores (`Core.param_groups`)."""
    record = get_core(config.core).official.get(config.task)
    return dict(
        learning_rate=config.lr,
        total_steps=config.steps,
        lr_factor=config.lr_factor,
        weight_decay=config.weight_decay,
        warmup_fraction=config.warmup_fraction,
        **({} if record is None else record.optimizer),
    )


# --------------------------------------------------------------------------- the four cores
# (Each factory imports the library when a model is built: the command line, which reads
# this registry, answers `--help` and a bad flag before JAX is imported.)


def _lru(config, method) -> Callable:
    import eqx_lru

    layer = {"complex": eqx_lru.ComplexLRU, "real": eqx_lru.RealLRU}[config.form]
    return functools.partial(
        layer, r_min=config.r_min, r_max=config.r_max, max_phase=config.max_phase, method=method
    )


def _s4d(config, method) -> Callable:
    import eqx_lru.baselines

    # S4D trains as a convolution, as in its own code: its recurrence keeps L x H x N/2
    # complex states per example (199 GB of XLA temp for the ListOps step at Table 9
    # sizes, experiments/bench/RESULTS-cpu.md), the FFT convolution the same outputs.
    del method
    return functools.partial(
        eqx_lru.baselines.S4D,
        init=config.s4d_init,
        mode="convolution",
        dt_min=config.dt_min,
        dt_max=config.dt_max,
        param_groups=get_core(config.core).param_groups(config.task),
    )


def _s5(config, method) -> Callable:
    import eqx_lru.baselines

    return functools.partial(
        eqx_lru.baselines.S5,
        blocks=config.blocks,
        C_init=config.c_init,
        dt_min=config.dt_min,
        dt_max=config.dt_max,
        form=config.form,
        method=method,
        param_groups=get_core(config.core).param_groups(config.task),
    )


def _check_s5(config) -> str | None:
    per = 2 * config.blocks
    if config.d_state % per == 0:
        return None
    fits = [j for j in range(1, config.blocks) if config.d_state % (2 * j) == 0]
    return (
        f"--core s5 keeps P/2 complex modes in J blocks of HiPPO-N, so --d-state (P, "
        f"{config.d_state}) must be a multiple of 2 x --blocks (J, {config.blocks}): {per}. "
        f"Pass --blocks {fits[-1] if fits else 1} or a --d-state that is a multiple of {per}."
    )


def _rglru(config, method) -> Callable:
    import eqx_lru

    return functools.partial(
        eqx_lru.RGLRU,
        phase=True,
        form=config.form,
        r_min=config.r_min,
        r_max=config.r_max,
        max_phase=config.max_phase,
        method=method,
    )


def _check_rglru(config) -> str | None:
    if config.d_state != config.d_model:
        return (
            f"--core rglru keeps a state of its input's width (the RG-LRU has no input or "
            f"output projection), so --d-state ({config.d_state}) must equal --d-model "
            f"({config.d_model}): pass --d-state {config.d_model}."
        )
    if config.d_model % 2:
        return (
            f"--core rglru pairs the features into complex modes, so --d-model must be even; "
            f"got {config.d_model}."
        )
    if config.r_min is not None and config.r_min <= 0:
        return (
            f"--core rglru needs --r-min > 0 (its decay sigmoid(Lambda) lies strictly inside "
            f"(0, 1)); got {config.r_min}. Griffin's ring is --r-min 0.9 --r-max 0.999."
        )
    return None


register(
    Core(
        name=DEFAULT,
        label="{form} LRU",
        factory=_lru,
        settings=("r_min", "r_max", "max_phase"),
        forms=("complex", "real"),
        unused_reason="is the LRU (its settings: the ring --r-min/--r-max/--max-phase)",
    )
)
register(
    Core(
        name="s4d",
        label="S4D",
        factory=_s4d,
        settings=("s4d_init", "dt_min", "dt_max"),
        scan=False,
        defaults=dict(s4d_init="lin", dt_min=0.001, dt_max=0.1),
        official=_official.S4D,
        unused_reason="trains as an FFT convolution (as in S4D's own code; its recurrence "
        "needs N/2 times the LRU's memory), which has no scan method and no real form",
    )
)
register(
    Core(
        name="s5",
        label="S5",
        factory=_s5,
        settings=("blocks", "c_init", "dt_min", "dt_max"),
        forms=("complex", "real"),
        defaults=dict(blocks=1, c_init="trunc_standard_normal", dt_min=0.001, dt_max=0.1),
        official=_official.S5,
        unused_reason="is S5 (its settings: --blocks, --c-init, --dt-min, --dt-max)",
        check=_check_s5,
    )
)
register(
    Core(
        name="rglru",
        label="{form} RG-LRU",
        factory=_rglru,
        settings=("r_min", "r_max", "max_phase"),
        forms=("complex", "real"),
        # Griffin's ring and recurrentgemma's phases (no LRA record of its authors).
        defaults=dict(r_min=0.9, r_max=0.999, max_phase=0.1 * math.pi),
        unused_reason="is the RG-LRU with rotating modes (eqx_lru.RGLRU(phase=True); its "
        "settings: the ring --r-min/--r-max and --max-phase)",
        check=_check_rglru,
        derive=lambda settings: {"d_state": settings["d_model"]},
    )
)

r"""`ABLATION_CORES`: the ladder's rungs by name, as core factories for `eqx_lru.LRUBlock`."""

import functools
import math
from collections.abc import Callable

from jaxtyping import PRNGKeyArray

from .._cores._init import Size
from .._cores._lru import ComplexLRU
from ._core import AbstractAblationCore
from ._dense import DenseRNN, LinearDenseRNN
from ._diagonal import DiagonalRNN
from ._parameterisation import ParameterisationName

AblationCore = AbstractAblationCore | ComplexLRU
Factory = Callable[..., AblationCore]

# The ring of the "+ Ring Init" rung and of the LRU rung when none is given: Table 8's
# PathFinder ring, which (like Retrieval's) is the same with and without γ, so the last step
# of the ladder changes γ alone.
DEFAULT_RING = dict(r_min=0.9, r_max=0.999, max_phase=2 * math.pi)
_UNIT_DISK = dict(r_min=0.0, r_max=1.0, max_phase=2 * math.pi)


def _dense_rung(name: str, build: Factory, doc: str) -> Factory:
    """A rung's factory for a dense core: a Glorot $A$ has a fixed spectrum (uniform on the
    unit disk, Thm. 3.1), so ring options are refused with an error that says so."""

    def make_core(
        d_model: Size,
        d_state: Size,
        *,
        key: PRNGKeyArray,
        r_min: float | None = None,
        r_max: float | None = None,
        max_phase: float | None = None,
        **options,
    ) -> AblationCore:
        ring = dict(r_min=r_min, r_max=r_max, max_phase=max_phase)
        given = [option for option, value in ring.items() if value is not None]
        if given:
            raise ValueError(
                f"The {name!r} rung has a Glorot-initialised dense A, whose spectrum is fixed "
                f"(uniform on the unit disk, Thm. 3.1), so it takes no ring options; got "
                f"{', '.join(given)}. Pass ring options only to the diagonal rungs."
            )
        return build(d_model, d_state, key=key, **options)

    make_core.__doc__ = doc
    return make_core


def _ring_rung(build: Factory, ring: dict, doc: str) -> Factory:
    """A rung's factory for a core initialised on a ring: `ring` gives the defaults."""

    def make_core(
        d_model: Size,
        d_state: Size,
        *,
        key: PRNGKeyArray,
        r_min: float = ring["r_min"],
        r_max: float = ring["r_max"],
        max_phase: float = ring["max_phase"],
        **options,
    ) -> AblationCore:
        return build(
            d_model, d_state, r_min=r_min, r_max=r_max, max_phase=max_phase, key=key, **options
        )

    make_core.__doc__ = doc
    return make_core


def _diagonal(parameterisation: ParameterisationName) -> Callable[..., DiagonalRNN]:
    return functools.partial(DiagonalRNN, parameterisation=parameterisation)


ABLATION_CORES: dict[str, Factory] = {
    "rnn_tanh": _dense_rung(
        "rnn_tanh", functools.partial(DenseRNN, nonlinearity="tanh"),
        'Rung "rnn_tanh": `DenseRNN(nonlinearity="tanh")` (Table 1, RNN-Tanh).',
    ),
    "rnn_relu": _dense_rung(
        "rnn_relu", functools.partial(DenseRNN, nonlinearity="relu"),
        'Rung "rnn_relu": `DenseRNN(nonlinearity="relu")` (Table 1, RNN-ReLU).',
    ),
    "linear_dense": _dense_rung(
        "linear_dense", LinearDenseRNN,
        'Rung "linear_dense": `LinearDenseRNN` (Table 1, RNN-Lin; Table 2, Dense A).',
    ),
    "diag_realimag": _ring_rung(
        _diagonal("real_imag"), _UNIT_DISK,
        'Rung "diag_realimag": `DiagonalRNN(parameterisation="real_imag")`, unit-disk init '
        "(Table 2, Λ Real + Im).",
    ),
    "diag_exp": _ring_rung(
        _diagonal("exp"), _UNIT_DISK,
        'Rung "diag_exp": `DiagonalRNN(parameterisation="exp")`, unit-disk init '
        "(Table 2, Λ Exp).",
    ),
    "diag_stable_exp": _ring_rung(
        _diagonal("stable_exp"), _UNIT_DISK,
        'Rung "diag_stable_exp": `DiagonalRNN(parameterisation="stable_exp")`, unit-disk '
        "init (Table 2, Λ Stable Exp).",
    ),
    "diag_stable_exp_ring": _ring_rung(
        _diagonal("stable_exp"), DEFAULT_RING,
        'Rung "diag_stable_exp_ring": `DiagonalRNN(parameterisation="stable_exp")` on a ring '
        "near the unit circle (Table 2, + Ring Init; tuned rings in Table 8), default "
        "`DEFAULT_RING`.",
    ),
    "lru": _ring_rung(
        ComplexLRU, DEFAULT_RING,
        'Rung "lru": `eqx_lru.ComplexLRU` (+ γ normalisation, §3.4; Tables 3, 8), default '
        "`DEFAULT_RING` like the previous rung.",
    ),
}  # fmt: skip
"""The ladder in the paper's order: name → `make_core(d_model, d_state, *, key, r_min=,
r_max=, max_phase=, **options)`. Extra `options` (`dtype`, `method`) go to the core. Use as a
block's core, e.g. `eqx_lru.LRUBlock(d_model, d_state, core=functools.partial(
ABLATION_CORES["diag_stable_exp_ring"], r_min=0.99), key=key)`. The dense rungs take no
ring options (a ValueError says so if given)."""

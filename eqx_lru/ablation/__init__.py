r"""The paper's ablation ladder as recurrent cores (§3; Tables 1, 2, 7, 8).

Each rung changes one thing on the way from a vanilla RNN to the LRU:

- `"rnn_tanh"`, `"rnn_relu"`: `DenseRNN`, $x_k = \sigma(A x_{k-1} + B u_k)$
    (eq. 1, §3.1, Table 1);
- `"linear_dense"`: `LinearDenseRNN`, $x_k = A x_{k-1} + B u_k$ (§3.1, Table 1), on the
    shared scan with `DenseAlgebra`; `to_diagonal` gives its exact diagonal form (§3.2.1);
- `"diag_realimag"`, `"diag_exp"`, `"diag_stable_exp"`: `DiagonalRNN`, complex diagonal,
    with $\lambda$ parameterised as `RealImag` ($a + ib$, §3.2), `Exp`
    ($e^{-\nu + i\theta}$, §3.3) or `StableExp` ($\exp(-e^{\nu_{\log}} + ie^{\theta_{\log}})$,
    §3.3), initialised on the unit disk (Table 2);
- `"diag_stable_exp_ring"`: the same initialised on a ring near the unit circle
    (`DEFAULT_RING`; Tables 2, 8);
- `"lru"`: `eqx_lru.ComplexLRU`, + $\gamma$ normalisation (§3.4, Tables 3, 8).

Every core is an `eqx_lru.AbstractRecurrentCore` (through `AbstractAblationCore`): the
call with `reverse`, `initial_state` and `segment_ids`, `run`, `init_state`, `step`, and
its `recurrent_fields` for `eqx_lru.lru_optimizer`, so a block takes any of them.
`ABLATION_CORES` maps the names above to factories
`make_core(d_model, d_state, *, key, r_min=, r_max=, max_phase=)`.
"""

from ._core import AbstractAblationCore as AbstractAblationCore
from ._dense import AbstractDenseRNN as AbstractDenseRNN
from ._dense import DenseRNN as DenseRNN
from ._dense import LinearDenseRNN as LinearDenseRNN
from ._diagonal import DiagonalRNN as DiagonalRNN
from ._parameterisation import AbstractParameterisation as AbstractParameterisation
from ._parameterisation import Exp as Exp
from ._parameterisation import RealImag as RealImag
from ._parameterisation import StableExp as StableExp
from ._registry import ABLATION_CORES as ABLATION_CORES
from ._registry import DEFAULT_RING as DEFAULT_RING
from ._to_diagonal import to_diagonal as to_diagonal

__all__ = [
    "ABLATION_CORES",
    "DEFAULT_RING",
    "AbstractAblationCore",
    "AbstractDenseRNN",
    "AbstractParameterisation",
    "DenseRNN",
    "DiagonalRNN",
    "Exp",
    "LinearDenseRNN",
    "RealImag",
    "StableExp",
    "to_diagonal",
]

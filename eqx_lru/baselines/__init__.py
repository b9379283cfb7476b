"""Baseline recurrent cores on the shared scan: the paper's deep-SSM baselines S4D and S5
(Table 3, Table 4) and the SIMO linear dynamical systems of LDStack (NeurIPS 2020).

Every core here is an `eqx_lru.AbstractRecurrentCore` (`run`, `init_state`, `step`,
`recurrent_fields`, the call with `reverse`, `initial_state` and `segment_ids`). `S4D` and
`S5` (both `AbstractDiagonalSSM`s) plug into blocks as
`core=functools.partial(eqx_lru.baselines.S5, blocks=4)`, and have both forms (`form=`,
`to_form`, `eqx_lru.to_real`). The LDS cores take a scalar input sequence (see `_lds`).
"""

from ._lds import AbstractSIMOLDS as AbstractSIMOLDS
from ._lds import StandardSIMOLDS as StandardSIMOLDS
from ._lds import UnitSIMOLDS as UnitSIMOLDS
from ._lds import companion_form as companion_form
from ._lds import vandermonde as vandermonde
from ._s4d import S4D as S4D
from ._s4d import s4d_eigenvalues as s4d_eigenvalues
from ._s4d import s4d_input as s4d_input
from ._s5 import C_INITS as C_INITS
from ._s5 import S5 as S5
from ._s5 import hippo_n as hippo_n
from ._s5 import hippo_n_modes as hippo_n_modes
from ._s5 import s5_eigenbasis as s5_eigenbasis
from ._ssm import AbstractDiagonalSSM as AbstractDiagonalSSM

__all__ = [
    "C_INITS",
    "S4D",
    "S5",
    "AbstractDiagonalSSM",
    "AbstractSIMOLDS",
    "StandardSIMOLDS",
    "UnitSIMOLDS",
    "companion_form",
    "hippo_n",
    "hippo_n_modes",
    "s4d_eigenvalues",
    "s4d_input",
    "s5_eigenbasis",
    "vandermonde",
]

"""Names of eqx_lru 0.1 that moved: kept for one version, then removed.

`eqx_lru.DiagonalRealImag`, `DiagonalExp`, `DiagonalStableExp` were three classes; they are
now `eqx_lru.ablation.DiagonalRNN(..., parameterisation=...)`, and `AbstractDiagonalRNN` is
`DiagonalRNN`.
"""

import warnings
from collections.abc import Callable

from .._init import Size
from ._diagonal import DiagonalRNN

AbstractDiagonalRNN = DiagonalRNN


def _moved(name: str, parameterisation: str) -> Callable[..., DiagonalRNN]:
    new = f'eqx_lru.ablation.DiagonalRNN(..., parameterisation="{parameterisation}")'

    def make(d_model: Size, d_state: Size, **options) -> DiagonalRNN:
        warnings.warn(f"`{name}` is deprecated: use `{new}`.", DeprecationWarning, 2)
        return DiagonalRNN(d_model, d_state, parameterisation=parameterisation, **options)

    make.__name__ = make.__qualname__ = name
    make.__doc__ = f"Deprecated: `{new}`."
    return make


DiagonalRealImag = _moved("DiagonalRealImag", "real_imag")
DiagonalExp = _moved("DiagonalExp", "exp")
DiagonalStableExp = _moved("DiagonalStableExp", "stable_exp")

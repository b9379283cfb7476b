r"""`AbstractAblationCore`: what every core of the ladder shares."""

import abc

import equinox as eqx
from jaxtyping import Array, Complex, Float

from .._cores._core import AbstractStatesCore


class AbstractAblationCore(AbstractStatesCore):
    r"""A recurrent core of the ladder, $y_k = \text{readout}(x_k) + D \odot u_k$: an
    `eqx_lru.AbstractRecurrentCore` (so `eqx_lru.LRUBlock(core=...)` takes any of them),
    with the skip $D \odot u$ of the LRU on every rung.

    Subclasses provide `D`, `recurrent_fields` (the top-level fields that get the
    optimiser's recurrent group, §D.2; see `eqx_lru.lru_param_labels`), `d_state`,
    `eigenvalues` and the contract's `init_state`, `step` and `run`.
    """

    D: eqx.AbstractVar[Float[Array, " d_model"]]

    @property
    def d_model(self) -> int:
        return self.D.shape[-1]

    @property
    @abc.abstractmethod
    def d_state(self) -> int:
        """The size of the recurrent state."""

    @abc.abstractmethod
    def eigenvalues(self) -> Complex[Array, " d_state"]:
        r"""The eigenvalues of the (linear part of the) recurrence."""

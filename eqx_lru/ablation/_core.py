r"""`AbstractAblationCore`: the contract every core of the ladder follows."""

import abc

import equinox as eqx
from beartype import beartype
from jaxtyping import Array, Complex, Float, PRNGKeyArray, jaxtyped

from ._checks import check_input


class AbstractAblationCore(eqx.Module):
    r"""A recurrent core of the ladder, $y_k = \text{readout}(x_k) + D \odot u_k$, called
    on one sequence as `core(u, *, reverse=False)` (the contract `eqx_lru.LRUBlock(core=...)`
    takes), with the skip $D \odot u$ of the LRU on every rung.

    Subclasses provide `D`, `recurrent_fields` (the top-level fields that get the
    optimiser's recurrent group, §D.2; see `eqx_lru.lru_param_labels`), `d_state`,
    `eigenvalues` and `_readout`.
    """

    D: eqx.AbstractVar[Float[Array, " d_model"]]
    recurrent_fields: eqx.AbstractClassVar[tuple[str, ...]]

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

    @abc.abstractmethod
    def _readout(self, u: Array, reverse: bool) -> Float[Array, "length d_model"]:
        r"""The output without the skip term $D \odot u$."""

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        u: Float[Array, "length d_model"],
        *,
        reverse: bool = False,
        key: PRNGKeyArray | None = None,
    ) -> Float[Array, "length d_model"]:
        r"""**Arguments:** `u` of shape `(length, d_model)` (one sequence; batch with
        `jax.vmap`); `reverse=True` runs the recurrence from the last step ($x_k$ depends on
        $u_k, \dots, u_{L-1}$); `key` is ignored.

        **Returns:** $y$, shape `(length, d_model)`.
        """
        del key
        check_input(u, self.d_model)
        return self._readout(u, reverse) + self.D * u

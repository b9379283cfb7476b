r"""A core of independent modes (`AbstractModalCore`): what the LRU, its real form and the
diagonal ablation cores share. Each mode $j$ carries its own state under a diagonal (or
2×2 rotation-scaling) transition, $x_k = \lambda \odot x_{k-1} + \gamma \odot (B u_k)$,
$y_k = \operatorname{Re}(C x_k) + D \odot u_k$; the subclasses say what $\lambda$ and
$\gamma$ are and how the state is stored.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Float, Inexact, Integer, PRNGKeyArray, PyTree, jaxtyped

from .._checks import (
    Dim,
    check_not_complex,
    check_segment_ids,
    check_sequence,
    check_state,
    check_token,
)
from .._scan._algebra import AbstractAlgebra
from .._scan._methods import AbstractScanMethod
from .._scan._recurrence import recurrence
from .._scan._storage import AbstractStorage
from .._surface import checks_first
from . import _projection as projection
from ._core import AbstractStatesCore, check_takes_dt
from ._dt import check_dt

# The checks that run before the type checker of the public methods (one line per mistake,
# with the messages of the checks inside; see `_surface`).


def _is_array(x: object) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _check_sequence_call(
    core: "AbstractModalCore", u, *, initial_state=None, segment_ids=None, dt=None, **_
) -> None:
    check_takes_dt(core, dt=dt)
    check_not_complex(u)
    if _is_array(u):
        check_sequence(jnp.asarray(u), core.d_model)
        check_segment_ids(segment_ids, u.shape[0])
    if _is_array(initial_state):
        core._check_state(jnp.asarray(initial_state))


def _check_step_call(core: "AbstractModalCore", state, u_t, *, dt=None) -> None:
    check_takes_dt(core, dt=dt)
    if _is_array(u_t):
        check_token(jnp.asarray(u_t), core.d_model)
    if _is_array(state):
        core._check_state(jnp.asarray(state))


class AbstractModalCore(AbstractStatesCore):
    r"""A diagonal linear core with real projections and planar states (the LRU forms and
    `eqx_lru.ablation.DiagonalRNN`):

    $$x_k = \lambda \odot x_{k-1} + \gamma \odot (B u_k), \qquad
    y_k = \operatorname{Re}(C x_k) + D \odot u_k,$$

    $B = B_\text{re} + i B_\text{im}$, $C = C_\text{re} + i C_\text{im}$. The scan reads
    the input projection and writes the states as planar real pairs
    $[\operatorname{Re} x; \operatorname{Im} x]$ `(length, 2, d_state)`, and the output
    projection reads them, so no pass over the sequence converts layouts
    (`eqx_lru._cores._projection`). Subclasses give $\lambda$ in their algebra (`_transition`),
    $\gamma$, the storage and the state layout; `run`, `step` and `__call__` are shared.
    """

    B_re: eqx.AbstractVar[Float[Array, "d_state d_model"]]
    B_im: eqx.AbstractVar[Float[Array, "d_state d_model"]]
    C_re: eqx.AbstractVar[Float[Array, "d_model d_state"]]
    C_im: eqx.AbstractVar[Float[Array, "d_model d_state"]]
    D: eqx.AbstractVar[Float[Array, " d_model"]]
    method: eqx.AbstractVar[AbstractScanMethod]
    precision: eqx.AbstractVar[jax.lax.Precision | None]
    algebra: eqx.AbstractClassVar[AbstractAlgebra]
    #: The state layout, for error messages.
    _state_layout: eqx.AbstractClassVar[str]

    @property
    def d_model(self) -> int:
        return self.D.shape[-1]

    @property
    def d_state(self) -> int:
        return self.B_re.shape[0]

    @abc.abstractmethod
    def init_state(self) -> Inexact[Array, "d_state ..."]:
        """The zero state $x_{-1}$ (complex `(N,)` or real `(N, 2)`)."""

    @abc.abstractmethod
    def _transition(self) -> Inexact[Array, "..."]:
        r"""$\lambda$ as one transition of the algebra (shared by every step)."""

    def _transition_over(self, dt: Float[Array, "*length"]) -> Inexact[Array, "..."]:
        r"""$\lambda^{\Delta t}$ for checked steps `dt` (see `eqx_lru._cores._dt`): one
        transition per step for `dt` of shape `(length,)`, one shared for a scalar. Cores that
        `takes_dt` implement it."""
        raise NotImplementedError

    @abc.abstractmethod
    def _gamma(self) -> Float[Array, " d_state"]:
        r"""The input normalisation $\gamma$ (ones for cores without it)."""

    @abc.abstractmethod
    def _storage(self) -> AbstractStorage:
        """How the scan stores the sequence of states: as the planar real pairs `(length, 2,
        d_state)` that the projections write and read (see `eqx_lru._scan._storage`)."""

    @abc.abstractmethod
    def _to_algebra(self, state: Inexact[Array, "..."]) -> Array:
        """A state in the public layout (`init_state()`'s) → the algebra's layout."""

    @abc.abstractmethod
    def _from_algebra(self, h: Array) -> Inexact[Array, "..."]:
        """A state in the algebra's layout → the public layout."""

    def _projection_options(self) -> dict:
        return dict(precision=self.precision)

    def _state_hint(self, state: Array) -> str:
        del state
        return ""

    def _check_state(self, state: Array) -> None:
        core = f"{type(self).__name__} ({self._state_layout})"
        check_state(state, self.init_state(), core, self._state_hint(state))

    def _state_pairs(
        self,
        u: Array,
        initial_state: ArrayLike | None,
        reverse: bool,
        segment_ids: ArrayLike | None = None,
        dt: ArrayLike | None = None,
    ) -> Float[Array, "length 2 d_state"]:
        r"""All states as planar real pairs $[\operatorname{Re} x; \operatorname{Im} x]$."""
        check_sequence(u, self.d_model)
        if initial_state is not None:
            initial_state = jnp.asarray(initial_state)
            self._check_state(initial_state)
            initial_state = self._to_algebra(initial_state)
        dt = self._check_steps(dt, u.shape[0])
        drive = projection.project_in(
            u, self.B_re, self.B_im, self._gamma(), **self._projection_options()
        )
        return recurrence(
            self._transition_at(dt),
            self._weigh(drive, dt),
            algebra=self.algebra,
            storage=self._storage(),
            initial_state=initial_state,
            reverse=reverse,
            method=self.method,
            segment_ids=check_segment_ids(segment_ids, u.shape[0]),
        )

    @checks_first(_check_sequence_call)
    @jaxtyped(typechecker=beartype)
    def hidden_states(
        self,
        u: Float[ArrayLike, "length d_model"],
        *,
        initial_state: Inexact[ArrayLike, "d_state ..."] | None = None,
        reverse: bool = False,
        dt: ArrayLike | None = None,
    ) -> Inexact[Array, "length d_state ..."]:
        """All hidden states $x_0, \\dots, x_{L-1}$, in the form's state layout.

        Same arguments as `__call__`; for analysis and plots. With a `compute_dtype`, the
        states as stored (rounded to it), in the parameters' dtype.
        """
        pairs = self._state_pairs(jnp.asarray(u), initial_state, reverse, dt=dt)
        return self._from_algebra(self._storage().load(pairs))

    def _states(
        self, u, initial_state, reverse, segment_ids, dt=None
    ) -> Float[Array, "length 2 d_state"]:
        if initial_state is not None:  # a nested list is a state too, as for the call
            initial_state = jnp.asarray(initial_state)
        return self._state_pairs(u, initial_state, reverse, segment_ids, dt)

    def _check_steps(self, dt: ArrayLike | None, length: Dim | None) -> Float[Array, "*n"] | None:
        """`dt` checked against `length` positions (`None`: one step), or `None`."""
        return None if dt is None else check_dt(dt, length, self.B_re.dtype)

    def _transition_at(self, dt: Float[Array, "*length"] | None) -> Inexact[Array, "..."]:
        r"""$\lambda$ (`dt` `None`), else $\lambda^{\Delta t}$ for checked steps `dt`."""
        return self._transition() if dt is None else self._transition_over(dt)

    def _weigh(
        self, drive: Float[Array, "*length 2 d_state"], dt: Float[Array, "*length"] | None
    ) -> Float[Array, "*length 2 d_state"]:
        r"""The projected inputs $\gamma B u_k$ (planar pairs) as the recurrence adds them
        for checked steps `dt`: themselves here; a core with a `discretization` weighs
        them by the step."""
        del dt
        return drive

    def _outputs(self, states, u, initial_state, reverse, segment_ids) -> Array:
        del initial_state, reverse, segment_ids
        y = projection.project_out(states, self.C_re, self.C_im, **self._projection_options())
        return y + self.D * u

    def _final(self, state: Float[Array, "2 d_state"]) -> Inexact[Array, "d_state ..."]:
        final = self._from_algebra(self._storage().load(state[None])[0])
        return final.astype(self.init_state().dtype)

    @checks_first(_check_sequence_call)
    @jaxtyped(typechecker=beartype)
    def run(
        self,
        u: Float[ArrayLike, "length d_model"],
        *,
        initial_state: PyTree[ArrayLike] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
    ) -> tuple[Float[Array, "length d_model"], Inexact[Array, "d_state ..."]]:
        """`(y, final_state)`: see `eqx_lru.AbstractRecurrentCore.run`, the arguments as
        in `__call__` (checked first, in one line each)."""
        return super().run(
            u, initial_state=initial_state, reverse=reverse, length=length,
            segment_ids=segment_ids, dt=dt,
        )  # fmt: skip

    @checks_first(_check_sequence_call)
    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        u: Float[ArrayLike, "length d_model"],
        *,
        initial_state: PyTree[ArrayLike] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
    ) -> Float[Array, "length d_model"]:
        r"""Run the layer over one sequence.

        **Arguments:**

        - `u`: the input sequence, shape `(length, d_model)`, `length >= 1` (a JAX or NumPy
            array). One example: batch with `jax.vmap`.
        - `initial_state`: start from this state (as returned by `init_state`/`step`)
            instead of zero, e.g. to continue a sequence. `RealLRU`: shape `(d_state, 2)`,
            `[Re x, Im x]` per mode — not `(2, d_state)`.
        - `reverse`: run the recurrence from the last step to the first
            ($x_k = \lambda x_{k+1} + \gamma B u_k$), for bidirectional models.
        - `length`: the number of valid leading positions (it selects `run`'s final state;
            the outputs are those of every position). `None`: all.
        - `segment_ids`: packed sequences: integers of shape `(length,)`, a new segment
            where the value changes; no state crosses a segment boundary.
        - `dt`: irregular time steps (`ComplexLRU`, `RealLRU`): positive floats of shape
            `(length,)`, the time since the position processed before (with `reverse`, the
            gap to the next position), or one scalar for every position. Position $k$ then
            computes $x_k = \lambda^{\Delta t_k} x_{k-1} + w_k \gamma B u_k$, $w_k = 1$
            (`discretization="impulse"`) or $(\lambda^{\Delta t_k} - 1)/(\lambda - 1)$
            (`"zoh"`); `None` (default) is $\Delta t \equiv 1$. The first position
            processed reads its step too: its gap since `initial_state`, which from the
            zero state only `"zoh"` feels (through $w$). A core without time steps (the
            ablation's `DiagonalRNN`) refuses it.
        - `key`: ignored; accepted for compatibility with other Equinox layers.

        Every argument but `u` by name: a slip (`layer(u, dt)`) is a `TypeError` naming
        the method and its keywords.

        **Returns:** $y$, shape `(length, d_model)`.
        """
        return super().__call__(
            u, initial_state=initial_state, reverse=reverse, length=length,
            segment_ids=segment_ids, dt=dt, key=key,
        )  # fmt: skip

    @checks_first(_check_step_call)
    @jaxtyped(typechecker=beartype)
    def step(
        self,
        state: Inexact[ArrayLike, "d_state ..."],
        u_t: Float[ArrayLike, " d_model"],
        *,
        dt: ArrayLike | None = None,
    ) -> tuple[Inexact[Array, "d_state ..."], Float[Array, " d_model"]]:
        r"""One token in RNN mode: $x_t = \lambda x_{t-1} + \gamma B u_t$,
        $y_t = \operatorname{Re}(C x_t) + D u_t$.

        `state`: as `init_state()` (`RealLRU`: `(d_state, 2)`, `[Re x, Im x]` per mode).
        `dt`: this position's time step, a positive scalar ($\lambda^{\Delta t}$ replaces
        $\lambda$ and the input is weighed per `discretization`, as in `__call__`; cores
        that `takes_dt`); `None` is $\Delta t = 1$.

        **Returns:** `(new_state, y_t)`. Repeating `step` over a sequence from
        `init_state()` equals the parallel `__call__`.
        """
        state, u_t = jnp.asarray(state), jnp.asarray(u_t)
        check_token(u_t, self.d_model)
        self._check_state(state)
        dt = self._check_steps(dt, None)
        transition = self._transition_at(dt)
        storage, options = self._storage(), self._projection_options()
        pair = projection.project_in(u_t, self.B_re, self.B_im, self._gamma(), **options)
        drive = storage.load(self._weigh(pair, dt)[None])[0]
        h = self.algebra.apply(transition, self._to_algebra(state)) + drive
        pair = storage.store(h[None])[0]
        y_t = projection.project_out(pair, self.C_re, self.C_im, **options)
        return self._from_algebra(h), y_t + self.D * u_t

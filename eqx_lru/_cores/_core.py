r"""`AbstractRecurrentCore`: the contract every recurrent core of the library follows.

A core maps one input sequence $u_0, \dots, u_{L-1}$ to one output sequence through a
recurrent state $x$,

$$x_k = f(x_{k-1}, u_k), \qquad y_k = g(x_k, u_k), \qquad x_{-1} = \text{init_state}(),$$

and can be run three ways that agree: in parallel over a whole sequence (`__call__`, `run`),
one token at a time (`step`), or over chunks that carry the state from one to the next
(`run` with `initial_state=` and `length=`). `LRUBlock`, `LRUModel` and the optimiser's
parameter labels (`lru_param_labels`) rely on this contract only: a new core is a subclass,
with no other change anywhere.
"""

import abc
import dataclasses
import inspect
from typing import ClassVar, Literal, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Integer, PRNGKeyArray, PyTree, Shaped, jaxtyped

from .._checks import check_length, check_not_complex, check_segment_ids
from .._scan import _sharding as sharding
from .._surface import checks_first


def check_takes_dt(core: "AbstractRecurrentCore", *args, dt: object = None, **kwargs) -> None:
    """A `TypeError` naming `core` when it is given time steps (`dt` not `None`) and has
    no notion of elapsed time (`takes_dt` is `False`): a time step it would ignore. The
    check of every core method's `checks_first`, and of a block before any work."""
    del args, kwargs
    if dt is not None and not core.takes_dt:
        raise TypeError(
            f"{type(core).__name__} takes no `dt` (time steps): it has no notion of elapsed "
            "time. Cores that take it: ComplexLRU, RealLRU, RGLRU, baselines.S5; or drop `dt`."
        )


def check_sequence_args(
    core: "AbstractRecurrentCore", u, *, segment_ids=None, dt=None, **_
) -> None:
    """The checks of a core's sequence call (`run`, `__call__`) before its type check:
    `dt` taken, a real input, `segment_ids` one integer per position (each a one-line
    error naming the argument)."""
    check_takes_dt(core, dt=dt)
    check_not_complex(u)
    shape = getattr(u, "shape", None)
    if segment_ids is not None and shape:
        check_segment_ids(segment_ids, shape[0])


class AbstractRecurrentCore(eqx.Module):
    r"""A recurrent core: `ComplexLRU`, `RealLRU`, the ablation cores, `baselines.S4D`,
    `baselines.S5`, the LDS cores, or your own.

    Subclasses implement `init_state`, `step` and `run`, and declare `recurrent_fields`;
    `__call__` is `run` without its final state. A core with two forms (complex states, or
    the same recurrence in real arithmetic) also implements `to_form`, which
    `eqx_lru.to_real` and `eqx_lru.to_complex` use.

    **Class attributes:**

    - `recurrent_fields`: the names of the top-level fields that get the optimiser's
        recurrent group (smaller learning rate, no weight decay; paper §D.2; see
        `eqx_lru.lru_param_labels`). `()` puts every field in the ordinary group.
    - `causal`: `True` (default) when the output at position $k$ of a forward run depends on
        $u_0, \dots, u_k$ only (and of a reverse run on $u_k, \dots, u_{L-1}$), and zero
        input keeps a zero state. Blocks rely on it for padding and streaming.
    - `takes_dt`: `True` when `run`, `__call__` and `step` read `dt=`, the time step of
        each position (irregular sampling; see the concepts page on time steps); default
        `False`. Every core's methods name `dt` (callers pass `dt=dt` by name, `None` when
        there is none); a core without time steps refuses any other value, by name
        (`check_takes_dt`).

    **Keywords.** Every core's public methods spell out their arguments (no `**kwargs`):
    `__call__(u, *, initial_state=None, reverse=False, length=None, segment_ids=None,
    dt=None, key=None)`, `run(u, *, initial_state=None, reverse=False, length=None,
    segment_ids=None, dt=None)`, `step(state, u_t, *, dt=None)`. A subclass decorates its
    own with `checks_first(check_takes_dt)` (`eqx_lru._surface`), so a keyword given by
    position, an unknown one or a PRNG key where an array goes gets one line naming the
    core's method and the argument.
    """

    recurrent_fields: eqx.AbstractClassVar[tuple[str, ...]]
    causal: ClassVar[bool] = True
    takes_dt: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        """A `TypeError` at the definition of a core whose own `run` or `step` does not
        name `dt` (the contract before 0.6): blocks and models pass `dt=` by name to every
        core (`None` when there is none)."""
        super().__init_subclass__(**kwargs)
        for name in ("run", "step"):
            method = cls.__dict__.get(name)
            if method is None or getattr(method, "__isabstractmethod__", False):
                continue
            parameters = inspect.signature(method).parameters
            if "dt" not in parameters:
                raise TypeError(
                    f"{cls.__name__}.{name} takes no `dt` keyword: every core's `run` and "
                    "`step` name it, since blocks and models pass `dt=` by name (`None` "
                    f"when there is none). Add `*, dt=None` to {cls.__name__}.{name} "
                    "(`del dt` if the core has no time steps, `takes_dt = False`)."
                )

    @abc.abstractmethod
    def init_state(self) -> PyTree[Array]:
        """The state before the first position, $x_{-1}$ (zeros)."""

    @abc.abstractmethod
    def step(
        self, state: PyTree[ArrayLike], u_t: ArrayLike, *, dt: ArrayLike | None = None
    ) -> tuple[PyTree[Array], Array]:
        r"""One position in RNN mode: `(x_{t-1}, u_t) -> (x_t, y_t)`; `dt` this position's
        time step (a positive scalar; a core that `takes_dt`, else `None`). Repeated from
        `init_state()` over a sequence, equal to `__call__`."""

    @abc.abstractmethod
    def run(
        self,
        u: ArrayLike,
        *,
        initial_state: PyTree[ArrayLike] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
    ) -> tuple[Array, PyTree[Array]]:
        r"""Run over one sequence in parallel, from `initial_state` (default
        `init_state()`).

        **Arguments:**

        - `u`: one input sequence, leading length axis.
        - `initial_state`: the state before the first position processed (as returned by
            `init_state`, `step` or `run`).
        - `reverse`: run from the last position to the first.
        - `length`: the number of valid leading positions; the returned state is the one
            after position `length - 1` (forward). `None`: all positions are valid.
        - `segment_ids`: integers per position; a new segment starts where the value
            changes, and no state crosses a segment boundary (in either direction). The
            initial state enters the first segment processed.
        - `dt`: the time step of each position, `(length,)`, or one scalar for all (a core
            that `takes_dt`; see the concepts page on time steps). `None`: none (a core
            without time steps refuses any other value).

        **Returns:** `(y, final_state)`: the outputs, and the state after the last valid
        position processed (forward: position `length - 1`; reverse: position 0).
        """

    def to_form(self, form: Literal["complex", "real"]) -> "AbstractRecurrentCore":
        """This core in `form`: `"complex"` (complex states) or `"real"` (the same
        recurrence as 2×2 rotation-scaling blocks, real arithmetic only), with the same
        parameters and the same function; itself if it is in `form` already.

        The default refuses (`TypeError`): a core with one form only. `ComplexLRU`,
        `RealLRU`, `baselines.S4D` and `baselines.S5` have both.
        """
        raise TypeError(
            f"{type(self).__name__} has no {form!r} form to convert to: `to_real`/"
            "`to_complex` convert cores with both forms (ComplexLRU/RealLRU, baselines.S4D, "
            f"baselines.S5). Take {type(self).__name__} out of the converted tree, or "
            "implement `to_form` on it."
        )

    @checks_first(check_takes_dt)
    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        u: Shaped[ArrayLike, "length ..."],
        *,
        initial_state: PyTree[ArrayLike] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
    ) -> Shaped[Array, "length ..."]:
        """The outputs of `run` (`key` is ignored, as in other Equinox layers; `dt` only
        for a core that `takes_dt`)."""
        del key
        y, _ = self.run(
            u, initial_state=initial_state, reverse=reverse, length=length,
            segment_ids=segment_ids, dt=dt,
        )  # fmt: skip
        return y


class AbstractStatesCore(AbstractRecurrentCore):
    """A core whose `run` computes all its states in one pass (a scan), then its outputs
    from them: the library's cores. Subclasses implement `_states`, `_outputs` and, if
    their scan stores states in another layout than `init_state()`'s, `_final`."""

    @abc.abstractmethod
    def _states(
        self,
        u: Array,
        initial_state: ArrayLike | None,
        reverse: bool,
        segment_ids,
        dt: ArrayLike | None = None,
    ) -> PyTree[Array]:
        """The state after every position (leading length axis), with the argument checks
        (`segment_ids` is checked already; `dt` is `None` for a core without time
        steps)."""

    @abc.abstractmethod
    def _outputs(
        self, states: PyTree[Array], u: Array, initial_state, reverse: bool, segment_ids
    ) -> Array:
        """The outputs, from `_states`' result and the inputs."""

    def _final(self, state: PyTree[Array]) -> PyTree[Array]:
        """One stored state (of `_states`' result) in `init_state()`'s layout."""
        return state

    @checks_first(check_sequence_args)
    @jaxtyped(typechecker=beartype)
    def run(
        self,
        u: Shaped[ArrayLike, "length ..."],
        *,
        initial_state: PyTree[ArrayLike] | None = None,
        reverse: bool = False,
        length: Integer[ArrayLike, ""] | None = None,
        segment_ids: Integer[ArrayLike, " length"] | None = None,
        dt: ArrayLike | None = None,
    ) -> tuple[Shaped[Array, "length ..."], PyTree[Array]]:
        """See `AbstractRecurrentCore.run`: `(y, final_state)`; feed `final_state` back as
        `initial_state=` to continue the sequence in the next chunk (chunked runs equal one
        run, and `step` token by token). `dt`: passed to `_states` (`None` for a core
        without time steps, which refuses any other value)."""
        u = jnp.asarray(u)
        segment_ids = check_segment_ids(segment_ids, u.shape[0] if u.ndim else 0)
        if initial_state is not None:  # nested lists are states too: arrays from here on
            initial_state = jax.tree.map(jnp.asarray, initial_state)
        states = self._states(u, initial_state, reverse, segment_ids, dt=dt)
        y = self._outputs(states, u, initial_state, reverse, segment_ids)
        axis = sharding.sequence_axis(self)
        if axis is None:
            final = final_state(states, reverse=reverse, length=length)
        else:  # a sequence split across devices: the last state of the whole sequence
            final = sharding.final_state(states, reverse=reverse, length=length, axis=axis)
        return y, self._final(final)


def final_state(
    states: PyTree[Array], *, reverse: bool, length: Integer[ArrayLike, ""] | None
) -> PyTree[Array]:
    """The state `run` returns, from all states (a pytree of arrays with a leading length
    axis): after position `length - 1` (forward; the last position if `length` is `None`)
    or after position 0 (reverse)."""

    def pick(x: Array) -> Array:
        if reverse:
            return x[0]
        if length is None:
            return x[-1]
        index = check_length(length, x.shape[0]) - 1
        return jax.lax.dynamic_index_in_dim(x, index, 0, keepdims=False)

    return jax.tree_util.tree_map(pick, states)


_Module = TypeVar("_Module", bound=eqx.Module)


def rebuild(cls: type[_Module], module: eqx.Module, **changes) -> _Module:
    """A `cls` holding `module`'s fields (shared, not copied), with `changes` replacing
    some: a conversion between forms, or a change of a static field, without re-running
    `__init__`."""
    new = object.__new__(cls)
    for field in dataclasses.fields(module):
        value = changes.pop(field.name, getattr(module, field.name))
        object.__setattr__(new, field.name, value)
    if changes:
        raise TypeError(f"{type(module).__name__} has no fields {sorted(changes)}.")
    return new

"""The recurrent-core knob of a block, `core=`: `"complex"`, `"real"` or a factory
`make_core(d_model, d_state, *, key)`, and the core it builds."""

import inspect
from collections.abc import Callable
from typing import Literal

from jaxtyping import PRNGKeyArray

from ._core import AbstractRecurrentCore
from ._lru import ComplexLRU, RealLRU

#: `make_core(d_model, d_state, *, key)` (and `dtype=` when the block has one) returning an
#: `eqx_lru.AbstractRecurrentCore`.
CoreFactory = Callable[..., AbstractRecurrentCore]
Core = Literal["complex", "real"] | CoreFactory

_SHORTCUTS: dict[str, CoreFactory] = {"complex": ComplexLRU, "real": RealLRU}


def core_factory(core: Core) -> CoreFactory:
    """The factory `make_core(d_model, d_state, *, key)` that `core=` stands for:
    `"complex"`/`"real"` give `ComplexLRU`/`RealLRU`; a callable is used as is."""
    if isinstance(core, str):
        if core not in _SHORTCUTS:
            raise ValueError(
                "`core` must be 'complex', 'real' or a callable "
                f"`make_core(d_model, d_state, *, key)`; got {core!r}."
            )
        return _SHORTCUTS[core]
    if not callable(core):
        raise TypeError(
            "`core` must be 'complex', 'real' or a callable `make_core(d_model, d_state, *, "
            f"key)` returning an eqx_lru.AbstractRecurrentCore; got {type(core).__name__}."
        )
    return core


def _takes_dtype(make_core: CoreFactory) -> bool:
    """Whether `make_core` accepts a `dtype=` keyword (`True` when its signature is
    unknown)."""
    try:
        parameters = inspect.signature(make_core).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "dtype" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def build_core(
    core: Core, d_model: int, d_state: int, *, dtype=None, key: PRNGKeyArray
) -> AbstractRecurrentCore:
    """The core that `core=` builds: `make_core(d_model, d_state, key=key)`, with
    `dtype=dtype` when `dtype` is not `None`; a `TypeError` unless it is an
    `eqx_lru.AbstractRecurrentCore`."""
    factory = core_factory(core)
    options = {}
    if dtype is not None:
        if not _takes_dtype(factory):
            raise TypeError(
                f"`core` ({getattr(factory, '__name__', factory)!r}) takes no `dtype=`, but "
                f"the block's `dtype` is {dtype!r}: the block passes its dtype to the core. "
                "Accept `dtype=` in the factory, or leave the block's `dtype` as None."
            )
        options["dtype"] = dtype
    built = factory(d_model, d_state, key=key, **options)
    if not isinstance(built, AbstractRecurrentCore):
        raise TypeError(
            f"`core` must build an eqx_lru.AbstractRecurrentCore; got "
            f"{type(built).__name__}. Subclass eqx_lru.AbstractRecurrentCore (implement "
            "`init_state`, `step`, `run` and declare `recurrent_fields`) — see its docstring."
        )
    return built

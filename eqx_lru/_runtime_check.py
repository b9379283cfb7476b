r"""Run-time checks of input values that survive `jax.export`.

`eqx.error_if` raises from inside a compiled program through a host callback, which
`jax.export` cannot serialise (and, with symbolic shapes, cannot lower). Every run-time
check of the library (valid lengths, token ids, the number of packed sequences) goes
through `runtime_check` instead: a primitive that is `eqx.error_if(x, pred, message)`
everywhere — eagerly, under `jax.jit`, `eqx.filter_jit`, `jax.vmap`, `jax.grad` — except
when a program is lowered for export (`jax.export.export`, and so `eqx_lru.export`),
where it is the identity $x \mapsto x$: the exported program does not perform the check.
`skipped_checks(jaxpr)` names the checks a traced program holds, which is what its export
does not perform (the export manifest records them).
"""

from typing import Any

import equinox as eqx
from jax.extend.core import Primitive, jaxprs_in_params
from jax.interpreters import ad, batching, mlir

_check_p = Primitive("eqx_lru_runtime_check")


def runtime_check(x: Any, pred: Any, message: str, *, check: str) -> Any:
    """`x`, with an error carrying `message` at run time if any element of `pred` holds
    (as `eqx.error_if`); skipped in an exported program. `check` is the check's short name
    (`"length"`, `"token_ids"`, ...), as export manifests list it."""
    return _check_p.bind(x, pred, check=check, message=message)


def _impl(x, pred, *, check, message):
    del check
    return eqx.error_if(x, pred, message)


def _abstract_eval(x, pred, *, check, message):
    del pred, check, message
    return x


def _lowering(ctx, x, pred, *, check, message):
    del check
    parameters = getattr(ctx.module_context, "lowering_parameters", None)
    if getattr(parameters, "for_export", False):
        return [x]  # an exported program cannot raise: the check is skipped
    lowered = mlir.lower_fun(lambda x, pred: eqx.error_if(x, pred, message), False)
    return lowered(ctx, x, pred)


def _jvp(primals, tangents, **params):
    # The check passes `x` through unchanged: so does its derivative.
    return _check_p.bind(*primals, **params), tangents[0]


def _batch(args, dims, **params):
    # `eqx.error_if` raises if `pred` holds anywhere, batch included: no axis to move.
    return _check_p.bind(*args, **params), dims[0]


_check_p.def_impl(_impl)
_check_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(_check_p, _lowering)
ad.primitive_jvps[_check_p] = _jvp
batching.primitive_batchers[_check_p] = _batch


def is_runtime_check(eqn) -> bool:
    """Whether the jaxpr equation `eqn` is a `runtime_check` (its output is its first
    input; the predicate is needed only by the check)."""
    return eqn.primitive is _check_p


def skipped_checks(closed: Any) -> list[dict[str, str]]:
    """The run-time checks in the (closed) jaxpr `closed`, sub-jaxprs included, each once:
    `[{"check": name, "message": message}, ...]` in order of appearance. These are the
    checks a `jax.export` of the program does not perform."""
    found: dict[tuple[str, str], None] = {}

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if is_runtime_check(eqn):
                found[(eqn.params["check"], eqn.params["message"])] = None
            for sub in jaxprs_in_params(eqn.params):
                walk(sub)

    walk(getattr(closed, "jaxpr", closed))
    return [{"check": name, "message": message} for name, message in found]

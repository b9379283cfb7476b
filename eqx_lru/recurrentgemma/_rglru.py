"""recurrentgemma's `RGLRU` layer parameters ↔ `eqx_lru.RGLRU`."""

import functools
from typing import Any, Literal

import equinox as eqx
import jax

from .._cores._rglru import RGLRU, DocumentStart
from .._scan._recurrence import ScanMethod
from ._params import Params, unwrap
from ._params import leaf as _leaf


def rglru_from_recurrentgemma(
    params: Params,
    *,
    document_start: DocumentStart = "unnormalised",
    form: Literal["complex", "real"] | None = None,
    method: ScanMethod = "auto",
    precision: Any = None,
) -> RGLRU:
    r"""An `eqx_lru.RGLRU` holding the parameters of recurrentgemma's `RGLRU` layer.

    **Arguments:**

    - `params`: its parameters, `{"a_param", "input_gate": {"w", "b"}, "a_gate": {"w",
        "b"}}`, with `"a_imag_param"` for its complex variant (`only_real=False`, here
        `phase=True`). The heads, widths and dtype come from the shapes. Every leaf must
        be an array of floating-point numbers of one dtype and of its layout's shape; a
        bad one is refused by its path.
    - `document_start`: default `"unnormalised"`, recurrentgemma's semantics (see
        `eqx_lru.RGLRU`): the core computes what recurrentgemma's layer computes.
        `"normalised"` builds eqx_lru's: the same parameters, another function at each
        document's first position.
    - `form`, `method`, `precision`: as `eqx_lru.RGLRU`.

    **Returns:** the core: $\Lambda = -$`a_param`, $\theta$ = `a_imag_param`, the gates'
    `w`, `b` as `W_x`, `b_x` (input gate) and `W_a`, `b_a`, $c = 8$.
    """
    params = unwrap(params, "rglru_from_recurrentgemma")
    return rglru_from_params(
        params, document_start=document_start, form=form, method=method, precision=precision
    )


def rglru_from_params(params: Params, *, prefix: str = "", **options) -> RGLRU:
    """`rglru_from_recurrentgemma` of a checked tree, its paths named after `prefix`."""
    leaf = functools.partial(_leaf, prefix=prefix)
    w_x = leaf(params, "input_gate/w")
    if w_x.ndim != 3:
        raise ValueError(
            f"recurrentgemma's `{prefix}input_gate/w` must have shape (heads, width/heads, "
            f"modes/heads); got {w_x.shape}."
        )
    heads, block_in, block_out = w_x.shape
    phase = "a_imag_param" in params
    d_model = heads * block_in
    make = functools.partial(
        RGLRU, d_model, heads=heads, phase=phase, dtype=w_x.dtype, key=jax.random.PRNGKey(0),
        **options,
    )  # fmt: skip
    if heads * block_out != (d_model // 2 if phase else d_model):
        raise ValueError(
            f"recurrentgemma's `{prefix}input_gate/w` {w_x.shape} maps a width of {d_model} to "
            f"{heads * block_out} modes; its {'complex' if phase else 'real'} RG-LRU has "
            f"{d_model // 2 if phase else d_model}."
        )
    skeleton = eqx.filter_eval_shape(make)
    modes = heads * block_out
    gates = ("W_a", "b_a", "W_x", "b_x")
    new = [-leaf(params, "a_param", (modes,))]
    new += [leaf(params, f"{gate}/{name}", getattr(skeleton, field).shape) for gate, name, field
            in (("a_gate", "w", "W_a"), ("a_gate", "b", "b_a"), ("input_gate", "w", "W_x"),
                ("input_gate", "b", "b_x"))]  # fmt: skip
    fields = ("Lambda",) + gates
    if phase:
        new.append(leaf(params, "a_imag_param", (modes,)))
        fields += ("theta",)
    return eqx.tree_at(lambda m: [getattr(m, f) for f in fields], skeleton, new)


def check_exact(core: RGLRU, exact: bool, what: str) -> None:
    """Refuse (naming the option and the fix) a core whose function recurrentgemma's
    layer cannot compute: a gate exponent other than 8, signed eigenvalues, and (unless
    not `exact`) eqx_lru's normalised document starts."""
    if core.c != 8.0:
        raise ValueError(
            f"{what}: recurrentgemma's RG-LRU fixes the gate's exponent scale at 8; this core "
            f"has c={core.c}, which has no counterpart there."
        )
    if core.eigenvalues != "positive":
        raise ValueError(
            f"{what}: recurrentgemma's RG-LRU has positive transitions only; this core has "
            f"eigenvalues={core.eigenvalues!r}, which has no counterpart there."
        )
    if exact and core.document_start != "unnormalised":
        raise ValueError(
            f"{what}: this core has document_start={core.document_start!r}, but "
            "recurrentgemma always takes a document's first input unnormalised, so the "
            "converted layer would compute another function there; convert a core built "
            "with document_start='unnormalised', or pass exact=False to export the "
            "parameters as they are."
        )


def rglru_to_recurrentgemma(core: RGLRU, *, exact: bool = True) -> dict[str, Any]:
    """recurrentgemma's `RGLRU` parameters for an `eqx_lru.RGLRU`: the inverse of
    `rglru_from_recurrentgemma`, every leaf exact, and recurrentgemma's layer on them
    computes this core's function.

    Refused (a `ValueError` naming the option): $c \\ne 8$ and `eigenvalues="signed"`
    (no counterpart in recurrentgemma), and `document_start="normalised"` (recurrentgemma
    always applies its unnormalised document starts) unless `exact=False`, which exports
    the parameters of such a core as they are (the functions then differ at each
    document's first position). `discretization` and `method` concern only eqx_lru's
    calls (`dt`, the scan), and `phase=True` is recurrentgemma's `only_real=False`.
    """
    if not isinstance(core, RGLRU):
        raise TypeError(f"expected an eqx_lru.RGLRU; got {type(core).__name__}.")
    check_exact(core, exact, "rglru_to_recurrentgemma")
    out: dict[str, Any] = {
        "a_param": -core.Lambda,
        "input_gate": {"w": core.W_x, "b": core.b_x},
        "a_gate": {"w": core.W_a, "b": core.b_a},
    }
    if core.theta is not None:
        out["a_imag_param"] = core.theta
    return out

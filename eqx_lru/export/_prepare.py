r"""A model made ready for export: batch norm folded, the sequential scan, a form."""

import copy

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._blocks._norm import MaskedBatchNorm
from .._cores._core import AbstractRecurrentCore
from .._scan._methods import AbstractScanMethod, Sequential
from ._program import ExportError


class _Affine(eqx.Module):
    """Batch norm in inference mode, folded: `x * scale + shift` per channel, one
    position at a time (a block calls a norm that is not a `MaskedBatchNorm` per
    position, as it does `eqx.nn.LayerNorm`)."""

    scale: Float[Array, " channels"]
    shift: Float[Array, " channels"]

    def __call__(self, x: Float[Array, " channels"], *, key=None) -> Float[Array, " channels"]:
        del key
        return x * self.scale + self.shift


def _is_core(x) -> bool:
    return isinstance(x, AbstractRecurrentCore)


def _sequential(core):
    """`core` scanning with `Sequential()` (`lax.scan`), the one method that takes a
    symbolic length, and running its recurrence where it would compute by FFT convolution
    (`baselines.S4D`'s `mode="convolution"`, whose FFT needs a concrete length): the same
    function. Other fields are shared, not copied."""
    method = getattr(core, "method", None)
    changes = {}
    if isinstance(method, AbstractScanMethod) and not isinstance(method, Sequential):
        changes["method"] = Sequential()
    if getattr(core, "mode", None) == "convolution":
        changes["mode"] = "recurrence"
    if not changes:
        return core
    core = copy.copy(core)
    for name, value in changes.items():
        object.__setattr__(core, name, value)  # static fields of a frozen module
    return core


def is_complex(core) -> bool:
    """Whether `core` keeps a complex state (its `init_state()`)."""
    leaves = jax.tree_util.tree_leaves(jax.eval_shape(core.init_state))
    return any(jnp.issubdtype(leaf.dtype, jnp.complexfloating) for leaf in leaves)


def cores(model) -> list:
    """The recurrent cores of `model`, in tree order."""
    return [x for x in jax.tree_util.tree_leaves(model, is_leaf=_is_core) if _is_core(x)]


def _real(core):
    """`core` in its real form; an `ExportError` saying why where it has none."""
    if not is_complex(core):
        return core
    try:
        real = core.to_form("real")
    except (AttributeError, NotImplementedError, TypeError, ValueError) as e:
        why = str(e) or type(e).__name__
        raise ExportError(
            f"this format computes in real arithmetic only, and {type(core).__name__} keeps "
            f"a complex state with no real form ({why}). Export it as StableHLO, which "
            "keeps complex numbers."
        ) from None
    if is_complex(real):
        raise ExportError(
            f"this format computes in real arithmetic only, and {type(core).__name__} keeps "
            "a complex state even in its real form. Export it as StableHLO."
        )
    return real


def prepare(model, state: eqx.nn.State, *, real: bool = False):
    r"""`model` for export: every `MaskedBatchNorm` folded into an affine map with its
    running statistics ($s = w / \sqrt{\sigma^2 + \varepsilon}$, $t = \beta - \mu s$, in
    float64), every core scanning sequentially (`lax.scan`: the same function, and the
    one method that takes a symbolic length; S4D's convolution mode runs its recurrence),
    and with `real` every core in its real form (an `ExportError` naming a core that has
    none)."""

    if not isinstance(state, eqx.nn.State):
        raise TypeError(
            "`state` must be the eqx.nn.State made with the model (eqx.nn.make_with_state); "
            f"got {type(state).__name__}."
        )

    def fold(node):
        if not isinstance(node, MaskedBatchNorm):
            return node
        mean, var = (np.asarray(v, np.float64) for v in node.running_stats(state))
        weight, bias = np.asarray(node.weight, np.float64), np.asarray(node.bias, np.float64)
        scale = weight / np.sqrt(var + node.eps)
        dtype = node.weight.dtype
        return _Affine(jnp.asarray(scale, dtype), jnp.asarray(bias - mean * scale, dtype))

    is_norm = lambda x: isinstance(x, MaskedBatchNorm)  # noqa: E731
    model = jax.tree_util.tree_map(fold, model, is_leaf=is_norm)
    convert = (lambda c: _sequential(_real(c))) if real else _sequential
    return jax.tree_util.tree_map(
        lambda x: convert(x) if _is_core(x) else x, model, is_leaf=_is_core
    )

r"""The LRU's input and output projections, in real arithmetic, as plain functions of arrays.

With $B = B_\text{re} + i B_\text{im}$ and $C = C_\text{re} + i C_\text{im}$:

$$[\operatorname{Re}; \operatorname{Im}](\gamma \odot B u) =
[\gamma B_\text{re}; \gamma B_\text{im}]\, u, \qquad
\operatorname{Re}(C x) = [C_\text{re}, -C_\text{im}]
\begin{bmatrix}\operatorname{Re} x\\ \operatorname{Im} x\end{bmatrix},$$

each one real matmul on stacked weights. States travel as *planar pairs*
`(length, 2, d_state)` (`[Re x; Im x]` per position), the layout the scan reads and writes.
Shared by `ComplexLRU`, `RealLRU` and the ablation cores (`γ` all ones for cores without it).

`precision` is passed to every matmul (`jax.lax.Precision`, a string such as `"highest"`,
or `None` for JAX's default — TF32 on NVIDIA GPUs). `compute_dtype` (e.g. `"bfloat16"`)
rounds the operands to it and accumulates in the weights' dtype
(`preferred_element_type`); `None` computes in the weights' dtype.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

#: What `precision=` accepts: see `jax.lax.dot_general`.
Precision = jax.lax.Precision | str | None


def check_precision(precision) -> jax.lax.Precision | None:
    """`precision` as a `jax.lax.Precision` (or `None`); a `ValueError` naming it if invalid."""
    if precision is None or isinstance(precision, jax.lax.Precision):
        return precision
    try:
        return jax.lax.Precision(precision)
    except (ValueError, TypeError) as e:
        names = ", ".join(repr(p.name.lower()) for p in jax.lax.Precision)
        raise ValueError(
            f"`precision` must be None (JAX's default), a `jax.lax.Precision` or one of "
            f"{names} (also 'float32', 'tensorfloat32', 'bfloat16'); got {precision!r}."
        ) from e


def _matmul(x: Array, weight: Array, precision, compute_dtype) -> Array:
    """`x @ weight.T` with `precision`; with a `compute_dtype`, on operands of that dtype,
    accumulated in `weight`'s dtype."""
    if compute_dtype is None:
        return jnp.matmul(x, weight.T, precision=precision)
    return jnp.matmul(
        x.astype(compute_dtype),
        weight.astype(compute_dtype).T,
        precision=precision,
        preferred_element_type=weight.dtype,
    )


def input_weight(
    B_re: Float[Array, "d_state d_model"],
    B_im: Float[Array, "d_state d_model"],
    gamma: Float[Array, " d_state"],
) -> Float[Array, "2*d_state d_model"]:
    r"""$[\gamma B_\text{re}; \gamma B_\text{im}]$: row $n$ gives
    $\operatorname{Re}(\gamma B u)_n$, row $N + n$ the imaginary part."""
    gamma = gamma[:, None]
    return jnp.concatenate([gamma * B_re, gamma * B_im], axis=0)


def output_weight(
    C_re: Float[Array, "d_model d_state"], C_im: Float[Array, "d_model d_state"]
) -> Float[Array, "d_model 2*d_state"]:
    r"""$[C_\text{re}, -C_\text{im}]$, so $\operatorname{Re}(Cx)$ is one contraction with
    the flattened planar pairs."""
    return jnp.concatenate([C_re, -C_im], axis=1)


def project_in(
    u: Float[Array, "*length d_model"],
    B_re: Float[Array, "d_state d_model"],
    B_im: Float[Array, "d_state d_model"],
    gamma: Float[Array, " d_state"],
    *,
    precision: Precision = None,
    compute_dtype=None,
) -> Float[Array, "*length 2 d_state"]:
    r"""$\gamma \odot (B u_k)$ for every position, as planar pairs, in one real matmul.

    `u` is a sequence `(length, d_model)` or one token `(d_model,)`. For one token without
    a `compute_dtype`: matrix-vector products with the parameters themselves — building the
    stacked weights would cost more than the products, every token (XLA does not hoist it
    out of a `lax.scan` over `step`). With a `compute_dtype` a token gets the sequence's
    weights and rounding, so `step` matches the parallel call.

    **Returns:** shape `(length, 2, d_state)` (or `(2, d_state)`), in `compute_dtype` if
    given (the dtype the scan stores), else in the weights' dtype.
    """
    if u.ndim == 1 and compute_dtype is None:
        re = jnp.matmul(B_re, u, precision=precision)
        im = jnp.matmul(B_im, u, precision=precision)
        return jnp.stack([gamma * re, gamma * im])
    flat = u.reshape(-1, u.shape[-1])
    drive = _matmul(flat, input_weight(B_re, B_im, gamma), precision, compute_dtype)
    drive = drive.reshape(*u.shape[:-1], 2, B_re.shape[0])
    return drive if compute_dtype is None else drive.astype(compute_dtype)


def project_out(
    pairs: Float[Array, "*length 2 d_state"],
    C_re: Float[Array, "d_model d_state"],
    C_im: Float[Array, "d_model d_state"],
    *,
    precision: Precision = None,
    compute_dtype=None,
) -> Float[Array, "*length d_model"]:
    r"""$\operatorname{Re}(C x_k)$ for every position, from planar pairs, in one real
    matmul; for one token `(2, d_state)` without a `compute_dtype`, two matrix-vector
    products (see `project_in`).

    **Returns:** shape `(length, d_model)` (or `(d_model,)`), in the weights' dtype.
    """
    if pairs.ndim == 2 and compute_dtype is None:
        re = jnp.matmul(C_re, pairs[0], precision=precision)
        return re - jnp.matmul(C_im, pairs[1], precision=precision)
    flat = pairs.reshape(-1, 2 * pairs.shape[-1])
    out = _matmul(flat, output_weight(C_re, C_im), precision, compute_dtype)
    return out.reshape(*pairs.shape[:-2], C_re.shape[0])

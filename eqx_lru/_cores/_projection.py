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
(`preferred_element_type`); so do the gradients, which round the output's cotangent to it
(`_low_matmul`); `None` computes in the weights' dtype.
"""

import functools

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
    accumulated in `weight`'s dtype (see `_low_matmul`)."""
    if compute_dtype is None:
        return jnp.matmul(x, weight.T, precision=precision)
    return _low_matmul(x, weight, precision, jnp.dtype(compute_dtype).name, x.dtype.name)


def _low_dot(a: Array, b: Array, precision, compute_dtype: str, acc_dtype) -> Array:
    return jnp.matmul(
        a.astype(compute_dtype),
        b.astype(compute_dtype),
        precision=precision,
        preferred_element_type=acc_dtype,
    )


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _low_matmul(x: Array, weight: Array, precision, compute_dtype: str, x_dtype: str) -> Array:
    r"""`x @ weight.T` on `compute_dtype` operands, accumulated in `weight`'s dtype.

    The VJP keeps the forward's arithmetic: with $c$ the rounding to `compute_dtype`,
    $\bar x = c(\bar y)\, c(W)$ and $\bar W = c(\bar y)^\top c(x)$, accumulated in
    `weight`'s dtype. JAX's own transpose of the mixed product multiplies the
    full-precision cotangent by the low-precision operand, which XLA on the CPU does by
    converting that sequence-long operand to float32 (one more copy of the sequence in
    memory and one more pass over it, per product).
    """
    del x_dtype
    return _low_dot(x, weight.T, precision, compute_dtype, weight.dtype)


def _low_matmul_fwd(x, weight, precision, compute_dtype, x_dtype):
    out = _low_matmul(x, weight, precision, compute_dtype, x_dtype)
    return out, (x.astype(compute_dtype), weight.astype(compute_dtype))


def _low_matmul_bwd(precision, compute_dtype, x_dtype, residuals, g):
    x_low, weight_low = residuals
    g_low = g.astype(compute_dtype)
    acc = g.dtype  # the output's dtype: the weights'
    ct_x = _low_dot(g_low, weight_low, precision, compute_dtype, acc).astype(x_dtype)
    ct_weight = _low_dot(g_low.T, x_low, precision, compute_dtype, acc)
    return ct_x, ct_weight


_low_matmul.defvjp(_low_matmul_fwd, _low_matmul_bwd)


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

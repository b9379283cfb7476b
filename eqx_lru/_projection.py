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
    u: Float[Array, "length d_model"],
    B_re: Float[Array, "d_state d_model"],
    B_im: Float[Array, "d_state d_model"],
    gamma: Float[Array, " d_state"],
    *,
    precision: Precision = None,
    compute_dtype=None,
) -> Float[Array, "length 2 d_state"]:
    r"""$\gamma \odot (B u_k)$ for every position, as planar pairs, in one real matmul.

    **Returns:** shape `(length, 2, d_state)`, in `compute_dtype` if given (the dtype the
    scan stores), else in the weights' dtype.
    """
    d_state = B_re.shape[0]
    weight = input_weight(B_re, B_im, gamma)
    drive = _matmul(u, weight, precision, compute_dtype)
    drive = drive.reshape(u.shape[0], 2, d_state)
    return drive if compute_dtype is None else drive.astype(compute_dtype)


def project_out(
    pairs: Float[Array, "length 2 d_state"],
    C_re: Float[Array, "d_model d_state"],
    C_im: Float[Array, "d_model d_state"],
    *,
    precision: Precision = None,
    compute_dtype=None,
) -> Float[Array, "length d_model"]:
    r"""$\operatorname{Re}(C x_k)$ for every position, from planar pairs, in one real matmul.

    **Returns:** shape `(length, d_model)`, in the weights' dtype.
    """
    length, _, d_state = pairs.shape
    flat = pairs.reshape(length, 2 * d_state)
    return _matmul(flat, output_weight(C_re, C_im), precision, compute_dtype)


def step_in(
    u_t: Float[Array, " d_model"],
    B_re: Float[Array, "d_state d_model"],
    B_im: Float[Array, "d_state d_model"],
    gamma: Float[Array, " d_state"],
    *,
    precision: Precision = None,
    compute_dtype=None,
) -> Float[Array, "2 d_state"]:
    r"""`project_in` for one token: $\gamma \odot (B u_t)$ as a pair `(2, d_state)`.

    Without a `compute_dtype`: matrix-vector products with the parameters themselves —
    building the stacked weights would cost more than the products, every token (XLA does
    not hoist it out of a `lax.scan` over `step`). With one: the parallel call's weights and
    rounding, so `step` matches it.
    """
    if compute_dtype is not None:
        return project_in(
            u_t[None], B_re, B_im, gamma, precision=precision, compute_dtype=compute_dtype
        )[0]
    re = jnp.matmul(B_re, u_t, precision=precision)
    im = jnp.matmul(B_im, u_t, precision=precision)
    return jnp.stack([gamma * re, gamma * im])


def step_out(
    pair: Float[Array, "2 d_state"],
    C_re: Float[Array, "d_model d_state"],
    C_im: Float[Array, "d_model d_state"],
    *,
    precision: Precision = None,
    compute_dtype=None,
) -> Float[Array, " d_model"]:
    r"""`project_out` for one token: $\operatorname{Re}(C x_t)$ from a pair `(2, d_state)`."""
    if compute_dtype is not None:
        return project_out(
            pair[None], C_re, C_im, precision=precision, compute_dtype=compute_dtype
        )[0]
    re = jnp.matmul(C_re, pair[0], precision=precision)
    return re - jnp.matmul(C_im, pair[1], precision=precision)

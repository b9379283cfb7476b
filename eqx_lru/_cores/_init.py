r"""Initialisation of the LRU parameters, shared by the complex and the real form.

All functions are pure functions of a PRNG key, so the same key gives the same
parameters in both forms.
"""

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .._checks import Size, check_fits, check_key, check_ring, check_size, float_dtype


def ring_init(
    d_state: Size,
    *,
    r_min: float = 0.0,
    r_max: float = 1.0,
    max_phase: float = 2 * math.pi,
    dtype=None,
    key: PRNGKeyArray,
) -> tuple[Float[Array, " d_state"], Float[Array, " d_state"]]:
    r"""Eigenvalues uniform on the ring $r_\min \le |\lambda| \le r_\max$ (Lemma 3.2).

    With $u_1, u_2 \sim U[0, 1]$: $\nu = -\tfrac12 \log(u_1 (r_\max^2 - r_\min^2) + r_\min^2)$
    and $\theta = \text{max_phase} \cdot u_2$, so $|\lambda|^2 = e^{-2\nu}$ is uniform on
    $[r_\min^2, r_\max^2]$ and $\arg\lambda$ uniform on $[0, \text{max_phase}]$.

    **Returns:** `(nu_log, theta_log)` $= (\log\nu, \log\theta)$, so that
    $\lambda = \exp(-e^{\nu_{\log}} + i e^{\theta_{\log}})$.
    """
    d_state = check_size("d_state", d_state, "the LRU's complex modes N")
    check_key(key)
    dtype = float_dtype(dtype)
    check_ring(r_min, r_max, max_phase, dtype)
    check_fits(f"ring_init(d_state={d_state})", dtype, 4 * d_state)
    # Sample in (0, 1): u = 0 would put λ at the origin (nu_log = +inf) or the phase at
    # exactly zero (theta_log = -inf), where the log-parameters have no gradient.
    tiny = jnp.finfo(dtype).tiny
    u1_key, u2_key = jax.random.split(key)
    u1 = jax.random.uniform(u1_key, (d_state,), dtype, minval=tiny)
    u2 = jax.random.uniform(u2_key, (d_state,), dtype, minval=tiny)
    modulus_sq = u1 * (r_max**2 - r_min**2) + r_min**2
    # A modulus of exactly one has nu = 0 and nu_log = -inf; clip to the largest
    # modulus below one the dtype can hold; one whose square underflows (`check_ring`
    # keeps r_max² representable, but u1 r_max² may not be) is clipped to the smallest.
    modulus_sq = jnp.clip(modulus_sq, tiny, 1 - jnp.finfo(dtype).eps)
    nu = -0.5 * jnp.log(modulus_sq)
    return jnp.log(nu), jnp.log(jnp.maximum(max_phase * u2, tiny))


def gamma_log_init(nu_log: Float[Array, " d_state"]) -> Float[Array, " d_state"]:
    r"""$\log\gamma = \log\sqrt{1 - |\lambda|^2}$ (eq. 7), with $|\lambda| = e^{-e^{\nu_{\log}}}$.

    Computed as $\tfrac12\log(-\operatorname{expm1}(-2e^{\nu_{\log}}))$, accurate also
    for $|\lambda| \to 1$.
    """
    return 0.5 * jnp.log(-jnp.expm1(-2 * jnp.exp(nu_log)))


def projection_init(
    d_model: Size, d_state: Size, *, dtype=None, key: PRNGKeyArray
) -> dict[str, Array]:
    r"""Glorot-style projections of App. A.

    $B_\text{re}, B_\text{im} \sim \mathcal N(0, \tfrac1{2H})$ of shape `(d_state, d_model)`,
    $C_\text{re}, C_\text{im} \sim \mathcal N(0, \tfrac1N)$ of shape `(d_model, d_state)`,
    $D \sim \mathcal N(0, 1)$ of shape `(d_model,)`.
    """
    d_model = check_size("d_model", d_model)
    d_state = check_size("d_state", d_state, "the LRU's complex modes N")
    check_key(key)
    dtype = float_dtype(dtype)
    owner = f"projection_init(d_model={d_model}, d_state={d_state})"
    check_fits(owner, dtype, 4 * d_model * d_state + d_model)
    b_re, b_im, c_re, c_im, d = jax.random.split(key, 5)
    b_scale = 1 / math.sqrt(2 * d_model)
    c_scale = 1 / math.sqrt(d_state)
    return dict(
        B_re=jax.random.normal(b_re, (d_state, d_model), dtype) * b_scale,
        B_im=jax.random.normal(b_im, (d_state, d_model), dtype) * b_scale,
        C_re=jax.random.normal(c_re, (d_model, d_state), dtype) * c_scale,
        C_im=jax.random.normal(c_im, (d_model, d_state), dtype) * c_scale,
        D=jax.random.normal(d, (d_model,), dtype),
    )


def lru_init(
    d_model: Size, d_state: Size, *, dtype=None, key: PRNGKeyArray, **ring: float
) -> dict[str, Array]:
    """All LRU parameters (the fixed field names of `AbstractLRU`) from one key.

    `ring`: the keywords `r_min`, `r_max`, `max_phase` of `ring_init` (its defaults where
    left out), which samples `nu_log` and `theta_log`; `gamma_log` is `gamma_log_init`'s
    and the projections `projection_init`'s.
    """
    d_model = check_size("d_model", d_model)
    d_state = check_size("d_state", d_state, "the LRU's complex modes N")
    check_key(key)
    dtype = float_dtype(dtype)
    owner = f"An LRU with d_model={d_model}, d_state={d_state}"
    check_fits(owner, dtype, 4 * d_model * d_state + 3 * d_state + d_model)
    ring_key, proj_key = jax.random.split(key)
    nu_log, theta_log = ring_init(d_state, dtype=dtype, key=ring_key, **ring)
    return dict(
        nu_log=nu_log,
        theta_log=theta_log,
        gamma_log=gamma_log_init(nu_log),
        **projection_init(d_model, d_state, dtype=dtype, key=proj_key),
    )

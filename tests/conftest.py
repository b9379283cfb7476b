"""Shared test set-up.

Strict dtype promotion and key-reuse checking catch silent bugs early. eqx_lru is not
imported here at module level, so jaxtyping's import hook (pyproject `addopts`) still
instruments it.
"""

import jax
import jax.numpy as jnp
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_debug_key_reuse", True)


@pytest.fixture
def getkey():
    """A fresh key per call, from a fixed seed per test."""
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 1000))
    return lambda: next(keys)


def tree_allclose(x, y, *, rtol=1e-5, atol=1e-8):
    import equinox as eqx

    return eqx.tree_equal(x, y, typematch=True, rtol=rtol, atol=atol)


def max_rel_err(x, y):
    x, y = jnp.asarray(x), jnp.asarray(y)
    return float(jnp.max(jnp.abs(x - y)) / jnp.maximum(jnp.max(jnp.abs(y)), 1e-30))

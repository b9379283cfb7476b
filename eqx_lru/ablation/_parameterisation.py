r"""How a `DiagonalRNN` holds its diagonal $\lambda$ in real parameters (§3.2-§3.3).

Every parameterisation is a small module of real arrays with `eigenvalues()` and a
constructor `from_ring(nu_log, theta_log)` from the ring sample of Lemma 3.2
(`eqx_lru.ring_init`), so every rung starts from the same $\lambda$ given the same key. The
polar ones (`Exp`, `StableExp`) define `modulus()` and `phase()` and take the LRU's own
formula for `eigenvalues` (`eqx_lru.AbstractLRU.eigenvalues`,
$\lambda = |\lambda| e^{i \arg\lambda}$).
"""

import abc
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Complex, Float

from .._cores._lru import AbstractLRU, polar

ParameterisationName = Literal["real_imag", "exp", "stable_exp"]


class AbstractParameterisation(eqx.Module):
    r"""The diagonal $\lambda \in \mathbb C^N$ of a `DiagonalRNN` as real parameters."""

    #: The name `DiagonalRNN(parameterisation=...)` takes.
    name: eqx.AbstractClassVar[str]

    @classmethod
    @abc.abstractmethod
    def from_ring(
        cls, nu_log: Float[Array, " d_state"], theta_log: Float[Array, " d_state"]
    ) -> "AbstractParameterisation":
        r"""The parameters of $\lambda = \exp(-e^{\nu_{\log}} + i e^{\theta_{\log}})$."""

    @abc.abstractmethod
    def eigenvalues(self) -> Complex[Array, " d_state"]:
        r"""$\lambda$."""


class RealImag(AbstractParameterisation):
    r"""$\lambda = a + ib$ stored directly (§3.2.2; row "Λ Real + Im" of Table 2): fields
    `re` $= a$, `im` $= b$. Nothing keeps $|\lambda| < 1$ during training."""

    re: Float[Array, " d_state"]
    im: Float[Array, " d_state"]
    name: ClassVar[str] = "real_imag"

    @classmethod
    def from_ring(cls, nu_log, theta_log) -> "RealImag":
        lam = StableExp(nu_log, theta_log).eigenvalues()
        return cls(lam.real, lam.imag)

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        return jax.lax.complex(self.re, self.im)


class Exp(AbstractParameterisation):
    r"""$\lambda = \exp(-\nu + i\theta)$ (§3.3 "Optimization under exponential
    parameterization"; row "Λ Exp" of Table 2): fields `nu`, `theta`. Magnitude and phase
    are decoupled (§E.2, Fig. 8), but nothing keeps $\nu > 0$, so $|\lambda|$ can leave the
    unit disk during training."""

    nu: Float[Array, " d_state"]
    theta: Float[Array, " d_state"]
    name: ClassVar[str] = "exp"

    @classmethod
    def from_ring(cls, nu_log, theta_log) -> "Exp":
        return cls(jnp.exp(nu_log), jnp.exp(theta_log))

    def modulus(self) -> Float[Array, " d_state"]:
        return jnp.exp(-self.nu)

    def phase(self) -> Float[Array, " d_state"]:
        return self.theta

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        r"""$\lambda = |\lambda| (\cos\arg\lambda + i \sin\arg\lambda)$: the LRU's formula."""
        return polar(self.modulus(), self.phase())


class StableExp(AbstractParameterisation):
    r"""$\lambda = \exp(-e^{\nu_{\log}} + i e^{\theta_{\log}})$ (§3.3 "Enforcing
    stability"; rows "Λ Stable Exp" and "+ Ring Init" of Table 2): fields `nu_log`,
    `theta_log`, named, initialised and evaluated exactly as the LRU's
    (`eqx_lru.AbstractLRU.modulus`, `.phase`), so a `DiagonalRNN` with it is
    `eqx_lru.ComplexLRU` with $\gamma = 1$. $|\lambda| < 1$ for every value of the parameters.

    The paper introduces the logarithmic phase $\theta = e^{\theta_{\log}}$ with the LRU in
    §3.4; it is used here already so that the last two rungs differ only by $\gamma$.
    """

    nu_log: Float[Array, " d_state"]
    theta_log: Float[Array, " d_state"]
    name: ClassVar[str] = "stable_exp"

    @classmethod
    def from_ring(cls, nu_log, theta_log) -> "StableExp":
        return cls(nu_log, theta_log)

    modulus = AbstractLRU.modulus
    phase = AbstractLRU.phase

    def eigenvalues(self) -> Complex[Array, " d_state"]:
        r"""The LRU's $\lambda$ (`eqx_lru.AbstractLRU.eigenvalues`)."""
        return polar(self.modulus(), self.phase())


PARAMETERISATIONS: dict[str, type[AbstractParameterisation]] = {
    cls.name: cls for cls in (RealImag, Exp, StableExp)
}

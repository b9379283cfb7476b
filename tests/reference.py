"""Independent float64 NumPy oracles: plain loops over the paper's equations."""

import numpy as np


def lru_params_np(layer) -> dict[str, np.ndarray]:
    names = ("nu_log", "theta_log", "gamma_log", "B_re", "B_im", "C_re", "C_im", "D")
    return {n: np.asarray(getattr(layer, n), dtype=np.float64) for n in names}


def lru_loop(p, u, *, reverse=False, x0=None, use_gamma=True):
    """y_k = Re(C x_k) + D u_k with x_k = λ x_{k-1} + γ (B u_k), as in App. A.

    Returns (y, states) with states complex (L, N).
    """
    u = np.asarray(u, np.float64)
    lam = np.exp(-np.exp(p["nu_log"]) + 1j * np.exp(p["theta_log"]))
    gamma = np.exp(p["gamma_log"]) if use_gamma else np.ones_like(p["gamma_log"])
    B = (p["B_re"] + 1j * p["B_im"]) * gamma[:, None]
    C = p["C_re"] + 1j * p["C_im"]
    length = u.shape[0]
    x = np.zeros(lam.shape, np.complex128) if x0 is None else np.asarray(x0, np.complex128)
    states = np.zeros((length, lam.shape[0]), np.complex128)
    y = np.zeros_like(u)
    order = range(length - 1, -1, -1) if reverse else range(length)
    for k in order:
        x = lam * x + B @ u[k]
        states[k] = x
        y[k] = (C @ x).real + p["D"] * u[k]
    return y, states


def recurrence_loop(a, b, *, block, shared, reverse=False, h0=None):
    """h_k = a_k ⊗ h_{k-1} + b_k with ⊗ elementwise or a 2x2 matrix-vector product."""
    a, b = np.asarray(a), np.asarray(b)
    length = b.shape[0]
    h = np.zeros(b.shape[1:], b.dtype) if h0 is None else np.asarray(h0)
    out = np.zeros_like(b)
    order = range(length - 1, -1, -1) if reverse else range(length)
    for k in order:
        a_k = a if shared else a[k]
        h = (np.einsum("...ij,...j->...i", a_k, h) if block else a_k * h) + b[k]
        out[k] = h
    return out

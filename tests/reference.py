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


def lru_dt_loop(p, u, dt, *, reverse=False, x0=None):
    """The LRU with time steps: x_k = λ^{dt_k} x_{k-1} + γ (B u_k), λ^{dt} = exp(dt log λ)
    with log λ = -exp(ν_log) + i exp(θ_log); dt in the order of processing. Returns
    (y, states complex (L, N))."""
    u, dt = np.asarray(u, np.float64), np.broadcast_to(np.asarray(dt, np.float64), u.shape[:1])
    log_lam = -np.exp(p["nu_log"]) + 1j * np.exp(p["theta_log"])
    B = (p["B_re"] + 1j * p["B_im"]) * np.exp(p["gamma_log"])[:, None]
    C = p["C_re"] + 1j * p["C_im"]
    x = np.zeros(log_lam.shape, np.complex128) if x0 is None else np.asarray(x0, np.complex128)
    states = np.zeros((u.shape[0], log_lam.shape[0]), np.complex128)
    y = np.zeros_like(u)
    for k in range(u.shape[0] - 1, -1, -1) if reverse else range(u.shape[0]):
        x = np.exp(log_lam * dt[k]) * x + B @ u[k]
        states[k] = x
        y[k] = (C @ x).real + p["D"] * u[k]
    return y, states


def lru_kernel_sum(p, u, times, *, reverse=False):
    """The same LRU from zero as a sum over past inputs at their true time lags:
    y_k = Σ_{j ≤ k} Re(C diag(γ λ^{t_k - t_j}) B u_j) + D u_k (j ≥ k and t_j - t_k in
    reverse), for sample times `times`."""
    u, t = np.asarray(u, np.float64), np.asarray(times, np.float64)
    log_lam = -np.exp(p["nu_log"]) + 1j * np.exp(p["theta_log"])
    B = (p["B_re"] + 1j * p["B_im"]) * np.exp(p["gamma_log"])[:, None]
    C = p["C_re"] + 1j * p["C_im"]
    y = np.zeros_like(u)
    for k in range(u.shape[0]):
        for j in range(k, u.shape[0]) if reverse else range(k + 1):
            lag = t[j] - t[k] if reverse else t[k] - t[j]
            y[k] += (C @ (np.exp(log_lam * lag) * (B @ u[j]))).real
        y[k] += p["D"] * u[k]
    return y


def rglru_loop(p, x, *, c=8.0, dt=None, h0=None, reverse=False, segment_ids=None, signed=False):
    """The RG-LRU (real, or complex with `p["theta"]`): r = σ(W_a x + b_a), i = σ(W_x x +
    b_x) with block-diagonal W, a = σ(Λ)^{c r dt} (· e^{iθ r dt}), h = a h + √(1-|a|²) i x
    (x the complex pairs of the input's halves), y = h (or [Re h, Im h]); a = 0 where a
    segment starts. `signed`: the modulus 2σ(Λ)^{c r dt} - 1 in place of σ(Λ)^{c r dt}.
    Returns (y, states)."""
    x = np.asarray(x, np.float64)
    length = x.shape[0]
    dt = np.ones(length) if dt is None else np.broadcast_to(np.asarray(dt, np.float64), length)
    phase = p.get("theta") is not None
    modes = p["Lambda"].shape[0]
    sigma = 1 / (1 + np.exp(-p["Lambda"]))

    def gate(w, b, xt):
        z = np.einsum("hi,hio->ho", xt.reshape(w.shape[0], -1), w) + b
        return 1 / (1 + np.exp(-z.reshape(-1)))

    h = np.zeros(modes, np.complex128 if phase else np.float64) if h0 is None else np.array(h0)
    states, y = np.zeros((length,) + h.shape, h.dtype), np.zeros_like(x)
    order = list(range(length - 1, -1, -1) if reverse else range(length))
    for n, k in enumerate(order):
        r, i = gate(p["W_a"], p["b_a"], x[k]), gate(p["W_x"], p["b_x"], x[k])
        a = sigma ** (c * r * dt[k])
        a = 2 * a - 1 if signed else a
        if phase:
            a = a * np.exp(1j * p["theta"] * r * dt[k])
        start = n > 0 and segment_ids is not None and segment_ids[k] != segment_ids[order[n - 1]]
        xk = x[k, :modes] + 1j * x[k, modes:] if phase else x[k]
        h = (0 if start else a) * h + np.sqrt(1 - np.abs(a) ** 2) * (i * xk)
        states[k] = h
        y[k] = np.concatenate([h.real, h.imag]) if phase else h
    return y, states


def s5_dt_loop(p, u, dt, *, reverse=False):
    """S5 with a time step per position: the zero-order hold over Δ_j dt_k,
    x_k = exp(Λ Δ dt_k) x_{k-1} + (exp(Λ Δ dt_k) - 1) / Λ · (B u_k), y_k = 2 Re(C x_k) + D u_k."""
    u, dt = np.asarray(u, np.float64), np.broadcast_to(np.asarray(dt, np.float64), u.shape[:1])
    lam = p["Lambda_re"] + 1j * p["Lambda_im"]
    B, C = p["B_re"] + 1j * p["B_im"], p["C_re"] + 1j * p["C_im"]
    x = np.zeros(lam.shape, np.complex128)
    y = np.zeros_like(u)
    for k in range(u.shape[0] - 1, -1, -1) if reverse else range(u.shape[0]):
        bar = np.exp(lam * np.exp(p["log_step"]) * dt[k])
        x = bar * x + (bar - 1) / lam * (B @ u[k])
        y[k] = 2 * (C @ x).real + p["D"] * u[k]
    return y


def gelu_tanh(x):
    """JAX's default GELU (the tanh approximation)."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def hawk_loop(p, x, core, *, segment_ids=None, h0=None, history=None):
    """Hawk's block position by position: z = RMSNorm(x) (eps 1e-6, weight), g =
    GELU(W_y z + b_y), v = W_x z + b_x, u_t = b + Σ_k w_k v_{t-k} over the same packed
    sequence (`history`: the K-1 inputs before v_0, oldest first, part of the first
    sequence), h = core(u) (a function of (u, segment_ids, h0) returning the outputs),
    r = x + W_o (h g) + b_o, y = r + W_d (GELU(W_g m + b_g) (W_v m + b_v)) + b_d with
    m = RMSNorm(r). `p` holds float64 NumPy arrays."""
    x = np.asarray(x, np.float64)

    def rms(w, a):
        return a / np.sqrt(np.mean(a**2) + 1e-6) * w

    length, width = x.shape[0], p["conv_w"].shape[0]
    z = np.stack([rms(p["norm"], x_t) for x_t in x])
    g = gelu_tanh(z @ p["W_y"].T + p["b_y"])
    v = z @ p["W_x"].T + p["b_x"]
    past = np.zeros((width - 1, v.shape[1])) if history is None else np.asarray(history)
    ext = np.concatenate([past, v])
    ids = np.zeros(length, int) if segment_ids is None else np.asarray(segment_ids)
    starts = np.concatenate([[True], ids[1:] != ids[:-1]])
    seq = np.concatenate([np.zeros(width - 1, int), np.cumsum(starts) - 1])
    u = np.zeros_like(v)
    for t in range(length):
        u[t] = p["conv_b"]
        for k in range(width):
            if seq[t + width - 1 - k] == seq[t + width - 1]:
                u[t] += p["conv_w"][k] * ext[t + width - 1 - k]
    h = core(u, segment_ids, h0)
    r = x + (h * g) @ p["W_o"].T + p["b_o"]
    m = np.stack([rms(p["mlp_norm"], r_t) for r_t in r])
    up = m @ p["W_up"].T + p["b_up"]
    gate, value = np.split(up, 2, axis=-1)
    return r + (gelu_tanh(gate) * value) @ p["W_d"].T + p["b_d"]

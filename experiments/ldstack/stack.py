r"""LDStack §1: a nonlinear RNN as a stack of linear dynamical systems, on the parallel scan.

The tanh RNN $s_{t+1} = f(A s_t + B x_t)$, $f = \tanh$, $s_0 = 0$, is approximated by layers of
MIMO LDS with the RNN's own $(A, B)$: layer 0 is the linear RNN
$s^{(0)}_{t+1} = A s^{(0)}_t + B x_t$, and layer $k$ adds as an input the deviation of the
previous layer's linear steps from the nonlinear ones,

$$s^{(k)}_{t+1} = A s^{(k)}_t + B x_t + e^{(k-1)}_t, \qquad
e^{(k-1)}_t = f(z_t) - z_t, \quad z_t = A s^{(k-1)}_t + B x_t .$$

Each layer is one linear recurrence, run in modal form on `eqx_lru.linear_recurrence` (the
eigendecomposition $A = P \Lambda P^{-1}$; `Diagonal` algebra, complex). If layer $k-1$ is
exact up to step $j$, layer $k$ is exact up to $j + 1$: layer $k$ is exact on
$s_0, \dots, s_k$, so $T$ correction layers on top of the linear one reproduce the RNN
exactly. How fast the error falls before that is what this script measures (trajectory error
vs depth for three RNNs, from mildly to strongly nonlinear), together with the time of a
depth-$k$ stack on the parallel (associative) scan against the sequential nonlinear RNN as
$T$ grows.

    python -m experiments.ldstack.stack [--fast] [--out DIR] [--seed N]
"""

from experiments.paper.command import LDSTACK_FIGURES, parse_early

# Under `python -m`: --help and a bad flag are answered now, before JAX loads.
parse_early(__name__, __doc__, "stack", default_out=LDSTACK_FIGURES)

import math  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from eqx_lru import Diagonal, linear_recurrence  # noqa: E402
from experiments.paper.command import parse_args  # noqa: E402

from ._common import plt, save_figure, save_json  # noqa: E402

N, D = 16, 4  # RNN state size, input size
# (name, spectral radius of A, input scale): how far tanh is from the identity.
REGIMES = [
    ("mild: ρ(A)=0.5, B×0.3", 0.5, 0.3),
    ("moderate: ρ(A)=0.8, B×0.3", 0.8, 0.3),
    ("strong: ρ(A)=0.9, B×1", 0.9, 1.0),
]


def random_rnn(rng: np.random.Generator, radius: float, scale: float):
    """Gaussian $A$ rescaled to spectral radius `radius`; $B \\sim \\mathcal N(0, s^2/d)$."""
    a = rng.standard_normal((N, N))
    a *= radius / np.abs(np.linalg.eigvals(a)).max()
    return a, rng.standard_normal((N, D)) * scale / math.sqrt(D)


def rnn_np(a, b, x) -> np.ndarray:
    """The tanh RNN as a float64 loop: states $s_1, \\dots, s_T$."""
    s, out = np.zeros(a.shape[0]), np.zeros((x.shape[0], a.shape[0]))
    for t in range(x.shape[0]):
        s = np.tanh(a @ s + b @ x[t])
        out[t] = s
    return out


def modal(a: np.ndarray, dtype=jnp.complex128):
    """$(\\lambda, P, P^{-1})$ of $A = P \\Lambda P^{-1}$, as JAX arrays of `dtype`."""
    lam, vectors = np.linalg.eig(a)
    return tuple(jnp.asarray(v, dtype) for v in (lam, vectors, np.linalg.inv(vectors)))


def _complex(x):
    return jax.lax.complex(x, jnp.zeros_like(x))


def stack_layer(lam, p, p_inv, a, bx, previous, *, method="auto"):
    """One LDStack layer: states $s^{(k)}_1..s^{(k)}_T$ given $s^{(k-1)}_1..s^{(k-1)}_T$
    (`None` for layer 0, the linear RNN) and `bx` $= B x_t$ `(T, n)`."""
    drive = bx
    if previous is not None:
        before = jnp.concatenate([jnp.zeros_like(previous[:1]), previous[:-1]])  # s_0..s_{T-1}
        z = before @ a.T + bx
        drive = bx + (jnp.tanh(z) - z)
    modal_states = linear_recurrence(
        lam, _complex(drive) @ p_inv.T, algebra=Diagonal(), method=method
    )
    return (modal_states @ p.T).real


_stack_layer = jax.jit(stack_layer, static_argnames="method")


def ldstack(a, b, x, depth: int, *, method="auto", dtype=jnp.float64):
    """The states of every layer 0..depth-1, `(depth, T, n)` (layers run one after another)."""
    cdtype = jnp.complex128 if dtype == jnp.float64 else jnp.complex64
    lam, p, p_inv = modal(a, cdtype)
    a_j, bx = jnp.asarray(a, dtype), jnp.asarray(x @ b.T, dtype)
    states, previous = [], None
    for _ in range(depth):
        previous = _stack_layer(lam, p, p_inv, a_j, bx, previous, method=method)
        states.append(previous)
    return jnp.stack(states)


def stack_fn(depth: int, method: str):
    """A jitted depth-`depth` stack $x \\mapsto s^{(depth-1)}$ (for timing)."""

    def run(lam, p, p_inv, a, b, x):
        bx = x @ b.T
        states = stack_layer(lam, p, p_inv, a, bx, None, method=method)
        for _ in range(depth - 1):
            states = stack_layer(lam, p, p_inv, a, bx, states, method=method)
        return states

    return jax.jit(run)


@jax.jit
def rnn_scan(a, b, x):
    """The sequential tanh RNN (`jax.lax.scan`)."""

    def step(s, x_t):
        s = jnp.tanh(a @ s + b @ x_t)
        return s, s

    return jax.lax.scan(step, jnp.zeros(a.shape[0], x.dtype), x)[1]


def _time(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return min(times)  # the least disturbed run: the machine may be shared


def error_vs_depth(rng, length: int, depth: int) -> list[dict]:
    out = []
    for name, radius, scale in REGIMES:
        a, b = random_rnn(rng, radius, scale)
        x = rng.standard_normal((length, D))
        exact = rnn_np(a, b, x)
        with jax.enable_x64(True):
            layers = np.asarray(ldstack(a, b, x, depth))
        err = np.abs(layers - exact[None]).max(-1)  # (depth, T)
        tol = 1e-9 * np.abs(exact).max()
        # Layer k reproduces s_1..s_k exactly: the number of leading exact steps.
        exact_prefix = [int(np.argmax(e > tol)) if (e > tol).any() else length for e in err]
        # |A s_t + B x_t| on the true trajectory: how far tanh is from the identity.
        pre = np.concatenate([np.zeros((1, N)), exact[:-1]]) @ a.T + x @ b.T
        out.append(
            dict(
                regime=name,
                spectral_radius=radius,
                input_scale=scale,
                length=length,
                mean_abs_preactivation=float(np.abs(pre).mean()),
                relative_max_error=(err.max(1) / np.abs(exact).max()).tolist(),
                relative_rms_error=(
                    np.sqrt((err**2).mean(1)) / np.sqrt((exact**2).mean())
                ).tolist(),
                exact_prefix_steps=exact_prefix,
            )
        )
    return out


def timings(
    rng, lengths: list[int], depths: list[int], methods: tuple[str, ...], repeats: int
) -> list[dict]:
    a, b = random_rnn(rng, 0.9, 0.3)
    lam, p, p_inv = modal(a, jnp.complex64)
    a32, b32 = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    rows = []
    for length in lengths:
        x = jnp.asarray(rng.standard_normal((length, D)), jnp.float32)
        row = dict(length=length, rnn_sequential_s=_time(rnn_scan, a32, b32, x, repeats=repeats))
        for depth in depths:
            for method in methods:
                fn = stack_fn(depth, method)
                row[f"stack{depth}_{method}_s"] = _time(
                    fn, lam, p, p_inv, a32, b32, x, repeats=repeats
                )
        rows.append(row)
    return rows


def _errors_panel(ax, results: dict, depth: int, length: int) -> None:
    ceiling = 1e12
    for case in results["errors"]:
        errs = np.asarray(case["relative_max_error"])
        label = case["regime"]
        if errs.max() > ceiling:
            label += f" (grows to {errs.max():.0e}; clipped)"
        ax.semilogy(np.arange(depth), np.clip(errs, 1e-17, ceiling), "o-", ms=2.5, label=label)
    ax.set_ylim(1e-17, ceiling * 10)
    ax.set_xlabel("layer k (layer 0 = the linear RNN)")
    ax.set_ylabel("max |s^(k)_t − s_t| / max |s_t|")
    ax.set_title(f"LDStack vs tanh RNN (n={N}, d={D}, T={length})", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)


def _timings_panel(ax, results: dict, depths, methods) -> None:
    rows = results["timings"]
    ts = [r["length"] for r in rows]
    ms = [r["rnn_sequential_s"] * 1e3 for r in rows]
    ax.loglog(ts, ms, "k-o", label="tanh RNN, sequential lax.scan")
    for depth_k in depths:
        for method, style in (("associative", "-"), ("sequential", ":"))[: len(methods)]:
            ms = [r[f"stack{depth_k}_{method}_s"] * 1e3 for r in rows]
            label = f"depth-{depth_k} stack, {method} scan"
            ax.loglog(ts, ms, style, marker="s", ms=3, label=label)
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("time per sequence (ms)")
    ax.set_title(f"time on {results['device']} ({results['backend']})", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv, __doc__, "stack", default_out=LDSTACK_FIGURES)
    rng = np.random.default_rng(args.seed)
    if args.fast:
        length, depth, lengths, depths, repeats = 64, 12, [256, 1024], [2], 2
        methods = ("associative",)
    else:
        length, depth = 1024, 48
        lengths, depths, repeats = [256, 1024, 4096, 16384, 65536], [4, 16], 5
        methods = ("associative", "sequential")
    results: dict[str, Any] = dict(
        state_size=N,
        input_size=D,
        device=jax.devices()[0].device_kind,
        backend=jax.default_backend(),
        errors=error_vs_depth(rng, length, depth),
        timings=timings(rng, lengths, depths, methods, repeats),
    )
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    _errors_panel(left, results, depth, length)
    _timings_panel(right, results, depths, methods)
    fig.tight_layout()
    results["png"] = save_figure(fig, args.out, "stack").name
    save_json(results, args.out, "stack")
    for case in results["errors"]:
        errs = case["relative_max_error"]
        print(
            f"{case['regime']}: relative max error by layer 0, 1, 2, 4, 8, last: "
            + ", ".join(f"{errs[k]:.1e}" for k in (0, 1, 2, 4, 8, len(errs) - 1))
        )
    for row in results["timings"]:
        print(
            " ".join(
                f"{k}={v * 1e3:.2f}ms" if k.endswith("_s") else f"{k}={v}" for k, v in row.items()
            )
        )
    return results


if __name__ == "__main__":
    main()

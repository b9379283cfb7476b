r"""Prop. 3.3 / the intuition behind Fig. 5: the forward pass blows up near the unit circle,
and γ normalisation (eq. 7) removes the blow-up.

For eigenvalues uniform on the ring $r_\min \le |\lambda| \le r_\max$ and white-noise input,

$$\frac{\mathbb E\|x_\infty\|^2}{\mathbb E\|Bu\|^2}
  = \frac{1}{r_\max^2 - r_\min^2}\log\frac{1 - r_\min^2}{1 - r_\max^2}.$$

This script drives `eqx_lru.ComplexLRU` layers with unit white noise and measures
$\|x_k\|^2 / \mathbb E\|Bu\|^2$ (batch mean) against $k$, without γ (`gamma_log` zeroed with
`eqx.tree_at`) and with γ, next to the exact finite-$k$ expectation for the sampled
eigenvalues, $\sum_n \gamma_n^2 \|B_n\|^2 (1 - |\lambda_n|^{2(k+1)}) / (1 - |\lambda_n|^2)
/ \sum_n \|B_n\|^2$, and Prop. 3.3's limit. With γ the ratio tends to 1 for every ring.

    python -m experiments.paper.forward_blowup [--fast] [--out DIR]
"""

from experiments.paper.command import parse_early

# Under `python -m`: --help and a bad flag are answered now, before JAX loads.
parse_early(__name__, __doc__, "forward_blowup")

import math  # noqa: E402
from typing import Any  # noqa: E402

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from eqx_lru import ComplexLRU  # noqa: E402
from experiments.paper.command import parse_args  # noqa: E402

from .common import plt, save_figure, save_json  # noqa: E402

RINGS = [
    # (r_min, r_max, max_phase): Table 8's rings, PathX's last.
    (0.0, 0.9, 2 * math.pi),
    (0.9, 0.99, 2 * math.pi),
    (0.9, 0.999, 2 * math.pi),
    (0.999, 0.9999, math.pi / 10),
]


def prop33_limit(r_min: float, r_max: float) -> float:
    """Prop. 3.3: E‖x_∞‖² / E‖Bu‖² for eigenvalues uniform on the ring."""
    return math.log((1 - r_min**2) / (1 - r_max**2)) / (r_max**2 - r_min**2)


def prop33_at(k: np.ndarray, r_min: float, r_max: float) -> np.ndarray:
    """The same expectation over the ring at step k (k + 1 inputs seen):
    E_s[(1 - s^{k+1}) / (1 - s)], s = |λ|² ~ U[r_min², r_max²] (midpoint rule)."""
    edges = np.linspace(r_min**2, r_max**2, 4001)
    s = (edges[1:] + edges[:-1]) / 2
    return np.array([np.mean(-np.expm1((kk + 1) * np.log(s)) / (1 - s)) for kk in k])


def sampled_expectation(layer: ComplexLRU, k: np.ndarray, *, gamma: bool) -> np.ndarray:
    """Exact E‖x_k‖² / E‖Bu‖² over unit white noise for this layer's eigenvalues."""
    nu = np.exp(np.asarray(layer.nu_log, np.float64))
    one_minus = -np.expm1(-2 * nu)  # 1 - |λ|², accurate near the unit circle
    b_sq = np.sum(
        np.asarray(layer.B_re, np.float64) ** 2 + np.asarray(layer.B_im, np.float64) ** 2, 1
    )
    g_sq = np.exp(2 * np.asarray(layer.gamma_log, np.float64)) if gamma else np.ones_like(nu)
    grow = -np.expm1(-2 * nu[None, :] * (k[:, None] + 1)) / one_minus[None, :]
    return (grow * (g_sq * b_sq)[None, :]).sum(1) / b_sq.sum()


@eqx.filter_jit
def state_norms(layer: ComplexLRU, u: jax.Array) -> jax.Array:
    """‖x_k‖² for every example and step, shape (batch, length); a few examples at a time
    so the (length, d_state) complex states of the whole batch never coexist."""

    def one(u_i):
        x = layer.hidden_states(u_i)
        return jnp.sum(x.real**2 + x.imag**2, axis=-1)

    return jax.lax.map(one, u, batch_size=2)


def _ring(axes, color, ring, keys, sizes, steps, shown) -> dict:
    """One ring's layer with and without γ, measured and expected, drawn on `axes`; its
    row of the results."""
    (r_min, r_max, max_phase), (d_model, d_state, length, batch) = ring, sizes
    tail = slice(int(0.9 * length), None)  # average the last 10% of steps
    with_gamma = ComplexLRU(
        d_model, d_state, r_min=r_min, r_max=r_max, max_phase=max_phase, key=next(keys)
    )
    without_gamma = eqx.tree_at(lambda m: m.gamma_log, with_gamma, jnp.zeros(d_state))
    u = jax.random.normal(next(keys), (batch, length, d_model))
    b_sq = float(jnp.sum(with_gamma.B_re**2 + with_gamma.B_im**2))  # E‖Bu‖², unit noise
    row: dict[str, Any] = dict(
        r_min=r_min, r_max=r_max, max_phase=max_phase, prop33_limit=prop33_limit(r_min, r_max)
    )
    label = f"[{r_min}, {r_max}]"
    for ax, layer, gamma in ((axes[0], without_gamma, False), (axes[1], with_gamma, True)):
        measured = np.asarray(state_norms(layer, u)).mean(0) / b_sq
        expected = sampled_expectation(with_gamma, steps, gamma=gamma)
        limit = sampled_expectation(with_gamma, np.array([10**9]), gamma=gamma)[0]
        final = dict(
            measured_final=float(measured[tail].mean()),
            expected_final=float(expected[tail].mean()),
            expected_limit=float(limit),
        )
        final["measured_over_expected"] = final["measured_final"] / final["expected_final"]
        row["with_gamma" if gamma else "without_gamma"] = final
        ax.plot(shown + 1, measured[shown], color=color, lw=1.2, label=f"{label} measured")
        ax.plot(shown + 1, expected[shown], color=color, lw=0.9, ls="--")
        if not gamma:
            ax.plot(shown + 1, prop33_at(shown, r_min, r_max), color=color, lw=0.8, ls=":")
            ax.axhline(row["prop33_limit"], color=color, lw=0.6, ls="-.", alpha=0.7)
    row["prop33_at_end"] = float(prop33_at(np.array([length - 1]), r_min, r_max)[0])
    return row


def _dress(fig, axes, results: dict) -> None:
    axes[0].set_title("without γ: E‖x_k‖² / E‖Bu‖² grows to Prop. 3.3's limit", fontsize=10)
    axes[1].set_title("with γ = √(1 − |λ|²) (eq. 7): tends to 1 for every ring", fontsize=10)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("step k")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("‖x_k‖² / E‖Bu‖²")
    axes[0].plot([], [], "k--", lw=0.9, label="exact E, sampled λ")
    axes[0].plot([], [], "k:", lw=0.8, label="Prop. 3.3, E over ring, at k")
    axes[0].plot([], [], "k-.", lw=0.6, label="Prop. 3.3 limit k → ∞")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(
        f"Forward blow-up: ComplexLRU, N={results['d_state']}, H={results['d_model']}, white "
        f"noise, batch {results['batch']}",
        fontsize=10,
    )
    fig.tight_layout()


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv, __doc__, "forward_blowup")
    if args.fast:
        d_model, d_state, length, batch, rings = 4, 32, 512, 8, RINGS[:2]
    else:
        d_model, d_state, length, batch, rings = 16, 1024, 16_384, 16, RINGS
    keys = iter(jax.random.split(jax.random.PRNGKey(args.seed), 2 * len(rings)))
    steps = np.arange(length)
    shown = np.unique(np.geomspace(1, length, 300).astype(int) - 1)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    results: dict[str, Any] = dict(
        d_model=d_model, d_state=d_state, length=length, batch=batch, input="unit white noise"
    )
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(rings)))
    sizes = (d_model, d_state, length, batch)
    results["rings"] = [
        _ring(axes, color, ring, keys, sizes, steps, shown)
        for color, ring in zip(colors, rings, strict=False)
    ]
    _dress(fig, axes, results)
    results["png"] = save_figure(fig, args.out, "forward_blowup").name
    save_json(results, args.out, "forward_blowup")
    for row in results["rings"]:
        a, b = row["without_gamma"], row["with_gamma"]
        print(
            f"[{row['r_min']}, {row['r_max']}]: without γ measured {a['measured_final']:.1f} vs "
            f"expected {a['expected_final']:.1f} (Prop. 3.3 at k={length}: "
            f"{row['prop33_at_end']:.1f}, limit {row['prop33_limit']:.1f}); "
            f"with γ {b['measured_final']:.3f} vs {b['expected_final']:.3f}"
        )
    return results


if __name__ == "__main__":
    main()

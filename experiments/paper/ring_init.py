r"""Lemma 3.2 / Figs. 2–3: eigenvalues sampled uniformly on a ring, checked with KS tests.

`eqx_lru.ring_init` samples $\nu = -\tfrac12\log(u_1(r_\max^2 - r_\min^2) + r_\min^2)$ and
$\theta = \text{max_phase}\cdot u_2$. If $\lambda = e^{-\nu + i\theta}$ is uniform on the ring
then $|\lambda|^2 \sim U[r_\min^2, r_\max^2]$ and $\arg\lambda \sim U[0, \text{max_phase}]$;
this script tests both with Kolmogorov–Smirnov for the paper's rings (Table 8, incl. PathX's
$[0.999, 0.9999]$ with phase $\pi/10$), and puts the unit-disk ring next to the eigenvalues
of a Glorot dense matrix, which it matches in the large-width limit (Thm. 3.1, Fig. 2).

    python -m experiments.paper.ring_init [--fast] [--out DIR]
"""

from experiments.paper.command import parse_early

# Under `python -m`: --help and a bad flag are answered now, before JAX loads.
parse_early(__name__, __doc__, "ring_init")

import math  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import scipy.stats  # noqa: E402

from eqx_lru import ring_init  # noqa: E402
from eqx_lru.ablation import LinearDenseRNN  # noqa: E402
from experiments.paper.command import parse_args  # noqa: E402

from .common import plt, save_figure, save_json  # noqa: E402

SETTINGS = [
    # (label, r_min, r_max, max_phase)
    ("unit disk (= Glorot)", 0.0, 1.0, 2 * math.pi),
    ("Text/Retrieval [0.5, 0.9]", 0.5, 0.9, 2 * math.pi),
    ("sCIFAR LRU [0.9, 0.999]", 0.9, 0.999, 2 * math.pi),
    ("PathX [0.999, 0.9999], π/10", 0.999, 0.9999, math.pi / 10),
]


def ring_samples(d_state, r_min, r_max, max_phase, key):
    """`ring_init` samples as float64 NumPy: (1 - |λ|², arg λ).

    $1 - |\\lambda|^2 = -\\operatorname{expm1}(-2e^{\\nu_{\\log}})$ keeps its precision when
    $|\\lambda| \\to 1$ (PathX), where $|\\lambda|^2$ itself would round."""
    nu_log, theta_log = ring_init(d_state, r_min=r_min, r_max=r_max, max_phase=max_phase, key=key)
    one_minus_modulus_sq = -np.expm1(-2 * np.exp(np.asarray(nu_log, np.float64)))
    return one_minus_modulus_sq, np.exp(np.asarray(theta_log, np.float64))


def ks_tests(one_minus_modulus_sq, phase, r_min, r_max, max_phase):
    """KS of |λ|² against U[r_min², r_max²] and of arg λ against U[0, max_phase]."""
    # (|λ|² - r_min²)/(r_max² - r_min²), written with 1 - |λ|² to avoid cancellation.
    u_modulus = ((1 - r_min**2) - one_minus_modulus_sq) / (r_max**2 - r_min**2)
    u_phase = phase / max_phase
    modulus = scipy.stats.kstest(u_modulus, "uniform")
    phase_test = scipy.stats.kstest(u_phase, "uniform")
    return (
        dict(
            modulus_sq_ks=float(modulus.statistic),
            modulus_sq_p=float(modulus.pvalue),
            phase_ks=float(phase_test.statistic),
            phase_p=float(phase_test.pvalue),
        ),
        u_modulus,
        u_phase,
    )


_CIRCLE = np.exp(1j * np.linspace(0, 2 * np.pi, 400))
_CIRCLE_X, _CIRCLE_Y = np.real(_CIRCLE), np.imag(_CIRCLE)


def _glorot_column(axes, n_glorot: int, key) -> dict:
    """Fig. 2: eigenvalues of a Glorot dense A (entries N(0, 1/N)) fill the unit disk."""
    glorot = LinearDenseRNN(1, n_glorot, key=key)
    eig = np.asarray(glorot.eigenvalues())
    ax = axes[0, 0]
    ax.scatter(np.real(eig), np.imag(eig), s=2, alpha=0.6, color="tab:gray")
    ax.plot(_CIRCLE_X, _CIRCLE_Y, "k", lw=0.8)
    ax.set_title(f"Glorot dense A, N={n_glorot}\n(Thm. 3.1, Fig. 2)", fontsize=9)
    ax.set_aspect("equal")
    glorot_u = np.abs(eig) ** 2  # uniform on the disk ⇔ |λ|² ~ U[0, 1]
    glorot_ks = scipy.stats.kstest(np.clip(glorot_u, 0, 1), "uniform")
    ax = axes[1, 0]
    ax.hist(glorot_u, bins=30, range=(0, 1.2), density=True, color="tab:gray", alpha=0.7)
    ax.axhline(1, color="k", lw=0.8, ls="--")
    ax.set_xlabel("|λ|² (disk: U[0, 1])", fontsize=8)
    ax.set_title(f"KS vs U[0,1] = {glorot_ks.statistic:.3f} (finite N)", fontsize=8)
    return dict(
        n=n_glorot,
        spectral_radius=float(np.abs(eig).max()),
        modulus_sq_ks=float(glorot_ks.statistic),
        fraction_modulus_below_half=float(np.mean(np.abs(eig) <= 0.5)),
    )


def _ring_column(axes, column: int, setting, n_ks: int, n_plot: int, key) -> dict:
    """One ring's samples, their KS tests against uniform |λ|² and arg λ, and its plots."""
    label, r_min, r_max, max_phase = setting
    one_minus, phase = ring_samples(n_ks, r_min, r_max, max_phase, key)
    stats, u_modulus, u_phase = ks_tests(one_minus, phase, r_min, r_max, max_phase)
    modulus = np.sqrt(1 - one_minus[:n_plot])
    lam = modulus * np.exp(1j * phase[:n_plot])
    ax = axes[0, column]
    if max_phase < math.pi:  # a thin slice at the unit circle: in polar coordinates
        ax.scatter(phase[:n_plot], one_minus[:n_plot], s=2, alpha=0.6)
        ax.set_xlabel("arg λ", fontsize=8)
        ax.set_ylabel("1 − |λ|²", fontsize=8)
    else:
        ax.scatter(np.real(lam), np.imag(lam), s=2, alpha=0.6)
        ax.plot(_CIRCLE_X, _CIRCLE_Y, "k", lw=0.8)
        ax.plot(r_min * _CIRCLE_X, r_min * _CIRCLE_Y, "k:", lw=0.6)
        ax.set_aspect("equal")
    ax.set_title(f"{label}\nLemma 3.2 (ring_init)", fontsize=9)
    ax = axes[1, column]
    ax.hist(u_modulus, bins=30, range=(0, 1), density=True, histtype="step", label="|λ|²")
    ax.hist(u_phase, bins=30, range=(0, 1), density=True, histtype="step", label="arg λ")
    ax.axhline(1, color="k", lw=0.8, ls="--")
    ax.set_ylim(0, 1.6)
    ax.set_xlabel("rescaled to [0, 1]", fontsize=8)
    ax.set_title(
        f"KS |λ|² {stats['modulus_sq_ks']:.4f} (p={stats['modulus_sq_p']:.2f}), "
        f"arg {stats['phase_ks']:.4f} (p={stats['phase_p']:.2f})",
        fontsize=7,
    )
    ax.legend(fontsize=7, loc="lower center")
    return dict(label=label, r_min=r_min, r_max=r_max, max_phase=max_phase, **stats)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv, __doc__, "ring_init")
    n_ks, n_plot, n_glorot = (2_000, 300, 100) if args.fast else (50_000, 800, 800)
    keys = iter(jax.random.split(jax.random.PRNGKey(args.seed), len(SETTINGS) + 1))
    fig, axes = plt.subplots(2, len(SETTINGS) + 1, figsize=(15, 6.2))
    results: dict = dict(n_samples=n_ks)
    results["glorot_dense"] = _glorot_column(axes, n_glorot, next(keys))
    results["settings"] = [
        _ring_column(axes, column, setting, n_ks, n_plot, next(keys))
        for column, setting in enumerate(SETTINGS, start=1)
    ]
    for ax in axes.flat:
        ax.tick_params(labelsize=7)
    fig.suptitle(
        f"Ring initialisation (Lemma 3.2): {n_ks} samples per ring; |λ|² and arg λ uniform",
        fontsize=10,
    )
    fig.tight_layout()
    results["png"] = save_figure(fig, args.out, "ring_init", dpi=75).name
    save_json(results, args.out, "ring_init")
    for s in results["settings"]:
        print(
            f"{s['label']:<30} KS |λ|² {s['modulus_sq_ks']:.4f} (p={s['modulus_sq_p']:.3f})  "
            f"KS arg {s['phase_ks']:.4f} (p={s['phase_p']:.3f})"
        )
    return results


if __name__ == "__main__":
    main()

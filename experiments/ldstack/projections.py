r"""LDStack Fig. 2: a MISO LDS approximated by averages of SISO LDS from random projections.

A multiple-input single-output LDS $s_{t+1} = A s_t + B x_t$, $y_t = C s_t$ ($n = 16$ states,
$d = 32$ inputs, $T = 1024$ steps, i.i.d. $\mathcal N(0, 1)$ inputs) is compared with
single-input LDS obtained by projecting the inputs on random directions
$r \sim \mathcal N(0, I_d)$: $\tilde x_t = r^\top x_t$ drives $(A, B r, C)$. Since
$\mathbb E[r r^\top] = I$, the SISO outputs are unbiased for the MISO output, and the average of
$k$ of them has variance $v/k$ for the variance $v$ of one.

Every SISO LDS runs as the library's reachable SIMO core in modal form
(`eqx_lru.baselines.StandardSIMOLDS`, LDStack eq. 3): eigenvalues $\lambda$ of $A$, $B' = 1$,
and $C' = (C P) \odot (P^{-1} B r)^\top$ for the eigenvectors $P$ of $A$ (the reachable
canonical form absorbs the input vector into the output). The MISO reference is a dense float64
NumPy loop.

    python -m experiments.ldstack.projections [--fast] [--out DIR] [--seed N]
"""

from experiments.paper.command import LDSTACK_FIGURES, parse_early

# Under `python -m`: --help and a bad flag are answered now, before JAX loads.
parse_early(__name__, __doc__, "projections", default_out=LDSTACK_FIGURES)

import math  # noqa: E402
from typing import Any  # noqa: E402

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from eqx_lru.baselines import StandardSIMOLDS  # noqa: E402
from experiments.paper.command import parse_args  # noqa: E402

from ._common import plt, save_figure, save_json  # noqa: E402


def random_miso(rng: np.random.Generator, n: int, d: int, radius: float = 0.97):
    """A Gaussian $A$ rescaled to spectral radius `radius`, $B \\sim \\mathcal N(0, 1/d)$,
    $C \\sim \\mathcal N(0, 1/n)$ (one output)."""
    a = rng.standard_normal((n, n))
    a *= radius / np.abs(np.linalg.eigvals(a)).max()
    return a, rng.standard_normal((n, d)) / math.sqrt(d), rng.standard_normal(n) / math.sqrt(n)


def miso_outputs(a, b, c, x) -> np.ndarray:
    """Dense float64 loop: $s_0 = 0$, $y_t = C s_t$, $s_{t+1} = A s_t + B x_t$."""
    s, y = np.zeros(a.shape[0]), np.zeros(x.shape[0])
    for t in range(x.shape[0]):
        y[t] = c @ s
        s = a @ s + b @ x[t]
    return y


def projection_variance(a, b, c, x) -> np.ndarray:
    r"""The exact variance of one SISO output per step, for Gaussian directions.

    $y^{(r)}_t = r^\top M_t r$ with $M_t = B^\top R_t$, $R_{t+1} = A^\top R_t + C^\top
    x_t^\top$, $R_0 = 0$, so $\mathbb E\, y^{(r)}_t = \operatorname{tr} M_t = y_t$ and
    $\operatorname{Var} y^{(r)}_t = \|M_t\|_F^2 + \operatorname{tr}(M_t^2)$."""
    r, out = np.zeros((a.shape[0], x.shape[1])), np.zeros(x.shape[0])
    for t in range(x.shape[0]):
        m = b.T @ r
        out[t] = np.sum(m * m) + np.trace(m @ m)
        r = a.T @ r + np.outer(c, x[t])
    return out


def siso_template(lam: np.ndarray) -> StandardSIMOLDS:
    """A `StandardSIMOLDS` with eigenvalues `lam` (closed under conjugation), no skip."""
    upper = lam[np.imag(lam) > 1e-12]
    real = np.real(lam[np.abs(np.imag(lam)) <= 1e-12])
    n = lam.shape[0]
    layer = StandardSIMOLDS(n, 1, reals=real.shape[0], key=jax.random.PRNGKey(0))
    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    return eqx.tree_at(
        lambda m: (m.alpha, m.beta, m.alpha_real, m.D),
        layer,
        (f32(np.real(upper)), f32(np.imag(upper)), f32(real), jnp.zeros(1, jnp.float32)),
    )


def siso_outputs(a, b, c, x, directions) -> np.ndarray:
    """One output sequence per projection direction (rows of `directions`), `(k, T)`."""
    lam, vectors = np.linalg.eig(a)
    # The template's order [α + iβ, α − iβ, real]; a real A has conjugate eigenvectors for
    # conjugate eigenvalues.
    upper, real = np.imag(lam) > 1e-12, np.abs(np.imag(lam)) <= 1e-12
    by_value = np.argsort(np.real(lam[real]))
    lam = np.concatenate([lam[upper], lam[upper].conj(), lam[real][by_value]])
    vectors = np.concatenate(
        [vectors[:, upper], vectors[:, upper].conj(), vectors[:, real][:, by_value]], axis=1
    )
    template = siso_template(lam)
    assert np.allclose(np.asarray(template.eigenvalues()), lam, atol=1e-5)
    c_modal = c @ vectors  # (n,)
    b_modal = np.linalg.solve(vectors, b @ directions.T)  # (n, k)
    c_prime = (c_modal[:, None] * b_modal).T  # (k, n): C' per projection

    def one(c_re, c_im, x_tilde):
        layer = eqx.tree_at(lambda m: (m.C_re, m.C_im), template, (c_re[None], c_im[None]))
        return layer(x_tilde)[:, 0]

    f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    run = jax.jit(jax.vmap(one))
    return np.asarray(
        run(f32(c_prime.real), f32(c_prime.imag), f32(x @ directions.T).T), np.float64
    )


def standard_init_moduli(n: int, draws: int) -> np.ndarray:
    """|λ| of `StandardSIMOLDS` initialisations (roots of random monic polynomials)."""
    keys = jax.random.split(jax.random.PRNGKey(1), draws)
    return np.concatenate(
        [np.abs(np.asarray(StandardSIMOLDS(n, 1, key=k).eigenvalues())) for k in keys]
    )


def relative_rms(approx: np.ndarray, exact: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean((approx - exact) ** 2, axis=-1) / np.mean(exact**2))


def measure(seed: int, fast: bool) -> tuple[dict, np.ndarray, np.ndarray, dict]:
    """A random MISO LDS and `count` SISO LDS from random projections: the results, the
    SISO outputs `ys`, the MISO output `y` and the errors of averages of k of them."""
    n, d = 16, 32
    length, count = (128, 32) if fast else (1024, 512)
    rng = np.random.default_rng(seed)
    a, b, c = random_miso(rng, n, d)
    x = rng.standard_normal((length, d))
    y = miso_outputs(a, b, c, x)
    ys = siso_outputs(a, b, c, x, rng.standard_normal((count, d)))
    # Sanity: with the identity as "directions" (d of them), the SISO sum is the MISO output.
    exact_split = siso_outputs(a, b, c, x, np.eye(d)).sum(0)
    single = relative_rms(ys, y)
    ks = [2**i for i in range(int(math.log2(count)) + 1)]
    errors = {k: relative_rms(ys.reshape(count // k, k, length).mean(1), y) for k in ks}
    results: dict[str, Any] = dict(
        n=n, d=d, length=length, projections=count,
        identity_split_relative_error=float(relative_rms(exact_split, y)),
        single_relative_rms=dict(mean=single.mean(), median=np.median(single), max=single.max()),
        relative_variance_single=float(np.mean(single**2)),
        expected_relative_variance_single=projection_variance(a, b, c, x).mean() / np.mean(y**2),
        averages=[
            dict(k=k, subsamples=len(e), relative_rms_mean=e.mean(),
                 relative_rms_of_mean_square=math.sqrt(np.mean(e**2)))
            for k, e in errors.items()
        ],
    )  # fmt: skip
    rms = [math.sqrt(np.mean(errors[k] ** 2)) for k in ks]
    results["log_log_slope"] = np.polyfit(np.log(ks), np.log(rms), 1)[0]
    moduli = standard_init_moduli(n, 10 if fast else 200)
    results["standard_init_moduli"] = dict(
        n=n, draws=len(moduli) // n, median=np.median(moduli),
        fraction_within_0_8_to_1_2=np.mean((moduli > 0.8) & (moduli < 1.2)),
        fraction_above_1=np.mean(moduli > 1), max=moduli.max(),
    )  # fmt: skip
    results["avg16_relative_rms"] = [float(v) for v in errors.get(16, errors[ks[-1]])[:2]]
    results["avg_all_relative_rms"] = float(errors[count][0])
    return results, ys, y, errors


def _outputs_panel(ax, results: dict, ys: np.ndarray, y: np.ndarray) -> None:
    length, count = results["length"], results["projections"]
    steps = np.arange(length)
    spread = np.percentile(np.abs(ys), 99)
    for row in ys:
        ax.plot(steps, row, color="0.82", lw=0.3)
    k = min(16, count)
    for i in range(2):
        label = f"average of {k} SISO" if i == 0 else None
        ax.plot(steps, ys[i * k : (i + 1) * k].mean(0), color="tab:blue", lw=0.8, label=label)
    ax.plot(steps, ys.mean(0), color="tab:red", lw=0.9, label=f"average of all {count} SISO")
    ax.plot(steps, y, color="k", lw=0.9, label="MISO LDS")
    ax.set_ylim(-spread, spread)
    ax.set_xlim(0, length)
    ax.set_title(
        f"MISO LDS (n={results['n']}, d={results['d']}, T={length}) vs {count} SISO LDS from "
        "random projections (gray)",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper right")


def _errors_panel(ax, results: dict, ks: list[int], rms: list[float]) -> None:
    ax.loglog(ks, rms, "o-", label=f"measured (slope {results['log_log_slope']:.2f})")
    v = results["expected_relative_variance_single"]
    ax.loglog(
        ks,
        [math.sqrt(v / k) for k in ks],
        "--",
        label=f"theory sqrt(v / k), v = {v:.1f} (exact variance of one projection)",
    )
    ax.set_xlabel("k (SISO LDS averaged)")
    ax.set_ylabel("relative RMS error vs MISO")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv, __doc__, "projections", default_out=LDSTACK_FIGURES)
    results, ys, y, errors = measure(args.seed, args.fast)
    ks = sorted(errors)
    rms = [math.sqrt(np.mean(errors[k] ** 2)) for k in ks]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7.5))
    _outputs_panel(top, results, ys, y)
    _errors_panel(bottom, results, ks, rms)
    fig.tight_layout()
    results["png"] = save_figure(fig, args.out, "projections").name
    save_json(results, args.out, "projections")
    print(
        f"one projection: relative RMS {results['single_relative_rms']['mean']:.2f} (mean over "
        f"{results['projections']}); averages: "
        + ", ".join(f"k={k}: {r:.3f}" for k, r in zip(ks, rms, strict=True))
        + f"; slope {results['log_log_slope']:.2f}"
    )
    return results


if __name__ == "__main__":
    main()

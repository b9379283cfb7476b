r"""§E.2 / Fig. 8: learning $\lambda^{100} = (\lambda^*)^{100}$ with the real+imaginary vs the
exponential parameterisation of one complex eigenvalue.

Loss $L(\hat\lambda) = \tfrac12|\hat\lambda^k - (\lambda^*)^k|^2$, $k = 100$, planted
$\lambda^* = e^{-\nu^* + i\theta^*}$ ($\nu^* = 0.005$, so $|\lambda^*|^{100} = e^{-1/2}$).
$\hat\lambda$ is built from two real parameters, either $(a, b)$ with $\hat\lambda = a + ib$
("real + imag", §3.2) or $(\nu, \theta)$ with $\hat\lambda = e^{-\nu + i\theta}$
("exponential", §3.3). As in the paper's Fig. 8 the initial magnitude is right and the phase
is not ($\theta_0 = \theta^* + \delta$): the model has to turn. Adam, 500 iterations.

The figure shows the loss landscapes in each parameterisation's own coordinates with one Adam
trajectory (square: start, star: after the last iteration) for a target near the real axis
and one near the imaginary axis ($\theta^* \to \pi/2$, where the paper reports real+imag
slowing down), and, over many random $\delta \sim U[-0.5, 0.5]$ and a sweep of $\theta^*$ and
learning rates, the fraction of runs that converge (final loss $< 10^{-6}$) and the median
number of iterations to a loss $< 10^{-4}$.

    python -m experiments.paper.parameterization [--fast] [--out DIR]
"""

from experiments.paper.command import parse_early

# Under `python -m`: --help and a bad flag are answered now, before JAX loads.
parse_early(__name__, __doc__, "parameterization")

import math  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from experiments.paper.command import parse_args  # noqa: E402

from .common import plt, save_figure, save_json  # noqa: E402

K = 100
NU_STAR = 0.005
PARAMS = ("real+imag", "exponential")
CONVERGED, FAST = 1e-6, 1e-4


def eigenvalue(p: jax.Array, param: str) -> jax.Array:
    if param == "real+imag":
        return jax.lax.complex(p[0], p[1])
    modulus = jnp.exp(-p[0])
    return jax.lax.complex(modulus * jnp.cos(p[1]), modulus * jnp.sin(p[1]))


def initial_parameters(theta0: jax.Array, param: str) -> jax.Array:
    """λ0 = e^{-ν* + iθ0}: the right magnitude, the wrong phase."""
    if param == "real+imag":
        r = math.exp(-NU_STAR)
        return jnp.stack([r * jnp.cos(theta0), r * jnp.sin(theta0)])
    return jnp.stack([jnp.full_like(theta0, NU_STAR), theta0])


def target(theta_star: float) -> complex:
    return complex(np.exp(K * (-NU_STAR + 1j * theta_star)))


def adam_run(theta_star, theta0, lr, param: str, steps: int):
    """One Adam run from phase `theta0` to the planted phase `theta_star` (both traceable,
    like `lr`); returns (losses (steps,), parameters (steps + 1, 2)).

    Traced under standard dtype promotion: optax's Adam computes `decay ** count`
    (float ** int32), which strict promotion (on in the test suite) rejects."""
    with jax.numpy_dtype_promotion("standard"):
        return _adam_run(theta_star, theta0, lr, param, steps)


def _adam_run(theta_star, theta0, lr, param, steps):
    modulus = jnp.exp(-K * NU_STAR)
    goal = jax.lax.complex(modulus * jnp.cos(K * theta_star), modulus * jnp.sin(K * theta_star))

    def loss_fn(p):
        return 0.5 * jnp.abs(eigenvalue(p, param) ** K - goal) ** 2

    optimiser = optax.adam(lr)
    p0 = initial_parameters(theta0, param)

    def step(carry, _):
        p, state = carry
        loss, grads = jax.value_and_grad(loss_fn)(p)
        updates, state = optimiser.update(grads, state, p)
        p_next = jnp.asarray(optax.apply_updates(p, updates))
        return (p_next, state), (loss, p_next)

    _, (losses, path) = jax.lax.scan(step, (p0, optimiser.init(p0)), None, length=steps)
    return losses, jnp.concatenate([p0[None], path])


def sweep(param: str, thetas, offsets, rates, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Every run at once (one compiled program): losses of shape (rates, thetas, offsets,
    steps) and parameter paths of shape (rates, thetas, offsets, steps + 1, 2)."""
    run = lambda lr, theta, offset: adam_run(theta, theta + offset, lr, param, steps)  # noqa: E731
    over_offsets = jax.vmap(run, in_axes=(None, None, 0))
    over_thetas = jax.vmap(over_offsets, in_axes=(None, 0, None))
    over_rates = jax.vmap(over_thetas, in_axes=(0, None, None))
    as_f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    losses, paths = jax.jit(over_rates)(as_f32(rates), as_f32(thetas), as_f32(offsets))
    return np.asarray(losses), np.asarray(paths, np.float64)


def landscape(param: str, theta_star: float, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """log10 loss on a grid of the parameterisation's own coordinates (float64 NumPy)."""
    X, Y = np.meshgrid(xs, ys)
    lam = X + 1j * Y if param == "real+imag" else np.exp(-X + 1j * Y)
    return np.log10(0.5 * np.abs(lam**K - target(theta_star)) ** 2 + 1e-12)


def _sizes(fast: bool) -> tuple[np.ndarray, int, list[float], int, int]:
    """(θ* values, random initial phases per θ*, learning rates, steps, landscape grid)."""
    if fast:
        return np.array([0.1, 0.3, 0.49]) * math.pi, 8, [1e-3, 1e-2], 200, 40
    return np.linspace(0.05, 0.5, 10) * math.pi, 64, [1e-3, 3e-3, 1e-2, 3e-2], 500, 200


def measure(seed: int, fast: bool) -> tuple[dict, dict]:
    """Every run of the sweep in both parameterisations: the results, and the runs
    `{param: (losses, paths)}` for the figure."""
    thetas, n_init, rates, steps, grid = _sizes(fast)
    rng = np.random.default_rng(seed)
    offsets = jnp.asarray(rng.uniform(-0.5, 0.5, size=n_init), jnp.float32)
    results: dict[str, Any] = dict(
        k=K, nu_star=NU_STAR, steps=steps, inits_per_target=n_init,
        init="magnitude |λ*|, phase θ* + δ, δ ~ U[-0.5, 0.5]", converged_threshold=CONVERGED,
        fast_threshold=FAST, theta_star_over_pi=thetas / math.pi, learning_rates=rates,
        converged_fraction={}, median_steps_to_fast={}, grid=grid,
    )  # fmt: skip
    runs = {}
    for param in PARAMS:
        runs[param] = sweep(param, thetas, offsets, rates, steps)
        losses = runs[param][0]  # (rates, thetas, offsets, steps)
        converged = losses[..., -1] < CONVERGED
        hit = losses < FAST
        first = np.where(hit.any(-1), hit.argmax(-1), steps)
        results["converged_fraction"][param] = {
            str(lr): converged[i].mean(-1) for i, lr in enumerate(rates)
        }
        results["median_steps_to_fast"][param] = {
            str(lr): np.median(first[i], axis=-1) for i, lr in enumerate(rates)
        }
    return results, runs


def _solution(param: str, theta_star: float) -> np.ndarray:
    """The planted λ* (one of the K solutions of λ^K = λ*^K) in `param`'s coordinates."""
    if param == "real+imag":
        r = math.exp(-NU_STAR)
        return np.array([r * math.cos(theta_star), r * math.sin(theta_star)])
    return np.array([NU_STAR, theta_star])


def _landscape_panel(fig, ax, param, theta_star, losses, paths, grid: int) -> np.ndarray:
    """The landscape around the runs `paths` with them drawn on it; which converged."""
    solution = _solution(param, theta_star)
    points = np.vstack([paths.reshape(-1, 2), solution[None]])
    low, high = np.percentile(points, 1, axis=0), np.percentile(points, 99, axis=0)
    pad = np.maximum(0.1 * (high - low), 0.01)
    xs = np.linspace(low[0] - pad[0], high[0] + pad[0], grid)
    ys = np.linspace(low[1] - pad[1], high[1] + pad[1], grid)
    # One colour scale for all panels; losses above 10 (|λ| > 1) are clipped.
    image = ax.contourf(
        xs, ys, landscape(param, theta_star, xs, ys), levels=np.linspace(-6, 1, 29),
        cmap="viridis", extend="both",
    )  # fmt: skip
    converged = losses[:, -1] < CONVERGED
    for path, ok in zip(paths, converged, strict=True):
        ax.plot(path[:, 0], path[:, 1], "-", color="w" if ok else "r", lw=0.7, alpha=0.9)
        ax.plot(*path[0], "s", color="w", ms=6, mec="k")
        ax.plot(*path[-1], "*", color="orange" if ok else "r", ms=11, mec="k")
    ax.plot(*solution, "k+", ms=10)
    ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(ys[0], ys[-1])
    fig.colorbar(image, ax=ax, label="log10 loss")
    ax.set_xlabel("Re λ" if param == "real+imag" else "ν")
    ax.set_ylabel("Im λ" if param == "real+imag" else "θ")
    return converged


def _landscapes(fig, axes, results: dict, runs: dict) -> None:
    """Landscapes with the first few runs of the sweep at lr = 1e-2 (where the two differ),
    for θ* nearest π/4 (the landscape least axis-aligned in (Re λ, Im λ)) and nearest π/2."""
    thetas = np.asarray(results["theta_star_over_pi"]) * math.pi
    rates = results["learning_rates"]
    shown = [int(np.argmin(np.abs(thetas - math.pi / 4))), len(thetas) - 1]
    shown_lr, n_show = 1e-2, 6
    results["trajectories"] = []
    for row, param in enumerate(PARAMS):
        for col, t in enumerate(shown):
            theta_star = float(thetas[t])
            losses, paths = (x[rates.index(shown_lr), t, :n_show] for x in runs[param])
            ax = axes[row, col]
            converged = _landscape_panel(fig, ax, param, theta_star, losses, paths, results["grid"])
            ax.set_title(
                f"{param}: θ* = {theta_star / math.pi:.2f}π, lr {shown_lr:g}: "
                f"{int(converged.sum())}/{n_show} converge",
                fontsize=9,
            )
            results["trajectories"].append(
                dict(param=param, theta_star=theta_star, lr=shown_lr, final_losses=losses[:, -1])
            )


def _sweep_panels(axes, results: dict) -> None:
    rates, x = results["learning_rates"], results["theta_star_over_pi"]
    colors = plt.cm.plasma(np.linspace(0, 0.85, len(rates)))
    for color, lr in zip(colors, rates, strict=True):
        for param, style in zip(PARAMS, ("s--", "o-"), strict=True):
            fraction = results["converged_fraction"][param][str(lr)]
            axes[0, 2].plot(x, fraction, style, color=color, ms=4, label=f"{param}, lr {lr:g}")
            steps = results["median_steps_to_fast"][param][str(lr)]
            axes[1, 2].plot(x, steps, style, color=color, ms=4)
    axes[0, 2].set_ylabel(f"fraction with final loss < {CONVERGED:g}")
    axes[0, 2].legend(fontsize=6, ncol=2, loc="lower left")
    axes[0, 2].set_ylim(-0.05, 1.05)
    axes[1, 2].set_ylabel(f"median iterations to loss < {FAST:g}")
    for ax in axes[:, 2]:
        ax.set_xlabel("θ* / π")
        ax.grid(alpha=0.3)
    axes[0, 2].set_title(
        f"{results['inits_per_target']} random phase offsets per θ*, {results['steps']} Adam "
        "iterations",
        fontsize=9,
    )


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv, __doc__, "parameterization")
    results, runs = measure(args.seed, args.fast)
    fig, axes = plt.subplots(2, 3, figsize=(14, 8))
    _landscapes(fig, axes, results, runs)
    _sweep_panels(axes, results)
    fig.suptitle(
        "Learning λ^100 = (λ*)^100: real+imag vs exponential parameterisation "
        "(Fig. 8; □ start, ★ end — red if not converged, + the planted λ*)",
        fontsize=10,
    )
    fig.tight_layout()
    results["png"] = save_figure(fig, args.out, "parameterization", dpi=75).name
    del results["grid"]
    save_json(results, args.out, "parameterization")
    for lr in results["learning_rates"]:
        ri = np.mean(results["converged_fraction"]["real+imag"][str(lr)])
        ex = np.mean(results["converged_fraction"]["exponential"][str(lr)])
        print(
            f"lr={lr:g}: converged fraction (mean over θ*): real+imag {ri:.2f}, "
            f"exponential {ex:.2f}"
        )
    return results


if __name__ == "__main__":
    main()

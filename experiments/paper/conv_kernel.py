r"""§E.2 / Fig. 7: learning a convolution with a one-layer linear vs tanh RNN.

Data as in §E.2: 32 sequences of length 100, $u_k = \sin(0.05\,a\,k)\cos(0.05\,c\,k)^2$ with
random $a, c$ (here $a, c \sim U[0.5, 3]$; the paper gives no range), targets the causal
convolution with $h_k = \tfrac1{10} e^{-0.015k} \cos(0.04k)^2$, $k = 0..99$ (a bump near
$k = 70$). Model: the ladder's `LinearDenseRNN` vs `DenseRNN(nonlinearity="tanh")`,
$d_\text{model} = 1$, 100 hidden units, Glorot initialisation on all matrices, trained
full-batch on the mean squared error with Adam (standard momenta) over a grid of learning
rates, several seeds each. The paper finds the linear RNN faster to converge at every
learning rate.

    python -m experiments.paper.conv_kernel [--fast] [--out DIR]
"""

from experiments.paper.command import parse_early

# Under `python -m`: --help and a bad flag are answered now, before JAX loads.
parse_early(__name__, __doc__, "conv_kernel")

from typing import Any  # noqa: E402

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from eqx_lru.ablation import DenseRNN, LinearDenseRNN  # noqa: E402
from experiments.paper.command import parse_args  # noqa: E402

from .common import plt, save_figure, save_json  # noqa: E402

LENGTH = 100
THRESHOLD = 1e-2  # a training MSE both models reach at their best learning rates


def kernel(length: int = LENGTH) -> np.ndarray:
    k = np.arange(length)
    return 0.1 * np.exp(-0.015 * k) * np.cos(0.04 * k) ** 2


def dataset(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Inputs (n, LENGTH, 1) and their causal convolutions with `kernel()`."""
    k = np.arange(LENGTH)
    a, c = rng.uniform(0.5, 3.0, size=(2, n, 1))
    u = np.sin(0.05 * a * k) * np.cos(0.05 * c * k) ** 2
    y = np.stack([np.convolve(u_i, kernel())[:LENGTH] for u_i in u])
    return u[..., None].astype(np.float32), y[..., None].astype(np.float32)


def make_model(kind: str, d_state: int, key) -> eqx.Module:
    if kind == "linear":
        return LinearDenseRNN(1, d_state, key=key)
    return DenseRNN(1, d_state, nonlinearity="tanh", key=key)


@eqx.filter_jit
def initial_models(kind: str, d_state: int, keys):
    """One model per key, stacked (vmapped): the same key gives the same initialisation at
    every learning rate."""
    return eqx.filter_vmap(lambda k: make_model(kind, d_state, k))(keys)


def train_all(kind, d_state, keys, learning_rates, u, y, steps):
    """Train one model per (seed, learning rate) in parallel (vmapped); returns the
    training-loss history, shape (seeds, rates, steps), and the initial models, stacked
    seed-major (seed s at rate r is entry s * rates + r)."""
    n_seeds, n_rates = len(keys), len(learning_rates)
    models = initial_models(kind, d_state, jnp.repeat(keys, n_rates, axis=0))
    params, static = eqx.partition(models, eqx.is_array)
    rates = jnp.tile(jnp.asarray(learning_rates, jnp.float32), n_seeds)

    def loss_fn(p):
        model = eqx.combine(p, static)
        return jnp.mean((jax.vmap(model)(u) - y) ** 2)

    def train(p, lr):
        optimiser = optax.adam(lr)

        def step(carry, _):
            p, state = carry
            loss, grads = jax.value_and_grad(loss_fn)(p)
            updates, state = optimiser.update(grads, state, p)
            return (optax.apply_updates(p, updates), state), loss

        _, losses = jax.lax.scan(step, (p, optimiser.init(p)), None, length=steps)
        return losses

    # optax's Adam computes `decay ** count` (float ** int32), which JAX's strict dtype
    # promotion (on in the test suite) rejects: train under standard promotion.
    with jax.numpy_dtype_promotion("standard"):
        losses = jax.jit(jax.vmap(train))(params, rates)
    return np.asarray(losses).reshape(n_seeds, n_rates, steps), models


def _sizes(fast: bool) -> tuple[int, int, int, list[float], int]:
    """(sequences, hidden units, steps, learning rates, seeds)."""
    if fast:
        return 4, 8, 20, [1e-3, 1e-2], 1
    return 32, 100, 1_000, [1e-4, 3e-4, 1e-3, 3e-3, 1e-2], 3


def _summarise(results: dict, kind: str, history: np.ndarray) -> None:
    """Final losses (mean of the last 5% of steps), their log10 mean and s.e. over the seeds,
    and the median steps to `THRESHOLD`, per learning rate, into `results`."""
    learning_rates, steps = results["learning_rates"], results["steps"]
    n_seeds = results["seeds"]
    tail = max(1, steps // 20)
    final = history[:, :, -tail:].mean(-1)  # (seeds, rates)
    log_final = np.log10(final)
    se = log_final.std(0, ddof=1) / np.sqrt(n_seeds) if n_seeds > 1 else 0 * log_final[0]
    rates = list(map(str, learning_rates))
    results["final_loss"][kind] = {lr: final[:, i] for i, lr in enumerate(rates)}
    results["final_log10_mean"][kind] = dict(zip(rates, log_final.mean(0), strict=True))
    results["final_log10_se"][kind] = dict(zip(rates, se, strict=True))
    reached = history <= THRESHOLD
    first = np.where(reached.any(-1), reached.argmax(-1), steps)  # `steps` = never
    results["median_steps_to_threshold"][kind] = dict(
        zip(rates, np.median(first, axis=0), strict=True)
    )


def measure(seed: int, fast: bool) -> tuple[dict, dict, np.ndarray, np.ndarray]:
    """Train both models at every learning rate; the results, the loss histories per
    model and the data `(u, y)`."""
    n_seq, d_state, steps, learning_rates, n_seeds = _sizes(fast)
    rng = np.random.default_rng(seed)
    u, y = dataset(n_seq, rng)
    keys = jax.random.split(jax.random.PRNGKey(seed), n_seeds)
    results: dict[str, Any] = dict(
        n_sequences=n_seq, length=LENGTH, d_state=d_state, steps=steps, seeds=n_seeds,
        learning_rates=learning_rates,
        summary="final loss = mean training MSE over the last 5% of iterations; across seeds "
        "the geometric mean (losses span orders of magnitude) and the s.e. of log10",
        final_loss={}, final_log10_mean={}, final_log10_se={}, linear_better={},
        threshold=THRESHOLD, median_steps_to_threshold={},
    )  # fmt: skip
    histories, initial = {}, {}
    for kind in ("linear", "tanh"):
        histories[kind], initial[kind] = train_all(kind, d_state, keys, learning_rates, u, y, steps)
        _summarise(results, kind, histories[kind])
    means = results["final_log10_mean"]
    for lr in map(str, learning_rates):
        results["linear_better"][lr] = bool(means["linear"][lr] < means["tanh"][lr])
    results["initial_loss"] = {kind: histories[kind][:, 0, 0] for kind in histories}
    # A Glorot A of finite size has spectral radius around 1, often above: the linear RNN's
    # state then grows over the 100 steps, which the tanh RNN's bounded state cannot.
    A = np.asarray(initial["linear"].A, np.float64)[:: len(learning_rates)]
    results["spectral_radius_A"] = np.abs(np.linalg.eigvals(A)).max(-1)
    return results, histories, u, y


def _data_panel(ax, u: np.ndarray, y: np.ndarray) -> None:
    ax.plot(kernel(), "k", lw=1.5, label="kernel h_k")
    ax.plot(u[0, :, 0], lw=0.8, label="an input u")
    ax.plot(y[0, :, 0], lw=0.8, label="its target y = h ∗ u")
    ax.set_xlabel("k")
    ax.set_title("h_k = exp(−0.015k) cos(0.04k)² / 10", fontsize=9)
    ax.legend(fontsize=7)


def _curves_panel(ax, results: dict, histories: dict) -> None:
    learning_rates = results["learning_rates"]
    colors = plt.cm.plasma(np.linspace(0, 0.85, len(learning_rates)))
    for color, (i, lr) in zip(colors, enumerate(learning_rates), strict=True):
        for kind, style in (("linear", "-"), ("tanh", "--")):
            curve = np.exp(np.log(histories[kind][:, i]).mean(0))
            ax.plot(curve, style, color=color, lw=1, label=f"{kind}, lr={lr:g}")
    ax.set_yscale("log")
    ax.set_xlabel("Adam iteration")
    ax.set_ylabel("training MSE (geometric mean over seeds)")
    ax.set_title("linear (solid) vs tanh (dashed)", fontsize=9)
    ax.legend(fontsize=6, ncol=2)


def _final_panel(ax, results: dict) -> None:
    learning_rates = results["learning_rates"]
    for kind, marker, shift in (("linear", "o-", 0.93), ("tanh", "s--", 1.07)):
        mean = [results["final_log10_mean"][kind][str(lr)] for lr in learning_rates]
        se = [results["final_log10_se"][kind][str(lr)] for lr in learning_rates]
        line = ax.errorbar(learning_rates, mean, yerr=se, fmt=marker, capsize=3, label=kind)
        # Every seed too: a mean over a few seeds can hide one that diverged.
        for i, lr in enumerate(learning_rates):
            seeds = np.log10(results["final_loss"][kind][str(lr)])
            ax.plot(
                [lr * shift] * len(seeds), seeds, marker[0], color=line[0].get_color(), ms=3,
                alpha=0.5, mfc="none", label="each seed" if i == 0 and kind == "linear" else None,
            )  # fmt: skip
    ax.set_xscale("log")
    ax.set_ylabel("log10 final MSE")
    ax.set_xlabel("learning rate")
    ax.set_title(
        f"final loss after {results['steps']} iterations ({results['seeds']} seeds; geometric "
        "mean ± s.e.)",
        fontsize=9,
    )
    ax.legend(fontsize=8)


def figure(results: dict, histories: dict, u: np.ndarray, y: np.ndarray):
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    _data_panel(axes[0], u, y)
    _curves_panel(axes[1], results, histories)
    _final_panel(axes[2], results)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"Learning a length-{LENGTH} convolution with a one-layer RNN, {results['d_state']} "
        "hidden units (Fig. 7)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv, __doc__, "conv_kernel")
    results, histories, u, y = measure(args.seed, args.fast)
    results["png"] = save_figure(figure(results, histories, u, y), args.out, "conv_kernel").name
    save_json(results, args.out, "conv_kernel")
    for lr in map(str, results["learning_rates"]):
        print(
            f"lr={lr}: log10 final MSE linear {results['final_log10_mean']['linear'][lr]:.2f}, "
            f"tanh {results['final_log10_mean']['tanh'][lr]:.2f}; median steps to MSE "
            f"{THRESHOLD:g}: linear {results['median_steps_to_threshold']['linear'][lr]:.0f}, "
            f"tanh {results['median_steps_to_threshold']['tanh'][lr]:.0f}"
        )
    print(f"spectral radius of A per seed: {results['spectral_radius_A']}")
    return results


if __name__ == "__main__":
    main()

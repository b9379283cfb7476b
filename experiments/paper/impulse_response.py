r"""Fig. 4: impulse responses of a diagonal linear recurrence with uniform vs small phase.

$x \in \mathbb C^3$, $x_k = \Lambda x_{k-1} + B u_k$ with $B = 1$ and the impulse
$u = (1, 0, \dots, 0)$ of length 16k, so $x_k = \lambda^k$: the kernel each mode convolves
its input with. $\lambda_j = e^{-\nu + i\theta_j}$, $\nu = 0.00005$ as in the paper, and
$\theta_j \sim U[0, 2\pi]$ or $U[0, \pi/50]$. With uniform phase each kernel oscillates
thousands of times over 16k steps (L/4 on average), recalling $u_0$ as a fast local pattern; a
small phase gives a few slow oscillations, i.e. a global feature (§3.4). Runs on
`eqx_lru.linear_recurrence`.

    python -m experiments.paper.impulse_response [--fast] [--out DIR]
"""

from experiments.paper.command import parse_early

# Under `python -m`: --help and a bad flag are answered now, before JAX loads.
parse_early(__name__, __doc__, "impulse_response")

import math  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from eqx_lru import Diagonal, linear_recurrence  # noqa: E402
from experiments.paper.command import parse_args  # noqa: E402

from .common import plt, save_figure, save_json  # noqa: E402

NU = 0.00005
PHASES = [("uniform phase θ ~ U[0, 2π]", 2 * math.pi), ("small phase θ ~ U[0, π/50]", math.pi / 50)]


def impulse_response(lam: jax.Array, length: int) -> jax.Array:
    """All states x_0..x_{L-1} under the unit impulse at k = 0 (B = 1): x_k = λ^k."""
    impulse = jnp.zeros((length,) + lam.shape, lam.dtype).at[0].set(1)
    return linear_recurrence(lam, impulse, algebra=Diagonal())


def _mean_folded(max_phase: float) -> float:
    """E[min(θ, 2π − θ)] for θ ~ U[0, max_phase], max_phase <= 2π."""
    if max_phase <= math.pi:
        return max_phase / 2
    # ∫_0^π θ dθ + ∫_π^m (2π − θ) dθ, over m.
    return (
        math.pi**2 / 2 + 2 * math.pi * (max_phase - math.pi) - (max_phase**2 - math.pi**2) / 2
    ) / max_phase


def _case(ax, key, label: str, max_phase: float, length: int) -> tuple[dict, np.ndarray]:
    """Three modes with phases uniform in [0, max_phase]: their impulse response (drawn on
    `ax`) and its record."""
    steps = np.arange(length)
    theta = jax.random.uniform(key, (3,), maxval=max_phase)
    lam = jnp.exp(-NU) * jax.lax.complex(jnp.cos(theta), jnp.sin(theta))
    x = np.asarray(impulse_response(lam, length))
    theta64 = np.asarray(theta, np.float64)
    # Sanity: the scan gives λ^k (float32 rounding only).
    exact = np.exp((-NU + 1j * theta64)[None, :] * steps[:, None])
    # Re λ^k = e^{-νk} cos(θk) and cos(θk) = cos((2π - θ)k) at integer k: the visible
    # frequency is the phase folded into [0, π].
    folded = np.minimum(theta64, 2 * math.pi - theta64)
    oscillations = folded * length / (2 * math.pi)
    expected = _mean_folded(max_phase) / (2 * math.pi)  # E over θ ~ U[0, max_phase]
    case = dict(
        label=label,
        max_phase=max_phase,
        theta=theta64,
        oscillations_over_length=oscillations,
        oscillations_over_1024=folded * 1024 / (2 * math.pi),
        expected_oscillations_over_length=expected * length,
        expected_oscillations_over_1024=expected * 1024,
        max_abs_error_vs_closed_form=float(np.abs(x - exact).max()),
    )
    for j in range(3):
        ax.plot(
            steps,
            np.real(x[:, j]),
            lw=0.4,
            label=f"Re x[{j}]: θ={float(theta[j]):.4f}, {oscillations[j]:.1f} oscillations",
        )
    ax.set_title(f"{label}, ν = {NU}, L = {length}", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    ax.set_xlim(0, length)
    return case, x


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv, __doc__, "impulse_response")
    length, short = (2048, 256) if args.fast else (16_384, 1_024)
    keys = jax.random.split(jax.random.PRNGKey(args.seed), len(PHASES))
    results: dict[str, Any] = dict(
        nu=NU, length=length, modes=3, decay_at_end=math.exp(-NU * (length - 1)), cases=[]
    )
    fig, axes = plt.subplots(len(PHASES) + 1, 1, figsize=(10, 7))
    for ax, key, (label, max_phase) in zip(axes[:-1], keys, PHASES, strict=True):
        case, x = _case(ax, key, label, max_phase, length)
        results["cases"].append(case)
        if max_phase > math.pi:
            # The same uniform-phase kernels on a length-1024 task (sCIFAR, PathFinder).
            axes[-1].plot(np.arange(short), np.real(x[:short]), lw=0.6)
            axes[-1].set_title(
                f"the uniform-phase kernels over the first {short} steps", fontsize=9
            )
            axes[-1].set_xlim(0, short)
    for ax in axes:
        ax.set_ylim(-1.05, 1.05)
        ax.tick_params(labelsize=7)
    axes[-1].set_xlabel("step k")
    fig.suptitle("Impulse response x_k = λ^k of 3 modes (Fig. 4)", fontsize=10)
    fig.tight_layout()
    results["png"] = save_figure(fig, args.out, "impulse_response", dpi=70).name
    save_json(results, args.out, "impulse_response")
    for case in results["cases"]:
        counts = ", ".join(f"{c:.1f}" for c in case["oscillations_over_length"])
        print(
            f"{case['label']}: oscillations over {length} steps: {counts} "
            f"(expected {case['expected_oscillations_over_length']:.0f} per mode)"
        )
    return results


if __name__ == "__main__":
    main()

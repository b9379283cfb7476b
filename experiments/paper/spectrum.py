r"""Spectrum and memory diagnostic for any model containing LRU layers.

`spectrum_report(model)` walks a pytree (an `LRUModel`, a list of layers, a dict, …) for
recurrent layers — every `eqx_lru.AbstractLRU` (complex or real form) and every diagonal or
dense core of the ablation ladder — and reports per layer the quantiles of $|\lambda|$, of
$\arg\lambda$ and of the effective memory length $1/(1 - |\lambda|)$, the number of steps over
which a mode's response decays by a factor $e$. `plot_spectrum(model, path)` draws each
layer's eigenvalues on the complex plane and the distribution of memory lengths.

Layers stacked along a leading axis (built with `eqx.filter_vmap`, e.g. for a scan over
depth) are reported one by one as `name[i]`.

    python -m experiments.paper.spectrum [--fast] [--out DIR]

The command line runs on a freshly initialised stack of LRU layers at the paper's rings
(Table 8). Reading a checkpoint written by the LRA trainer (`eqx.tree_serialise_leaves`)
needs a skeleton of the same model to deserialise into, i.e. the trainer's model config;
that is left for when the trainer lands: `spectrum_report(eqx.tree_deserialise_leaves(path,
skeleton))` is all it takes.
"""

from experiments.paper.command import parse_early

# Under `python -m`: --help and a bad flag are answered now, before JAX loads.
parse_early(__name__, __doc__, "spectrum")

import math  # noqa: E402

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from eqx_lru import AbstractLRU, ComplexLRU, RealLRU  # noqa: E402
from eqx_lru.ablation import AbstractAblationCore, AbstractDenseRNN, DiagonalRNN  # noqa: E402
from experiments.paper.command import parse_args  # noqa: E402

from .common import plt, save_figure, save_json  # noqa: E402

QUANTILES = (0.0, 0.1, 0.5, 0.9, 1.0)
_LAYER_TYPES = (AbstractLRU, AbstractAblationCore)


def _is_layer(node) -> bool:
    return isinstance(node, _LAYER_TYPES)


def find_layers(model) -> list[tuple[str, eqx.Module]]:
    """Every recurrent layer in the pytree `model`, with its path (`a/0/b`)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(model, is_leaf=_is_layer)
    return [
        (jax.tree_util.keystr(path, simple=True, separator="/") or "model", leaf)
        for path, leaf in leaves
        if _is_layer(leaf)
    ]


def _eigenvalues(layer) -> np.ndarray:
    """λ of a layer, shape (*stack, d_state): layers stacked along leading axes (as built by
    `eqx.filter_vmap`) are unstacked by vmapping `eigenvalues()` over those axes."""
    if isinstance(layer, AbstractDenseRNN):
        return np.linalg.eigvals(np.asarray(layer.A, np.float64))  # batched over the stack
    return np.asarray(_stacked_eigenvalues(layer, layer.D.ndim - 1), np.complex128)


@eqx.filter_jit
def _stacked_eigenvalues(layer, depth: int):
    """`layer.eigenvalues()` vmapped over `depth` leading stack axes (D is (d_model,) per
    layer); compiled once per layer structure."""
    fn = lambda m: m.eigenvalues()  # noqa: E731
    for _ in range(depth):
        fn = eqx.filter_vmap(fn)
    return fn(layer)


def layer_spectra(model) -> list[dict]:
    """Per layer (stacked layers split): name, type, eigenvalues (complex128) and
    1 - |λ| (float64, computed as -expm1(-e^{ν_log}) for LRU layers: exact near |λ| = 1)."""
    spectra = []
    for name, layer in find_layers(model):
        eigenvalues = _eigenvalues(layer)
        if isinstance(layer, AbstractLRU):
            one_minus = -np.expm1(-np.exp(np.asarray(layer.nu_log, np.float64)))
        else:
            one_minus = 1 - np.abs(eigenvalues)
        lead = eigenvalues.shape[:-1]
        for index in np.ndindex(*lead):
            suffix = "".join(f"[{i}]" for i in index)
            spectra.append(
                dict(
                    name=name + suffix,
                    type=type(layer).__name__,
                    eigenvalues=eigenvalues[index],
                    one_minus_modulus=one_minus[index],
                )
            )
    return spectra


def _quantiles(values: np.ndarray) -> dict[str, float]:
    # Sample quantiles without interpolation: memory lengths may be inf (|λ| >= 1).
    return {
        f"q{int(q * 100)}": float(np.quantile(values, q, method="inverted_cdf")) for q in QUANTILES
    }


def spectrum_report(model) -> dict:
    """Per-layer eigenvalue statistics and memory lengths of every recurrent layer in `model`.

    **Returns:** `{"quantiles": [...], "layers": [{"name", "type", "d_state", "modulus",
    "phase", "memory_length", "unstable"}, ...]}` where `modulus`, `phase` (|arg λ| in
    [0, π]) and `memory_length` (1/(1 - |λ|), `inf` for |λ| >= 1) hold quantiles
    `q0, q10, q50, q90, q100`, and `unstable` counts modes with |λ| >= 1.
    """
    layers = []
    for spectrum in layer_spectra(model):
        one_minus = spectrum["one_minus_modulus"]
        with np.errstate(divide="ignore"):
            memory = np.where(one_minus > 0, 1 / np.where(one_minus > 0, one_minus, 1), np.inf)
        layers.append(
            dict(
                name=spectrum["name"],
                type=spectrum["type"],
                d_state=int(one_minus.size),
                modulus=_quantiles(np.abs(spectrum["eigenvalues"])),
                phase=_quantiles(np.abs(np.angle(spectrum["eigenvalues"]))),
                memory_length=_quantiles(memory),
                unstable=int(np.sum(one_minus <= 0)),
            )
        )
    return dict(quantiles=list(QUANTILES), layers=layers)


def plot_spectrum(model, path) -> None:
    """Eigenvalues on the complex plane and memory-length distributions, one colour per layer,
    written as a PNG to `path`."""
    from pathlib import Path

    spectra = layer_spectra(model)
    fig, (plane, memory_ax) = plt.subplots(1, 2, figsize=(11, 4.8))
    circle = np.exp(1j * np.linspace(0, 2 * math.pi, 400))
    plane.plot(np.real(circle), np.imag(circle), "k", lw=0.8)
    colors = plt.cm.tab10(np.arange(len(spectra)) % 10)
    for color, spectrum in zip(colors, spectra, strict=True):
        lam = spectrum["eigenvalues"]
        plane.scatter(lam.real, lam.imag, s=4, color=color, alpha=0.7)
        one_minus = spectrum["one_minus_modulus"]
        memory = np.sort(1 / one_minus[one_minus > 0])  # unstable modes (|λ| >= 1) left out
        memory_ax.step(
            memory,
            1 - np.arange(len(memory)) / len(memory),
            where="post",
            color=color,
            lw=1.2,
            label=spectrum["name"],
        )
    plane.set_aspect("equal")
    plane.set_xlabel("Re λ")
    plane.set_ylabel("Im λ")
    plane.set_title("eigenvalues per layer", fontsize=10)
    memory_ax.set_xscale("log")
    memory_ax.set_xlabel("memory length 1 / (1 − |λ|)  [steps]")
    memory_ax.set_ylabel("fraction of modes with longer memory")
    memory_ax.set_title("memory lengths per layer (complementary CDF)", fontsize=10)
    memory_ax.grid(alpha=0.3, which="both")
    memory_ax.legend(fontsize=7, loc="upper center")
    fig.tight_layout()
    path = Path(path)
    save_figure(fig, path.parent, path.stem)


@eqx.filter_jit  # one compilation instead of one per initialisation op
def demo_model(d_model: int, d_state: int, key) -> dict:
    """A freshly initialised stack: one LRU per ring of the paper's Table 8, plus a real-form
    LRU and a layer-stacked pair built with `eqx.filter_vmap`, to show what the walk finds."""
    keys = iter(jax.random.split(key, 6))
    rings = {
        "ListOps [0, 0.99]": (0.0, 0.99, 2 * math.pi),
        "Text [0.5, 0.9]": (0.5, 0.9, 2 * math.pi),
        "sCIFAR [0.9, 0.999]": (0.9, 0.999, 2 * math.pi),
        "PathX [0.999, 0.9999] π/10": (0.999, 0.9999, math.pi / 10),
    }
    model: dict[str, eqx.Module] = {
        name: ComplexLRU(d_model, d_state, r_min=a, r_max=b, max_phase=p, key=next(keys))
        for name, (a, b, p) in rings.items()
    }
    model["real form [0.9, 0.999]"] = RealLRU(
        d_model, d_state, r_min=0.9, r_max=0.999, key=next(keys)
    )
    model["stacked diag_exp"] = eqx.filter_vmap(
        lambda k: DiagonalRNN(d_model, d_state // 4, parameterisation="exp", key=k)
    )(jax.random.split(next(keys), 2))
    return model


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv, __doc__, "spectrum")
    d_model, d_state = (4, 16) if args.fast else (64, 256)
    model = demo_model(d_model, d_state, jax.random.PRNGKey(args.seed))
    report = spectrum_report(model)
    plot_spectrum(model, args.out / "spectrum.png")
    report["png"] = "spectrum.png"
    report["model"] = f"demo stack (fresh init), d_model={d_model}, d_state={d_state}"
    save_json(report, args.out, "spectrum")
    for layer in report["layers"]:
        m = layer["memory_length"]
        print(
            f"{layer['name']:<30} {layer['type']:<12} memory 1/(1-|λ|): median {m['q50']:.1f}, "
            f"90% {m['q90']:.1f}, max {m['q100']:.1f} steps"
        )
    return report


if __name__ == "__main__":
    main()

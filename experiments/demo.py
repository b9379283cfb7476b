"""The main offline demo: `./dev.sh demo` (or `python -m experiments.demo`).

Part 1 builds a complex and a real LRU from one key, shows they compute the same
function (outputs and gradients), and times both under `jax.jit`.
"""

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp

import eqx_lru


def _median_seconds(fn, *args, repeats: int = 5) -> float:
    jax.block_until_ready(fn(*args))  # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def parity_and_speed(*, d_model: int, d_state: int, length: int, batch: int, seed: int) -> None:
    """Print the max difference between the two forms and their fwd / fwd+bwd times."""
    key_layer, key_input = jax.random.split(jax.random.PRNGKey(seed))
    layers = {
        "complex": eqx_lru.ComplexLRU(d_model, d_state, r_min=0.9, r_max=0.999, key=key_layer),
        "real": eqx_lru.RealLRU(d_model, d_state, r_min=0.9, r_max=0.999, key=key_layer),
    }
    u = jax.random.normal(key_input, (batch, length, d_model))

    @eqx.filter_jit
    def forward(layer, u):
        return jax.vmap(layer)(u)

    @eqx.filter_jit
    def loss_and_grad(layer, u):
        return eqx.filter_value_and_grad(lambda m, u: jnp.mean(jax.vmap(m)(u)))(layer, u)

    outputs = {name: forward(layer, u) for name, layer in layers.items()}
    grads = {name: loss_and_grad(layer, u)[1] for name, layer in layers.items()}
    scale = float(jnp.max(jnp.abs(outputs["complex"])))
    out_diff = float(jnp.max(jnp.abs(outputs["complex"] - outputs["real"])))
    grad_diff = max(
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(
            jax.tree_util.tree_leaves(eqx.filter(grads["complex"], eqx.is_array)),
            jax.tree_util.tree_leaves(eqx.filter(grads["real"], eqx.is_array)),
        )
    )
    print(
        f"One key, two forms (H={d_model}, N={d_state}, L={length}, batch={batch}, "
        f"method={eqx_lru.default_method()!r} on {jax.default_backend()}):"
    )
    print(f"  max |y_complex - y_real| = {out_diff:.2e} (max |y| = {scale:.2f})")
    print(f"  max |grad_complex - grad_real| over all parameters = {grad_diff:.2e}")
    for name, layer in layers.items():
        fwd = _median_seconds(forward, layer, u)
        bwd = _median_seconds(loss_and_grad, layer, u)
        print(f"  {name:>7}: forward {fwd * 1e3:7.1f} ms   forward+backward {bwd * 1e3:7.1f} ms")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    parity_and_speed(d_model=128, d_state=256, length=1024, batch=8, seed=args.seed)


if __name__ == "__main__":
    main()

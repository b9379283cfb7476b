"""Two more measurements: the cost of RNN (step) mode, and the error of a bfloat16 compute dtype.

`python -m experiments.bench.extras step|precision JSON` runs one in a child process and prints
one JSON line.
"""

import json
import math
import sys
import time

import numpy as np


def step_cost(sizes, *, tokens: int, calls: int) -> list[dict]:
    """Per-token latency of `layer.step` under `jax.jit` for each (H, N) and form.

    - `call_us`: one jitted call per token from Python, waiting for each result (what a
      token-by-token generation loop pays: dispatch included);
    - `scan_us`: `tokens` steps inside one jitted `lax.scan`, divided by `tokens` (the
      compute alone).
    """
    import jax

    from . import impls

    rows = []
    for d_model, d_state in sizes:
        for form in ("complex", "real"):
            layer = impls.layer(form, d_model, d_state, key=jax.random.PRNGKey(0))
            u = jax.random.normal(jax.random.PRNGKey(1), (tokens, d_model))
            step = jax.jit(lambda layer, s, x: layer.step(s, x))
            state = layer.init_state()
            state, y = step(layer, state, u[0])
            jax.block_until_ready(y)
            times = []
            for t in range(calls):
                start = time.perf_counter()
                state, y = step(layer, state, u[t % tokens])
                jax.block_until_ready(y)
                times.append(time.perf_counter() - start)

            @jax.jit
            def stream(layer, u):
                return jax.lax.scan(lambda s, x: layer.step(s, x), layer.init_state(), u)[1]

            jax.block_until_ready(stream(layer, u))
            scans = []
            for _ in range(5):
                start = time.perf_counter()
                jax.block_until_ready(stream(layer, u))
                scans.append(time.perf_counter() - start)
            rows.append(
                {
                    "H": d_model,
                    "N": d_state,
                    "form": form,
                    "call_us": 1e6 * float(np.median(times)),
                    "scan_us": 1e6 * float(np.median(scans)) / tokens,
                }
            )
    return rows


def _variants(d_model: int, d_state: int, ring) -> dict:
    """float32 both forms and the real form's bfloat16 compute dtype, one key."""
    import jax
    import jax.numpy as jnp

    import eqx_lru

    key = jax.random.PRNGKey(0)
    kwargs = dict(r_min=ring[0], r_max=ring[1], max_phase=ring[2], dtype=jnp.float32)
    return {
        "complex f32": eqx_lru.ComplexLRU(d_model, d_state, key=key, **kwargs),
        "real f32": eqx_lru.RealLRU(d_model, d_state, key=key, **kwargs),
        "real bf16": eqx_lru.RealLRU(
            d_model, d_state, key=key, compute_dtype=jnp.bfloat16, **kwargs
        ),
    }


def _output_and_grads(layer, u, w):
    """`y = layer(u)` (batched) and the gradient of `mean(w * y)` by parameter name."""
    import jax
    import jax.numpy as jnp

    from . import impls

    def loss(params, u):
        y = jax.vmap(params)(u)
        return jnp.mean(w.astype(y.dtype) * y), y

    (_, y), grads = jax.value_and_grad(loss, has_aux=True)(layer, u)
    return y, {n: getattr(grads, n) for n in impls.PARAM_NAMES}


def _rel(x, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.linalg.norm(np.asarray(x, np.float64) - ref) / np.linalg.norm(ref))


def precision(configs, *, batch: int) -> list[dict]:
    """Error of float32 (both forms) and of `RealLRU(compute_dtype=bfloat16)` against the same
    layer in float64: relative RMS error of the output and of the gradient of
    `mean(w * y)` (w random), worst parameter."""
    import jax
    import jax.numpy as jnp

    from . import impls

    jax.config.update("jax_enable_x64", True)
    run = jax.jit(_output_and_grads)
    rows = []
    for d_model, d_state, length, ring in configs:
        variants = _variants(d_model, d_state, ring)
        truth_layer = jax.tree.map(
            lambda x: x.astype(jnp.float64) if isinstance(x, jax.Array) else x,
            variants["complex f32"],
        )
        u = jax.random.normal(jax.random.PRNGKey(1), (batch, length, d_model), jnp.float32)
        w = jax.random.normal(jax.random.PRNGKey(2), (batch, length, d_model), jnp.float32)
        y_true, g_true = run(truth_layer, u.astype(jnp.float64), w.astype(jnp.float64))
        for name, layer in variants.items():
            y, grads = run(layer, u, w)
            errors = {n: _rel(grads[n], g_true[n]) for n in impls.PARAM_NAMES}
            worst = max(errors, key=lambda n: errors[n])
            rows.append(
                {
                    "H": d_model,
                    "N": d_state,
                    "L": length,
                    "ring": ring,
                    "variant": name,
                    "y_err": _rel(y, y_true),
                    "grad_err": errors[worst],
                    "grad_worst": worst,
                    "grad_err_u_proj": max(errors[n] for n in ("B_re", "B_im", "C_re", "C_im")),
                }
            )
    return rows


PATHX_RING = (0.999, 0.9999, math.pi / 10)
DEFAULT_RING = (0.0, 1.0, 2 * math.pi)


def main(argv):
    section, args = argv[1], json.loads(argv[2])
    if section == "step":
        rows = step_cost(args["sizes"], tokens=args["tokens"], calls=args["calls"])
    else:
        rows = precision(
            [tuple(c[:3]) + (tuple(c[3]),) for c in args["configs"]], batch=args["batch"]
        )
    print(json.dumps(rows), flush=True)


if __name__ == "__main__":
    main(sys.argv)

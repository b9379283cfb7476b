r"""The implementations the benchmark compares.

Each is `fn(params, u)` on ONE sequence `u: (L, H) -> (L, H)` (the benchmark batches with
`jax.vmap`), built from the same parameters so that every row computes the same function:

- `app_a`: a plain rendering of the paper's App. A (complex matmuls, `jax.lax.associative_scan`
  over Λ repeated L times, differentiated by JAX's autodiff) — the baseline of every ratio.
- `scan_autodiff`: the real form written the usual way before this library's scan: stacked real
  projections and `jax.lax.scan`, differentiated by autodiff (context for the custom VJP).
- `complex-<method>`, `real-<method>`: `eqx_lru.ComplexLRU` / `eqx_lru.RealLRU` with a scan
  method shortcut (`-bf16`: `RealLRU(..., compute_dtype=jnp.bfloat16)`); `methods(backend)`
  lists the methods compared on a backend.
- `floor`: the two stacked real projections and the skip alone, no recurrence: what no LRU
  layer built on these matmuls can beat.
- `rglru_phase-complex`, `rglru_phase-real`: `eqx_lru.RGLRU(H, phase=True)` (Griffin's
  gates on H/2 rotating modes, one head) in its two forms with the default method: another
  core, with its own parameters (no `B`, `C`: the state has the input's width, so `N` is
  not used), timed beside the LRU.
"""

import math

import jax
import jax.numpy as jnp

import eqx_lru

PARAM_NAMES = ("nu_log", "theta_log", "B_re", "B_im", "C_re", "C_im", "D", "gamma_log")


# --- the paper's App. A, rewritten -------------------------------------------------------


def _binary_operator_diag(element_i, element_j):
    a_i, bu_i = element_i
    a_j, bu_j = element_j
    return a_j * a_i, a_j * bu_i + bu_j


def app_a(params, input_sequence):
    """Forward pass of the LRU as in the paper's App. A."""
    nu_log, theta_log, B_re, B_im, C_re, C_im, D, gamma_log = params
    Lambda = jnp.exp(-jnp.exp(nu_log) + 1j * jnp.exp(theta_log))
    B_norm = (B_re + 1j * B_im) * jnp.expand_dims(jnp.exp(gamma_log), axis=-1)
    C = C_re + 1j * C_im
    Lambda_elements = jnp.repeat(Lambda[None, ...], input_sequence.shape[0], axis=0)
    Bu_elements = jax.vmap(lambda u: B_norm @ u.astype(B_norm.dtype))(input_sequence)
    _, inner_states = jax.lax.associative_scan(
        _binary_operator_diag, (Lambda_elements, Bu_elements)
    )
    return jax.vmap(lambda x, u: (C @ x).real + D * u)(inner_states, input_sequence)


# --- shared pieces of the real renderings ------------------------------------------------


def _stacked_weights(params):
    nu_log, theta_log, B_re, B_im, C_re, C_im, D, gamma_log = params
    gamma = jnp.exp(gamma_log)[:, None]
    w_in = jnp.stack([gamma * B_re, gamma * B_im], axis=1).reshape(-1, B_re.shape[1])
    w_out = jnp.stack([C_re, -C_im], axis=-1).reshape(C_re.shape[0], -1)
    return w_in, w_out


def floor(params, u):
    """The projections alone: `[C_re, -C_im] · ([γB_re; γB_im] · u) + D ⊙ u`."""
    w_in, w_out = _stacked_weights(params)
    return (u @ w_in.T) @ w_out.T + params[6] * u


def scan_autodiff(params, u):
    """The real form with `jax.lax.scan` and JAX's autodiff (no custom VJP, no in-place)."""
    nu_log, theta_log = params[0], params[1]
    w_in, w_out = _stacked_weights(params)
    modulus, phase = jnp.exp(-jnp.exp(nu_log)), jnp.exp(theta_log)
    c, s = modulus * jnp.cos(phase), modulus * jnp.sin(phase)
    drive = (u @ w_in.T).reshape(u.shape[0], -1, 2)

    def step(h, x):
        h = jnp.stack([c * h[:, 0] - s * h[:, 1], s * h[:, 0] + c * h[:, 1]], axis=-1) + x
        return h, h

    _, states = jax.lax.scan(step, jnp.zeros_like(drive[0]), drive)
    return states.reshape(u.shape[0], -1) @ w_out.T + params[6] * u


# --- the registry --------------------------------------------------------------------------

BASELINES = {
    "app_a": "paper App. A (complex matmuls, assoc. scan, autodiff)",
    "scan_autodiff": "real, lax.scan + autodiff (no custom VJP)",
    "floor": "floor: the two real projections only",
}
FORMS = {"complex": "ComplexLRU", "real": "RealLRU"}
#: Other cores of the layer table, in both forms: name -> (label, build(H, form, *, key)).
CORES = {
    "rglru_phase": (
        "RGLRU(phase=True), H/2 modes",
        lambda H, form, *, key: eqx_lru.RGLRU(H, phase=True, form=form, key=key),
    ),
}


def methods(backend: str) -> list[str]:
    """The scan methods to compare on `backend` (the shortcuts `method=` takes).
    `"pallas"` only off the CPU: there the kernel runs in Pallas interpret mode, an
    emulator whose times mean nothing."""
    names = ["sequential", "associative"]
    if backend != "cpu" and hasattr(eqx_lru, "PallasScan"):
        names.append("pallas")
    return names


def default_method() -> str:
    """The shortcut of the method `"auto"` resolves to here."""
    return type(eqx_lru.Auto().resolve()).__name__.lower()


def variants(backend: str, *, autodiff: bool = True) -> list[str]:
    """Every implementation name for `backend`: the baselines, both forms × every method,
    and the real form's bfloat16 compute dtype with the default method."""
    names = ["app_a"] + (["scan_autodiff"] if autodiff else [])
    names += [f"{form}-{m}" for form in FORMS for m in methods(backend)]
    names += [f"real-{default_method()}-bf16", "floor"]
    return names + [f"{core}-{form}" for core in CORES for form in FORMS]


def label(name: str) -> str:
    if name in BASELINES:
        return BASELINES[name]
    core, form = name.split("-")[:2]
    if core in CORES:
        return f"eqx_lru {CORES[core][0]}, {form} form, {default_method()}"
    form, method, *rest = name.split("-")
    return f"eqx_lru {FORMS[form]}, {method}" + (", bf16 compute" if rest else "")


def layer(form: str, d_model: int, d_state: int, *, key, **kwargs):
    cls = {"complex": eqx_lru.ComplexLRU, "real": eqx_lru.RealLRU}[form]
    return cls(d_model, d_state, r_min=0.0, r_max=1.0, max_phase=2 * math.pi, key=key, **kwargs)


def make(name: str, d_model: int, d_state: int, *, key, unroll: int | None = None):
    """`(fn, params)` for implementation `name`; all share the parameters of `key`.
    `unroll`: steps per iteration of the sequential method (`eqx_lru.Sequential(unroll)`)."""
    base = layer("complex", d_model, d_state, key=key)
    params = tuple(getattr(base, n) for n in PARAM_NAMES)
    if name in BASELINES:
        return {"app_a": app_a, "floor": floor, "scan_autodiff": scan_autodiff}[name], params
    core, form = name.split("-")[:2]
    if core in CORES:
        return (lambda layer, u: layer(u)), CORES[core][1](d_model, form, key=key)
    form, method, *rest = name.split("-")
    kwargs = {"method": eqx_lru.Sequential(unroll=unroll) if unroll else method}
    if rest == ["bf16"]:
        kwargs["compute_dtype"] = jnp.bfloat16
    return (lambda lru, u: lru(u)), layer(form, d_model, d_state, key=key, **kwargs)

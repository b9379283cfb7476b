"""The one list the conformance tests run over: the scan methods, the algebras and the
cores, each with how to build it small and what it is checked against.

A new scan method, algebra or core is one entry here, and every conformance test runs it:

- `test_scan.py`: every grid method × algebra against a float64 NumPy loop of the
  algebra's `oracle`;
- `test_scan_methods.py`: every grid method × algebra, forward and gradients, against
  autodiff of a plain loop (and the `oracle`'s NumPy loop);
- `test_lru.py`, `test_dt.py`: the LRU's two forms with every grid method against the
  paper's equations (and with time steps `dt`);
- `test_core.py`: every core's contract (`run`, `step`, chunks, segments, `length`) and its
  float64 `reference`; `to_real`/`to_complex` convert the cores with two forms and refuse
  the others;
- `test_streaming.py`: a model of every core that `in_models` streamed four ways, each LRU
  form with one scan method (streaming is the model's property; the methods' equality is
  the scan's, proven by `test_scan.py`, `test_scan_methods.py` and `test_packing.py`);
- `test_packing.py`: packed sequences through a block of either LRU form with every method;
- `test_export_*.py`: every export format (`FORMATS`), its artifacts read back as a user of
  the format reads them.

`test_conformance.py` checks that each of these tests is parametrised over every entry
it selects, so an entry cannot be left out by a hand-written list.
"""

import dataclasses
import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import rglru_loop

import eqx_lru
from eqx_lru import ablation, baselines

# --- scan methods -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Method:
    """A scan method (`method=` of `linear_recurrence` and of the cores).

    - `grid`: whether the algebra grids (`test_scan.py`, `test_scan_methods.py`) and the
      LRU's oracle tests (`test_lru.py`, `test_dt.py`) run it. The Pallas kernel off GPUs
      runs in interpret mode, exact but slow to compile, and supports two algebras:
      `test_pallas.py` checks it against the loop at its default sizes; the model tests
      (streaming, packing) run it here, in chunks of 2 steps (several chunks and a tail
      over their 13 positions, and a quarter less to compile than the default 8).
    """

    method: Any
    grid: bool = True


METHODS = {
    "sequential": Method("sequential"),
    "associative": Method("associative"),
    "pallas": Method(eqx_lru.PallasScan(interpret=True, chunk=2), grid=False),
}


def select(entries: dict, **flags) -> list[str]:
    """The names of the `entries` whose attributes equal `flags` (e.g. `grid=True`), in
    the list's order: what a conformance test parametrises over."""
    return [n for n, e in entries.items() if all(getattr(e, k) == v for k, v in flags.items())]


def grid_methods() -> list[str]:
    """The methods the algebra grids run (read when a test module is imported)."""
    return select(METHODS, grid=True)


# --- algebras ---------------------------------------------------------------------------------


class Dense(eqx_lru.AbstractAlgebra):
    """A new algebra with no closed-form backward: the generic defaults are used (the
    backward scans it through the generic transposed wrapper).

    Products written as broadcast sums: a small float64 `@` inside `lax.associative_scan`
    made XLA abort while compiling on CUDA (JAX 0.11.2, H100)."""

    def transition_shape(self, state_shape):
        return state_shape + state_shape[-1:]

    def compose(self, later, earlier):
        return jnp.sum(later[..., :, :, None] * earlier[..., None, :, :], axis=-2)

    def apply(self, a, h):
        return jnp.sum(a * h[..., None, :], axis=-1)


def _elementwise(a, h):
    return a * h


def _matrix(a, h):  # a[..., n, n] h[..., n]
    return np.einsum("...ij,...j->...i", a, h)


def _planar_block(a, h):  # a[..., 2, 2, M] h[..., 2, M]
    return np.einsum("...ijm,...jm->...im", a, h)


def _rotation(a, h):
    """The pair (a0, a1) acting on planar pairs as the complex product (a0 + i a1)(h0 + i h1)."""
    z = (a[..., 0, :] + 1j * a[..., 1, :]) * (h[..., 0, :] + 1j * h[..., 1, :])
    return np.stack([z.real, z.imag], axis=-2)


@dataclasses.dataclass(frozen=True)
class Algebra:
    """An algebra as the scan tests use it: the `dtype` of its arrays, its state shape for
    a base shape (`state`), `oracle(a, h)` = `a ⊗ h` in NumPy written independently of the
    algebra's code, and the `scale` of random transitions (stable: long products stay
    O(1))."""

    algebra: eqx_lru.AbstractAlgebra
    dtype: type
    oracle: Callable
    state: Callable[[tuple[int, ...]], tuple[int, ...]] = lambda base: base
    scale: float = 0.6


def _pairs_last(base):
    return base + (2,)


def _planar(base):
    return base[:-1] + (2,) + base[-1:]


ALGEBRAS = {
    "diag-real": Algebra(eqx_lru.Diagonal(), np.float64, _elementwise),
    "diag-complex": Algebra(eqx_lru.Diagonal(), np.complex128, _elementwise),
    "block": Algebra(eqx_lru.Block2x2(), np.float64, _matrix, _pairs_last),
    "block-planar": Algebra(eqx_lru.Block2x2(planar=True), np.float64, _planar_block, _planar),
    "rotation": Algebra(eqx_lru.RotationScaling(), np.float64, _rotation, _planar),
    "dense": Algebra(Dense(), np.float64, _matrix, scale=0.4),
    "dense-library": Algebra(eqx_lru.DenseAlgebra(), np.float64, _matrix, scale=0.4),
}


def recurrence_problem(name, *, shared, length, base=(3, 4), seed=0):
    """Random `(a, b, h0)` for algebra `name` (NumPy, its dtype): `a` shared by every step
    or one per step, `length` drives, an initial state."""
    case = ALGEBRAS[name]
    rng = np.random.default_rng(seed)

    def draw(shape, scale=1.0):
        x = rng.normal(size=shape) * scale
        if np.issubdtype(case.dtype, np.complexfloating):
            x = x + 1j * rng.normal(size=shape) * scale
        return x.astype(case.dtype)

    state = case.state(base)
    transition = case.algebra.transition_shape(state)
    a = draw(transition if shared else (length,) + transition, case.scale)
    return a, draw((length,) + state), draw(state)


def recurrence_oracle(name, a, b, *, shared, reverse=False, h0=None):
    """`h_k = a_k ⊗ h_{k-1} + b_k` for every k, by a NumPy loop over the algebra's oracle."""
    apply = ALGEBRAS[name].oracle
    a, b = np.asarray(a), np.asarray(b)
    h = np.zeros(b.shape[1:], b.dtype) if h0 is None else np.asarray(h0)
    out = np.zeros_like(b)
    for k in reversed(range(b.shape[0])) if reverse else range(b.shape[0]):
        h = apply(a if shared else a[k], h) + b[k]
        out[k] = h
    return out


# --- cores ------------------------------------------------------------------------------------


def _c128(x) -> np.ndarray:
    return np.asarray(x, np.complex128)


def _diagonal_reference(core, u):
    """LRU / diagonal RNN: x_k = λ x_{k-1} + γ B u_k, y_k = Re(C x_k) + D u_k (γ = 1 for
    the ablation's diagonal RNN)."""
    lam = _c128(core.eigenvalues())
    gamma = np.exp(np.asarray(core.gamma_log)) if isinstance(core, eqx_lru.AbstractLRU) else 1
    B, C = _c128(core.B_re) + 1j * _c128(core.B_im), _c128(core.C_re) + 1j * _c128(core.C_im)
    x, ys = np.zeros(lam.shape, complex), []
    for u_t in u:
        x = lam * x + gamma * (B @ u_t)
        ys.append((C @ x).real + np.asarray(core.D) * u_t)
    return np.stack(ys)


def _dense_reference(core, u):
    """Dense RNN: x_k = σ(A x_{k-1} + B u_k), y_k = C x_k + D u_k."""
    A, B, C, D = (np.asarray(m, np.float64) for m in (core.A, core.B, core.C, core.D))
    sigma = {"tanh": np.tanh, "relu": lambda z: np.maximum(z, 0)}.get(
        getattr(core, "nonlinearity", ""), lambda z: z
    )
    x, ys = np.zeros(A.shape[0]), []
    for u_t in u:
        x = sigma(A @ x + B @ u_t)
        ys.append(C @ x + D * u_t)
    return np.stack(ys)


def _ssm_reference(core, u):
    """S4D / S5 from their discretisation: x_k = Λ̄ x_{k-1} + B̄ u_k, y_k = 2 Re(C x_k) + D u_k."""
    lam, b = (_c128(m) for m in core.discretise())
    C = _c128(core.C_re) + 1j * _c128(core.C_im)
    x, ys = np.zeros(lam.shape, complex), []
    for u_t in u:
        if isinstance(core, baselines.S4D):
            x = lam * x + b * u_t[:, None]
            y = np.sum(C * x, axis=-1)
        else:
            x = lam * x + b @ u_t
            y = C @ x
        ys.append(2 * y.real + np.asarray(core.D) * u_t)
    return np.stack(ys)


def _lds_reference(core, u):
    """LDS: the output reads the state before the input, y_t = Re(C s_t) + D x_t + D_0."""
    lam = _c128(core.eigenvalues())
    C = _c128(core.C_re) + 1j * _c128(core.C_im)
    s, ys = np.zeros(lam.shape, complex), []
    for x_t in u:
        ys.append((C @ s).real + np.asarray(core.D) * x_t + np.asarray(core.D0))
        s = lam * s + x_t
    return np.stack(ys)


def _rglru_reference(core, u):
    """RG-LRU: `reference.rglru_loop` over the core's parameters."""
    names = ("Lambda", "theta", "W_a", "b_a", "W_x", "b_x")
    p = {n: None if getattr(core, n) is None else np.asarray(getattr(core, n)) for n in names}
    return rglru_loop(p, u, c=core.c, signed=core.eigenvalues == "signed")[0]


def _block_diagonal_transitions(core, u_t):
    """BlockDiagonalLRU's A(u_t) block by block, in NumPy from the parameters."""
    p: dict[str, Any] = {
        n: None if getattr(core, n) is None else np.asarray(getattr(core, n), np.float64)
        for n in ("rho_logit", "W_A", "A0", "W_beta", "beta0")
    }
    rho = 1 / (1 + np.exp(-p["rho_logit"]))
    if core.parameterisation == "normalised":
        m = np.einsum("h,hkij->kij", u_t, p["W_A"]) + p["A0"]
        rows = np.maximum(np.abs(m).sum(-1, keepdims=True), 1)
        return rho[..., None] * m / rows
    blocks, b = p["A0"].shape[1:]
    a = np.stack([np.eye(b)] * blocks)
    for r in range(p["A0"].shape[0]):
        v = np.einsum("h,hki->ki", u_t, p["W_A"][r]) + p["A0"][r]
        v = v / np.linalg.norm(v, axis=-1, keepdims=True)
        beta = 1 / (1 + np.exp(-(u_t @ p["W_beta"][r] + p["beta0"][r])))
        a = np.stack(
            [(np.eye(b) - 2 * beta[k] * np.outer(v[k], v[k])) @ a[k] for k in range(blocks)]
        )
    return rho[:, None, None] * a


def _block_diagonal_reference(core, u):
    """BlockDiagonalLRU: x_t = A(u_t) x_{t-1} + sqrt(1 - rho^2) (B u_t), block by block,
    y_t = C x_t + D u_t."""
    B, C, D = (np.asarray(m, np.float64) for m in (core.B, core.C, core.D))
    rho = 1 / (1 + np.exp(-np.asarray(core.rho_logit, np.float64)))
    rho = np.broadcast_to(rho.reshape(rho.shape[0], -1), (core.blocks, core.block_size))
    gamma = np.sqrt(1 - rho**2).reshape(-1)
    x, ys = np.zeros(B.shape[0]), []
    for u_t in u:
        a = _block_diagonal_transitions(core, u_t)
        x = np.concatenate([a[k] @ x.reshape(a.shape[0], -1)[k] for k in range(a.shape[0])])
        x = x + gamma * (B @ u_t)
        ys.append(C @ x + D * u_t)
    return np.stack(ys)


def selective_reference(core, u, *, dt=None, reverse=False):
    """Selective LRU, from the maths in float64: Δ = softplus(W_r u + b_r),
    λ_t = exp((−e^ν Δ + i φ σ(c_θ (W_θ u + b_θ))) Δt), x_t = λ_t x + g_t B u_t with
    g_t = sqrt(1 − exp(−2 e^ν Δ)) (`normalisation="selective"`) or sqrt(1 − exp(−2 e^ν))
    (`"fixed"`), y_t = Re(C x_t) + D u_t (also `test_selective.py`'s oracle, with `dt` and
    `reverse`)."""
    names = ("nu_log", "W_r", "b_r", "W_theta", "b_theta", "B_re", "B_im", "C_re", "C_im", "D")
    p = {n: np.asarray(getattr(core, n), np.float64) for n in names}
    B, C = p["B_re"] + 1j * p["B_im"], p["C_re"] + 1j * p["C_im"]
    u = np.asarray(u, np.float64)
    x, ys = np.zeros(B.shape[0], complex), np.zeros_like(u)
    for t in reversed(range(len(u))) if reverse else range(len(u)):
        log_r = -np.exp(p["nu_log"]) * np.logaddexp(0, p["W_r"] @ u[t] + p["b_r"])
        logit = core.phase_gate_scale * (p["W_theta"] @ u[t] + p["b_theta"])
        theta = core.max_phase / (1 + np.exp(-logit))
        step = 1.0 if dt is None else float(np.asarray(dt)[t])
        written = log_r if core.normalisation == "selective" else -np.exp(p["nu_log"])
        x = np.exp(step * (log_r + 1j * theta)) * x + np.sqrt(1 - np.exp(2 * written)) * (B @ u[t])
        ys[t] = (C @ x).real + p["D"] * u[t]
    return ys


def _state_is_input_width(make):
    """An `LRUBlock` core factory for a core whose state has the input's width."""

    def build(d_model, d_state, **options):
        del d_state
        return make(d_model, **options)

    return build


@dataclasses.dataclass(frozen=True)
class Core:
    """A core: `make(d_model, d_state, *, dtype, key, **options)` (`LRUBlock`'s core
    factory signature), the `sizes` (d_model, d_state) it is built with in the contract
    test, and `reference(core, u)`: its outputs by a float64 NumPy loop.

    - `forms`: the forms `to_form` converts it to: both for a core with complex and real
      states (`to_real`, `to_complex`), `("real",)` for RGLRU without phase (real states:
      `to_real` keeps it), none for the cores with one form (both refuse).
    - `takes_method`: it takes `method=` (a scan); the dense RNNs loop themselves.
    - `scalar_input`: its input is one number per position (the LDS), not `d_model`.
    - `in_models`: the model tests (`test_streaming.py`) build a model of it. Off for
      another form or mode of a core listed already (the contract checks it per core), for
      scalar-input cores and for RGLRU, whose state must have the model's width
      (`test_rglru.py` streams it in a block).
    """

    make: Callable
    reference: Callable
    sizes: tuple[int, int] = (3, 4)
    forms: tuple[str, ...] = ()
    takes_method: bool = True
    scalar_input: bool = False
    in_models: bool = True


_LRU_RING = dict(r_min=0.5, r_max=0.95)
BOTH = ("complex", "real")


def _ablation_reference(core, u):
    if isinstance(core, ablation.AbstractDenseRNN):
        return _dense_reference(core, u)
    return _diagonal_reference(core, u)


def _ablation(name, make):
    """A rung of the paper's ladder: the nonlinear RNNs loop themselves; the rung without
    ring init and the LRU rung are variants of entries listed (for the model tests)."""
    return Core(
        make,
        _ablation_reference,
        forms=BOTH if name == "lru" else (),
        takes_method=name not in ("rnn_tanh", "rnn_relu"),
        in_models=name not in ("diag_stable_exp", "lru"),
    )


CORES = {
    "complex_lru": Core(
        functools.partial(eqx_lru.ComplexLRU, **_LRU_RING), _diagonal_reference, forms=BOTH
    ),
    "real_lru": Core(
        functools.partial(eqx_lru.RealLRU, **_LRU_RING), _diagonal_reference, forms=BOTH
    ),
    **{f"ablation_{n}": _ablation(n, make) for n, make in ablation.ABLATION_CORES.items()},
    "complex_selective": Core(
        functools.partial(eqx_lru.ComplexSelectiveLRU, **_LRU_RING), selective_reference,
        forms=BOTH,
    ),
    "real_selective": Core(
        functools.partial(eqx_lru.RealSelectiveLRU, **_LRU_RING), selective_reference,
        forms=BOTH, in_models=False,
    ),
    "s4d": Core(baselines.S4D, _ssm_reference, forms=BOTH),
    "s4d_real": Core(
        functools.partial(baselines.S4D, form="real"), _ssm_reference, forms=BOTH,
        in_models=False,
    ),
    "s4d_convolution": Core(
        functools.partial(baselines.S4D, mode="convolution"), _ssm_reference, forms=BOTH,
        in_models=False,
    ),
    "s5": Core(functools.partial(baselines.S5, blocks=2), _ssm_reference, (3, 8), BOTH),
    "s5_real": Core(
        functools.partial(baselines.S5, blocks=2, form="real"), _ssm_reference, (3, 8), BOTH,
        in_models=False,
    ),
    "lds_standard": Core(
        baselines.StandardSIMOLDS, _lds_reference, (6, 2), scalar_input=True, in_models=False
    ),
    "lds_unit": Core(
        baselines.UnitSIMOLDS, _lds_reference, (6, 2), scalar_input=True, in_models=False
    ),
    "rglru": Core(
        _state_is_input_width(functools.partial(eqx_lru.RGLRU, heads=2)), _rglru_reference,
        (4, 4), ("real",), in_models=False,
    ),
    "rglru_phase": Core(
        _state_is_input_width(functools.partial(eqx_lru.RGLRU, phase=True, heads=2)),
        _rglru_reference, (4, 4), BOTH, in_models=False,
    ),
    "rglru_signed": Core(
        _state_is_input_width(functools.partial(eqx_lru.RGLRU, heads=2, eigenvalues="signed")),
        _rglru_reference, (4, 4), ("real",), in_models=False,
    ),
    "block_diagonal": Core(
        functools.partial(eqx_lru.BlockDiagonalLRU, block_size=3), _block_diagonal_reference,
        (3, 6),
    ),
    "block_diagonal_2": Core(
        functools.partial(eqx_lru.BlockDiagonalLRU, block_size=2, parameterisation="householder"),
        _block_diagonal_reference, (3, 6), in_models=False,
    ),
}  # fmt: skip


def build_core(name, *, dtype=jnp.float64, length=7, seed=0):
    """The core `name` at its contract `sizes` in `dtype`, and a random input of `length`
    positions for it (call inside `jax.enable_x64` for float64)."""
    case = CORES[name]
    key, input_key = jax.random.split(jax.random.PRNGKey(seed))
    core = case.make(*case.sizes, dtype=dtype, key=key)
    shape = (length,) if case.scalar_input else (length, case.sizes[0])
    return core, jax.random.normal(input_key, shape, dtype)


# --- export formats ---------------------------------------------------------------------------


#: How a user reads each format back without eqx_lru: Python source defining
#: `load(data: bytes) -> run`, `run(*inputs) -> outputs` (NumPy arrays). The tests run it in
#: this process (`export_session`) and in fresh ones that never import eqx_lru.
_STABLEHLO_LOADER = """
import jax
import numpy as np

def load(data):
    call = jax.jit(jax.export.deserialize(bytearray(data)).call)
    return lambda *inputs: [np.asarray(o) for o in call(*inputs)]
"""

_ONNX_LOADER = """
import onnxruntime

def load(data):
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return lambda *inputs: session.run(None, dict(zip(names, inputs, strict=True)))
"""


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """A format of `eqx_lru.export.FORMATS`, as the export tests run it.

    - `needs`: the modules its export and its runtime need (the test is skipped where one
      is missing: the `export` extra).
    - `loader`: Python source defining `load(data: bytes) -> run(*inputs) -> outputs`, the
      artifact read back as a user of the format would, without eqx_lru.
    - `atol`: the absolute tolerance of its outputs against JAX's (ONNX runtimes reorder
      float32 sums more than XLA does).
    - `slow`: its export takes several times as long (ONNX's translator): a test that
      exports several programs marks it slow (`export_formats(slow=True)`).
    """

    needs: tuple[str, ...]
    loader: str
    atol: float
    slow: bool = False


#: Every export format of the library; `test_export_formats.py` checks that it is
#: `eqx_lru.export.FORMATS`, and the export tests run over it (a new format is one entry).
FORMATS = {
    "stablehlo": ExportFormat(("flatbuffers",), _STABLEHLO_LOADER, atol=1e-6),
    "onnx": ExportFormat(("onnx", "onnxruntime"), _ONNX_LOADER, atol=1e-5, slow=True),
}


def export_formats(*, slow: bool = False) -> list:
    """The names of `FORMATS` for `pytest.mark.parametrize`; with `slow`, the slow ones
    marked `slow`; a format whose `needs` are not installed is marked skipped (a test may
    export before it runs the artifact, and the export itself needs them)."""
    params = []
    for name, f in FORMATS.items():
        marks = [pytest.mark.slow] if slow and f.slow else []
        missing = [m for m in f.needs if importlib.util.find_spec(m) is None]
        if missing:
            marks.append(pytest.mark.skip(reason=f"{name} needs {', '.join(missing)}"))
        params.append(pytest.param(name, marks=marks))
    return params


def export_session(fmt: str, data: bytes) -> Callable[..., list[np.ndarray]]:
    """`run(*inputs) -> outputs` of the artifact `data` in format `fmt`, read by the
    format's `loader` (skipped where the format's modules are missing)."""
    for module in FORMATS[fmt].needs:
        pytest.importorskip(module)
    scope: dict[str, Any] = {}
    exec(FORMATS[fmt].loader, scope)
    return scope["load"](data)


def zero_carry(manifest: dict, batch: int) -> list[np.ndarray]:
    """The carry at the start of `batch` streams, from the manifest alone (none if the
    program takes no carry)."""
    return [
        np.zeros([batch if d == "batch" else d for d in c["shape"]], c["dtype"])
        for c in manifest["carry"] or []
    ]

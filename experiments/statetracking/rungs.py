"""The cores compared on the state-tracking tasks (the rungs of the ladder), by name.

Each rung is an `LRUBlock` core factory `(d_model, d_state, *, dtype, key) -> core`. A rung
whose core is not in this version of `eqx_lru` (a branch not merged yet) is listed in
`missing()` with the reason, and refused by `factory` by name.
"""

import functools
import inspect

__all__ = ["RUNGS", "CLAIMS", "available", "missing", "factory"]

#: Rung -> what it is, in the ladder's order.
RUNGS = {
    "lru": "LRU (complex diagonal, input-independent λ)",
    "rglru": "RG-LRU (real diagonal, gated a_t in (0, 1))",
    "rglru_signed": "RG-LRU, eigenvalues='signed' (a_t in (-1, 1))",
    "selective_complex": "ComplexSelectiveLRU (λ_t = r(u)e^{iθ(u)}), normalisation='fixed'",
    "selective_real": "RealSelectiveLRU (its 2x2 rotation-scaling form), normalisation='fixed'",
    "block1": "BlockDiagonalLRU, block_size=1 (signed real diagonal, input-dependent)",
    "block2": "BlockDiagonalLRU, block_size=2 (general 2x2 blocks)",
    "block2_householder": "BlockDiagonalLRU, block_size=2, parameterisation='householder'",
    "block3": "BlockDiagonalLRU, block_size=3",
    "block4": "BlockDiagonalLRU, block_size=4",
    "block5": "BlockDiagonalLRU, block_size=5",
}

#: Rung -> the transitions it can express (what the papers' claims hinge on).
CLAIMS = {
    "lru": "fixed complex λ, modulus < 1",
    "rglru": "input-dependent, real, in (0, 1)",
    "rglru_signed": "input-dependent, real, in (-1, 1)",
    "selective_complex": "input-dependent, complex (commuting rotations)",
    "selective_real": "input-dependent, complex (commuting rotations)",
    "block1": "input-dependent, real, in [-1, 1]",
    "block2": "input-dependent, non-commuting 2x2",
    "block2_householder": "input-dependent, non-commuting 2x2",
    "block3": "input-dependent, non-commuting 3x3",
    "block4": "input-dependent, non-commuting 4x4",
    "block5": "input-dependent, non-commuting 5x5",
}


#: The contractions of the block cores start near 1: a state that must last 4x the
#: training length.
RING = dict(r_min=0.999, r_max=0.9999)

#: The selective LRU's input weight per mode, not per position: a token that keeps the
#: count (|λ| -> 1) can still write to it (the "selective" default would write nothing as
#: |λ| -> 1, so a count decays with the tokens that change it; see the core's docstring).
SELECTIVE = dict(normalisation="fixed")


def _input_width(make):
    """A factory for a core whose state has the input's width (the RG-LRU)."""

    def build(d_model, d_state, **options):
        del d_state
        return make(d_model, **options)

    return build


def _blocks(block_size: int, **settings):
    """BlockDiagonalLRU with `d_state` rounded up to a multiple of `block_size`."""
    import eqx_lru

    def build(d_model, d_state, **options):
        d_state = block_size * -(-d_state // block_size)
        return eqx_lru.BlockDiagonalLRU(
            d_model, d_state, block_size=block_size, **settings, **options
        )

    return build


def _make(name: str):
    """The factory of rung `name`, or a string saying why it is not available."""
    import eqx_lru

    if name == "lru":
        return functools.partial(eqx_lru.ComplexLRU, r_min=0.9, r_max=0.999)
    if name == "rglru":
        return _input_width(eqx_lru.RGLRU)
    if name == "rglru_signed":
        if "eigenvalues" not in inspect.signature(eqx_lru.RGLRU.__init__).parameters:
            return "RGLRU has no `eigenvalues=` option in this version (branch w/rglru)"
        signed = dict(eigenvalues="signed")  # an option of w/rglru's RGLRU
        return _input_width(functools.partial(eqx_lru.RGLRU, **signed))
    if name in ("selective_complex", "selective_real"):
        cls = "ComplexSelectiveLRU" if name == "selective_complex" else "RealSelectiveLRU"
        if not hasattr(eqx_lru, cls):
            return f"eqx_lru.{cls} is not in this version (branch w/sel)"
        return functools.partial(getattr(eqx_lru, cls), **SELECTIVE)
    if name == "block2_householder":
        return _blocks(2, parameterisation="householder", **RING)
    if name.startswith("block"):
        return _blocks(int(name[len("block") :]), **RING)
    raise ValueError(f"`core` must be one of {list(RUNGS)}; got {name!r}.")


def available() -> list[str]:
    """The rungs this version of `eqx_lru` builds."""
    return [n for n in RUNGS if not isinstance(_make(n), str)]


def missing() -> dict[str, str]:
    """Rung -> why it is not available."""
    return {n: m for n in RUNGS if isinstance(m := _make(n), str)}


def factory(name: str):
    """The core factory of rung `name` (a `ValueError` naming it if unknown or missing)."""
    made = _make(name)
    if isinstance(made, str):
        raise ValueError(f"`core` {name!r} is not available: {made}.")
    return made

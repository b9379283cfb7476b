"""The numeric ranges of a run's settings: what the values meet in the computation.

A setting can be valid as a number and still break what it is cast to: a seed beyond 32
bits gives the key of a smaller one (`jax.random.PRNGKey` without `jax_enable_x64`), a
step count beyond int32 wraps the step counters, a learning rate below float32's normal
range rounds to 0 (a NaN schedule), an `r_max` rounding to 1 in float32 (or whose square
underflows) gives `nu_log = -inf` (`+inf`) at init. Both trainers' flag checks
(`lra/config.py`, `lm/config.py`) use these bounds; `ring_problem` and `rates_problem`
relate settings to each other.
"""

import math
import struct

__all__ = ["INT32_MAX", "FLOAT32_TINY", "FLOAT32_MAX", "ring_problem", "rates_problem"]

#: The largest int32: the device's step counter, the optimiser's count and array sizes.
INT32_MAX = 2**31 - 1
#: The smallest normal and the largest finite float32: learning rates and steps Delta
#: outside them round to 0 (a NaN schedule) or infinity in the float32 computations.
FLOAT32_TINY, FLOAT32_MAX = 2.0**-126, (2 - 2.0**-23) * 2.0**127


def ring_problem(r_min: float | None, r_max: float | None, max_phase: float | None) -> str | None:
    """The ring of the LRU's eigenvalues: 0 <= r_min <= r_max < 1, with r_max's square
    a normal float32 and r_max below 1 in float32 (else nu_log = +-inf at init)."""
    if r_min is not None and r_max is not None:
        if not 0 <= r_min <= r_max < 1:
            return f"need 0 <= --r-min <= --r-max < 1, got [{r_min}, {r_max}]."
        if r_max * r_max < FLOAT32_TINY:
            return (
                f"--r-max {r_max}: its square underflows float32, so every eigenvalue would "
                "have modulus 0 and the initial nu_log be infinite; use --r-max >= 1.1e-19 "
                "(the paper's rings lie in [0.5, 0.9999])."
            )
        if _float32(r_max) >= 1:
            return (
                f"--r-max {r_max} rounds to 1 in float32 (no decay: nu_log = -inf at init); "
                "use --r-max <= 0.99999994."
            )
    if max_phase is not None and not 0 < max_phase <= 2 * math.pi:
        return f"--max-phase must lie in (0, 2*pi], got {max_phase}."
    return None


def _float32(x: float) -> float:
    """`x` rounded to float32 (to nearest)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def rates_problem(
    lr: float | None, lr_factor: float | None, weight_decay: float | None
) -> str | None:
    """The recurrent parameters' rate (`lr x lr_factor`) and the decay step (`lr x
    weight_decay`) within float32, where the optimiser computes them."""
    products = (
        ("--lr-factor", lr_factor, True),
        ("--weight-decay", weight_decay, False),
    )
    for name, factor, positive in products:
        if lr is None or factor is None:
            continue
        product = lr * factor
        if product > FLOAT32_MAX or (positive and product < FLOAT32_TINY):
            return (
                f"--lr {lr:g} x {name} {factor:g} = {product:g} is outside float32's "
                f"range [{FLOAT32_TINY:g}, {FLOAT32_MAX:g}], where the optimiser computes it "
                "(the schedule would be 0, NaN or infinite); choose values whose product lies "
                "in it."
            )
    return None

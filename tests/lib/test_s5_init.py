"""S5's initial B̃ and C̃ against the official code's formulas, at its ListOps sizes.

The official S5 (Smith et al. 2023) draws B `(P, H)` by `lecun_normal` (variance 1/P,
the fan-in) and C complex `(H, P)` with both parts of variance 1/P (its default
`trunc_standard_normal`), then B̃ = V⁻¹B, C̃ = CV. So E|B̃_jh|² = ‖V_j‖²/P,
E|C̃_hj|² = 2‖V_j‖²/P, and C̃ is circular: E[C̃²] = 0 (a real C would give Σ_p V_pj²/P).
ListOps: H = 128, P = 16 in J = 8 HiPPO-N blocks (its run script).
"""

import equinox as eqx
import jax
import numpy as np

from eqx_lru.baselines import S5
from eqx_lru.baselines._s5 import s5_eigenbasis

H, P, BLOCKS, KEYS = 128, 16, 8, 8


def test_s5_initial_scale_is_the_official_one():
    keys = jax.random.split(jax.random.PRNGKey(0), KEYS)
    layers = eqx.filter_vmap(lambda k: S5(H, P, blocks=BLOCKS, key=k))(keys)
    b = np.asarray(layers.B_re, np.float64) + 1j * np.asarray(layers.B_im, np.float64)
    c = np.asarray(layers.C_re, np.float64) + 1j * np.asarray(layers.C_im, np.float64)
    _, v = s5_eigenbasis(P, BLOCKS)
    norms = np.sum(np.abs(v) ** 2, axis=0)  # ‖V_j‖², per mode
    assert b.shape == (KEYS, P // 2, H) and c.shape == (KEYS, H, P // 2)
    b_power = np.mean(np.abs(b) ** 2, axis=(0, 2))  # per mode j
    c_power = np.mean(np.abs(c) ** 2, axis=(0, 1))
    # Per mode, within 10% of the official second moments (8 keys x 128 channels each).
    np.testing.assert_allclose(b_power, norms / P, rtol=0.1)
    np.testing.assert_allclose(c_power, 2 * norms / P, rtol=0.1)
    # C complex: no preferred phase.
    assert abs(np.mean(c**2)) < 0.1 * np.mean(np.abs(c) ** 2)

"""A model given the time steps learns an irregularly sampled task that the same model
without them cannot.

The task: tell which of two frequencies (ω = 1.0 or 1.6 rad per unit time) a slowly damped
oscillator $A e^{-0.002 t} \\sin(\\omega t + \\varphi) + \\text{noise}$ has, from 48 readings
at random times $t_k$ with gaps $t_k - t_{k-1} \\sim U[1, 11]$ (random amplitude and
phase). The gaps span several periods, so without the times the readings are samples of a
sinusoid at unrelated phases, alike for both classes: chance is 50%. With `dt=`, the LRU's
modes rotate by $\\theta \\Delta t_k$ between readings and those near ω add them up
coherently (a non-uniform Fourier transform): the log-energy of the outputs separates the
classes. Same model, optimiser, data and steps for both; only `dt` differs.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import eqx_lru

LENGTH, BATCH, STEPS, WIDTH = 48, 32, 80, 4
OMEGAS = (1.0, 1.6)


def _batch(rng, n):
    gaps = rng.uniform(1.0, 11.0, (n, LENGTH))
    t = np.cumsum(gaps, axis=1)
    label = rng.integers(0, 2, n)
    omega = np.asarray(OMEGAS)[label][:, None]
    phase, amplitude = rng.uniform(0, 2 * np.pi, (n, 1)), rng.uniform(0.5, 1.5, (n, 1))
    signal = amplitude * np.exp(-0.002 * t) * np.sin(omega * t + phase)
    signal = signal + 0.05 * rng.normal(size=(n, LENGTH))
    return (
        jnp.asarray(signal[..., None], jnp.float32),
        jnp.asarray(gaps, jnp.float32),
        jnp.asarray(label, jnp.int32),
    )


class _Classifier(eqx.Module):
    encoder: eqx.nn.Linear
    core: eqx_lru.RealLRU
    head: eqx.nn.Linear
    use_dt: bool = eqx.field(static=True)

    def __init__(self, use_dt, *, key):
        keys = jax.random.split(key, 3)
        self.encoder = eqx.nn.Linear(1, WIDTH, key=keys[0])
        self.core = eqx_lru.RealLRU(WIDTH, 8, r_min=0.8, r_max=0.99, max_phase=3.0, key=keys[1])
        self.head = eqx.nn.Linear(WIDTH, 2, key=keys[2])
        self.use_dt = use_dt

    def __call__(self, signal, dt):
        y = self.core(jax.vmap(self.encoder)(signal), dt=dt if self.use_dt else None)
        return self.head(jnp.log(jnp.mean(y[LENGTH // 2 :] ** 2, axis=0) + 1e-3))


def _loss(model, signal, dt, label):
    logits = jax.vmap(model)(signal, dt)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, label))


_OPTIMISER = optax.adam(1e-2)


@eqx.filter_jit
def _train_step(model, opt_state, signal, dt, label):
    grads = eqx.filter_grad(_loss)(model, signal, dt, label)
    with jax.numpy_dtype_promotion("standard"):  # optax mixes floats and int32 counts
        updates, opt_state = _OPTIMISER.update(grads, opt_state, model)
    return eqx.apply_updates(model, updates), opt_state


@eqx.filter_jit
def _accuracy(model, signal, dt, label):
    return jnp.mean(jnp.argmax(jax.vmap(model)(signal, dt), axis=-1) == label)


def _trained_accuracy(use_dt: bool) -> float:
    rng = np.random.default_rng(0)
    model = _Classifier(use_dt, key=jax.random.PRNGKey(0))
    opt_state = _OPTIMISER.init(eqx.filter(model, eqx.is_inexact_array))
    for _ in range(STEPS):
        model, opt_state = _train_step(model, opt_state, *_batch(rng, BATCH))
    return float(_accuracy(model, *_batch(np.random.default_rng(1), 512)))


@pytest.mark.slow
def test_time_steps_beat_no_time_steps_on_irregular_samples():
    with_dt, without_dt = _trained_accuracy(True), _trained_accuracy(False)
    assert with_dt >= 0.9, with_dt
    assert without_dt <= 0.7, without_dt

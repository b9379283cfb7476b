"""Checkpoints of every core and model, written by an older eqx_lru, for
`test_checkpoint_layout.py`: a file written then must load now and give the same outputs.

Each case builds a module (and its `eqx.nn.State`) from a key with the public constructors
and runs it on a fixed input. `python tests/lib/checkpoint_cases.py OUT` writes, per case,
`OUT/<case>.eqx` (`eqx.tree_serialise_leaves` of `(module, state)`, the format the LRA
trainer uses) and `OUT/<case>.npz` (the input and the output). The files under
`tests/lib/data/checkpoints/` were written this way by the commit that `SOURCE` in that
folder names, run with its own `eqx_lru` first on `PYTHONPATH`.
"""

import functools
import sys
from pathlib import Path
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqx_lru
from eqx_lru import ablation, baselines

H, N, L, VOCAB, CLASSES, DEPTH = 3, 4, 7, 5, 2, 2


def _core(make):
    def build(key):
        return make(key), None

    def run(core, state, x):
        del state
        return core(x)

    return build, run, lambda rng: rng.standard_normal((L, H)).astype(np.float32)


def _lds(make):
    build, run, _ = _core(make)
    return build, run, lambda rng: rng.standard_normal(L).astype(np.float32)


def model_case(encoder: Literal["embedding", "linear"] = "embedding", **block_options):
    def build(key):
        block = functools.partial(eqx_lru.LRUBlock, **block_options)
        return eqx.nn.make_with_state(eqx_lru.LRUModel)(
            VOCAB, CLASSES, H, N, DEPTH, encoder=encoder, block=block, key=key
        )

    def run(model, state, x):
        return model(x, state, inference=True)[0]

    if encoder == "embedding":
        return build, run, lambda rng: rng.integers(0, VOCAB, L).astype(np.int32)
    return build, run, lambda rng: rng.standard_normal((L, VOCAB)).astype(np.float32)


def _retrieval():
    def build(key):
        encoder_key, head_key = jax.random.split(key)
        encoder, state = eqx.nn.make_with_state(eqx_lru.LRUModel)(
            VOCAB, None, H, N, DEPTH, encoder="embedding", key=encoder_key
        )
        return eqx_lru.LRURetrievalModel(encoder, CLASSES, key=head_key), state

    def run(model, state, x):
        return model(x, state, inference=True)[0]

    return build, run, lambda rng: rng.integers(0, VOCAB, (2, L)).astype(np.int32)


#: name -> (build(key) -> (module, state or None), run(module, state, x) -> y, input(rng)).
CASES = {
    "complex_lru": _core(lambda key: eqx_lru.ComplexLRU(H, N, key=key)),
    "real_lru": _core(lambda key: eqx_lru.RealLRU(H, N, key=key)),
    **{
        f"ablation_{name}": _core(lambda key, make=make: make(H, N, key=key))
        for name, make in ablation.ABLATION_CORES.items()
    },
    "s4d": _core(lambda key: baselines.S4D(H, N, key=key)),
    "s4d_real": _core(lambda key: baselines.S4D(H, N, form="real", key=key)),
    "s5": _core(lambda key: baselines.S5(H, N, blocks=2, key=key)),
    "s5_real": _core(lambda key: baselines.S5(H, N, form="real", key=key)),
    "standard_simo_lds": _lds(lambda key: baselines.StandardSIMOLDS(N + 1, H, key=key)),
    "unit_simo_lds": _lds(lambda key: baselines.UnitSIMOLDS(N, H, key=key)),
    "model_bidirectional": model_case(bidirectional=True),
    "model_real_layer_norm": model_case(encoder="linear", core="real", norm="layer", glu="half"),
    "retrieval": _retrieval(),
}


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for seed, (name, (build, run, make_input)) in enumerate(sorted(CASES.items())):
        module, state = build(jax.random.PRNGKey(seed))
        x = make_input(np.random.default_rng(seed))
        y = np.asarray(run(module, state, jnp.asarray(x)))
        eqx.tree_serialise_leaves(out / f"{name}.eqx", (module, state))
        np.savez(out / f"{name}.npz", x=x, y=y)
        print(f"{name}: {type(module).__name__}, output {y.shape} from {eqx_lru.__file__}")


if __name__ == "__main__":
    write(Path(sys.argv[1]))

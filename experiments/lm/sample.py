r"""Writing text with a trained model: the prompt through `chunk`, then one byte at a time
through `step`.

    python -m experiments.lm sample --run runs/lm --prompt "def " --temperature 0.8 --top-k 40

**Sampling.** The prompt $x_0 \dots x_{P-1}$ is read in one parallel call,
`model.chunk(model.init_carry(), prompt, state)` (chunked prefill); its last output is the
distribution of the first new byte. Each new byte is drawn from the logits $z$ divided by
the temperature $T$, restricted to the $k$ likeliest bytes:

$$p(w) \propto \begin{cases} e^{z_w / T} & z_w \ge z_{(k)} \\ 0 & \text{otherwise,}
\end{cases}$$

with $z_{(k)}$ the $k$-th largest logit ($T = 0$: the likeliest byte), then fed back
through `model.step`. Byte $i$ uses the $i$-th of `jax.random.split(key, length)`, so the
same key gives the same text, and the complex and real forms of the same weights
(`eqx_lru.to_real`) compute the same logits up to float rounding, hence the same bytes.
An empty prompt starts from the byte that separates the corpus's files (a file's start).

**Printed** as text: UTF-8, with every byte that is not printable text (NUL, the start of
a file; the other control bytes but tab and newline; invalid UTF-8) written as `\xNN`,
so a terminal shows what was sampled and no NUL reaches it; `--raw` writes the bytes as
they are.
"""

import sys
import unicodedata
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqx_lru

from .corpus import SEPARATOR

__all__ = ["generate", "pick", "shown", "sample_main"]


def pick(logits: jax.Array, key, temperature: float, top_k: int) -> jax.Array:
    """One byte from `logits` (`(256,)`) at `temperature` among the `top_k` likeliest."""
    if temperature == 0:
        return jnp.argmax(logits).astype(jnp.int32)
    logits = logits.astype(jnp.float32) / temperature
    if top_k < logits.shape[-1]:
        kth = jax.lax.top_k(logits, top_k)[0][-1]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    return jax.random.categorical(key, logits).astype(jnp.int32)


@eqx.filter_jit
def _generate(model, state, prompt, key, temperature, top_k, length):
    carry, logits = model.chunk(model.init_carry(), prompt, state)

    def body(c, k):
        carry, last = c
        byte = pick(last, k, temperature, top_k)
        carry, out = model.step(carry, byte, state)
        return (carry, out), byte

    _, out = jax.lax.scan(body, (carry, logits[-1]), jax.random.split(key, length))
    return out


def generate(
    model: eqx_lru.LRUModel,
    state: eqx.nn.State,
    prompt: bytes,
    length: int,
    *,
    key,
    temperature: float = 0.8,
    top_k: int = 40,
) -> bytes:
    """`length` bytes continuing `prompt` (module docstring); `key` a `jax.random` key."""
    data = prompt or bytes([SEPARATOR])
    ids = jnp.asarray(np.frombuffer(data, np.uint8).astype(np.int32))
    out = _generate(model, state, ids, key, float(temperature), int(top_k), int(length))
    return bytes(np.asarray(out, np.uint8).tolist())


def shown(data: bytes) -> str:
    """`data` as text for a terminal: UTF-8, with every byte that is not printable text
    written as `\\xNN` (invalid UTF-8, and the control bytes but tab and newline: NUL,
    which starts each of the corpus's files, carriage return, escape, ...)."""
    text = data.decode("utf-8", errors="backslashreplace")
    return "".join(
        f"\\x{ord(c):02x}" if unicodedata.category(c) == "Cc" and c not in "\t\n" else c
        for c in text
    )


def sample_main(args: Any) -> int:
    """`python -m experiments.lm sample ...` (parsed `args`): the samples on stdout, as
    text (`shown`) or, with `--raw`, as the bytes they are."""
    from .weights import load_model

    loaded = load_model(args.run)
    model, state, cfg, step = loaded.model, loaded.state, loaded.cfg, loaded.step
    form = args.form or cfg.form
    if form != cfg.form:
        model = eqx_lru.to_real(model) if form == "real" else eqx_lru.to_complex(model)
    print(
        f"# {args.run}: step {step}/{cfg.steps}, {form} form; temperature "
        f"{args.temperature:g}, top-k {args.top_k}, seed {args.seed}",
        file=sys.stderr,
    )
    keys = jax.random.split(jax.random.PRNGKey(args.seed), args.samples)
    prompt = args.prompt.encode()
    for i in range(args.samples):
        text = generate(
            model,
            state,
            prompt,
            args.length,
            key=keys[i],
            temperature=args.temperature,
            top_k=args.top_k,
        )
        head = f"--- sample {i + 1}\n" if args.samples > 1 else ""
        if args.raw:
            sys.stdout.buffer.write(head.encode() + prompt + text + b"\n")
            sys.stdout.buffer.flush()
        else:
            print(head + shown(prompt + text), flush=True)
    return 0

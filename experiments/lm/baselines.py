r"""The bars the language model must clear: unigram and bigram byte models fitted on the
training split, scored in bits per byte on held-out text.

With $c(w)$, $c(v, w)$ the counts of byte $w$ and of the pair $(v, w)$ in the training
split, $V = 256$ and $n$ training bytes:

- **unigram, add-one**: $P(w) = \dfrac{c(w) + 1}{n + V}$;
- **bigram, add-one** (Laplace): $P(w \mid v) = \dfrac{c(v, w) + 1}{c(v) + V}$, with
  $c(v) = \sum_w c(v, w)$;
- **bigram, interpolated Kneser-Ney** (the bar the model is held to: the stronger
  bigram), discount $D = 0.75$:

  $$P(w \mid v) = \frac{\max(c(v, w) - D, 0)}{c(v)}
  + \frac{D\, N_{1+}(v\,\bullet)}{c(v)}\, P_\text{cont}(w),\qquad
  P_\text{cont}(w) = \frac{N_{1+}(\bullet\, w) + 1}{N_{1+}(\bullet\,\bullet) + V},$$

  where $N_{1+}(v\,\bullet)$ counts the bytes seen after $v$, $N_{1+}(\bullet\, w)$ the
  bytes seen before $w$ and $N_{1+}(\bullet\,\bullet)$ the distinct pairs; the
  continuation distribution is smoothed by add-one so that every byte has mass, and a
  context never seen ($c(v) = 0$) uses $P_\text{cont}$ alone. Each row sums to one since
  every seen count is $\ge 1 > D$.

**Scored on** a text $x_0 \dots x_n$: the mean of $-\log_2 P(x_i \mid x_{i-1})$ over
$i = 1 \dots n$ (the unigram ignores the context): the same positions the model predicts
(`streams.eval_layout`).
"""

import numpy as np

__all__ = [
    "V",
    "DISCOUNT",
    "counts",
    "unigram",
    "bigram_add_one",
    "bigram_kneser_ney",
    "score",
    "report",
]

V = 256
DISCOUNT = 0.75


def counts(train: np.ndarray) -> np.ndarray:
    """The bigram counts `c[v, w]` of a byte array, `(256, 256)` int64."""
    train = np.asarray(train, np.int64)
    pairs = train[:-1] * V + train[1:]
    return np.bincount(pairs, minlength=V * V).reshape(V, V)


def unigram(train: np.ndarray) -> np.ndarray:
    """Add-one unigram probabilities, `(256,)`."""
    c = np.bincount(np.asarray(train, np.int64), minlength=V).astype(np.float64)
    return (c + 1) / (c.sum() + V)


def bigram_add_one(train: np.ndarray) -> np.ndarray:
    """Add-one bigram probabilities `P[v, w]`, `(256, 256)`, rows summing to one."""
    c = counts(train).astype(np.float64)
    return (c + 1) / (c.sum(axis=1, keepdims=True) + V)


def bigram_kneser_ney(train: np.ndarray, discount: float = DISCOUNT) -> np.ndarray:
    """Interpolated Kneser-Ney bigram probabilities `P[v, w]` (module docstring)."""
    c = counts(train).astype(np.float64)
    seen = c > 0
    cont = (seen.sum(axis=0) + 1) / (seen.sum() + V)
    context = c.sum(axis=1, keepdims=True)
    safe = np.maximum(context, 1)
    backoff = discount * seen.sum(axis=1, keepdims=True) / safe  # the mass set aside
    p = np.maximum(c - discount, 0) / safe + backoff * cont
    return np.where(context > 0, p, cont[None, :])


def score(probs: np.ndarray, text: np.ndarray) -> float:
    """Bits per byte of `text[1:]` under `probs`: `(256,)` (unigram) or `(256, 256)`
    (bigram, `probs[previous, next]`)."""
    text = np.asarray(text, np.int64)
    if text.size < 2:
        raise ValueError(f"scoring needs at least 2 bytes of text, got {text.size}.")
    p = probs[text[1:]] if probs.ndim == 1 else probs[text[:-1], text[1:]]
    return float(-np.mean(np.log2(p)))


def report(train: np.ndarray, texts: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Bits per byte of each baseline on each of `texts`: `{text name: {baseline: bits}}`."""
    models = {
        "unigram": unigram(train),
        "bigram_add_one": bigram_add_one(train),
        "bigram_kneser_ney": bigram_kneser_ney(train),
    }
    return {name: {m: score(p, text) for m, p in models.items()} for name, text in texts.items()}

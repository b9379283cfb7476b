r"""The two-tower model for document matching (LRA Retrieval): one `LRUModel` encoder
pools both documents, an MLP classifies the pair."""

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Float, Integer, PRNGKeyArray, jaxtyped

from .._blocks._norm import MaskedBatchNorm
from .._checks import Size, check_key, check_length, check_size
from .._runtime_check import known
from .._surface import checks_first
from ._model import LRUModel

_PAIR_AXIS = "eqx_lru_pair"


class LRURetrievalModel(eqx.Module):
    r"""Two-tower LRU for document matching (LRA Retrieval / AAN; LRA.md §7).

    Both documents are pooled by the same `LRUModel` encoder (no head) to $u, v \in
    \mathbb R^H$, then

    $$\text{logits} = W_2\, \operatorname{GELU}\big(W_1 [u, v, u - v, u \odot v] + b_1\big)
    + b_2 .$$

    The two documents are encoded in one `jax.vmap` over the pair, and batch norm takes
    its statistics over both documents of every pair in the batch (as S5 does by
    concatenating them along the batch axis): every `MaskedBatchNorm` of the encoder
    reduces over its own axis names and the pair axis.

    **Streaming.** With causal blocks, each document is a stream of the encoder
    (`model.encoder.init_carry()`, then `model.encoder.step` or `chunk`), whose output is
    the pooled features of the document so far; `classify(u, v)` gives the pair's logits
    from the two, equal to the call in inference mode once both documents have been read.
    """

    encoder: LRUModel
    mlp_in: eqx.nn.Linear
    mlp_out: eqx.nn.Linear

    def __init__(
        self,
        encoder: LRUModel,
        out_size: Size,
        *,
        mlp_size: Size | None = None,
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:**

        - `encoder`: an `LRUModel` with `out_size=None` (no head) and `pooling="mean"` or
            `"last"`, e.g. `eqx_lru.LRUModel(vocab, None, d_model, d_state, depth,
            encoder="embedding", key=k)`.
        - `out_size`: classes (2 for AAN).
        - `mlp_size`: the hidden width of the head (default: the encoder's `d_model`).
        - `dtype`: of the head's weights.
        - `key`: a `jax.random.PRNGKey`.

        The head has no state: build with `eqx.nn.make_with_state(LRURetrievalModel)(encoder,
        ...)` from a plain encoder, or, from an encoder made with `make_with_state`, build
        this model directly and keep that encoder's state.
        """
        if not isinstance(encoder, LRUModel) or encoder.head is not None or encoder.pooling is None:
            raise ValueError(
                "`encoder` must be an `LRUModel` with `out_size=None` (no head) and "
                f"`pooling='mean'` or `'last'`; got {type(encoder).__name__}."
            )
        out_size = check_size("out_size", out_size)
        mlp_size = check_size("mlp_size", encoder.d_model if mlp_size is None else mlp_size)
        check_key(key)
        in_key, out_key = jax.random.split(key)
        self.encoder = _with_pair_axis(encoder)
        self.mlp_in = eqx.nn.Linear(4 * encoder.d_model, mlp_size, dtype=dtype, key=in_key)
        self.mlp_out = eqx.nn.Linear(mlp_size, out_size, dtype=dtype, key=out_key)

    @checks_first()
    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        x: Integer[ArrayLike, "2 length"] | Float[ArrayLike, "2 length in_size"],
        state: eqx.nn.State,
        *,
        length: Integer[ArrayLike, " 2"] | None = None,
        dt: ArrayLike | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, " out_size"], eqx.nn.State]:
        """Classify one pair of documents.

        **Arguments:**

        - `x`: the two documents stacked, `(2, length)` tokens or `(2, length, in_size)`
            features (pad both to a common length).
        - `state`, `key`, `inference`: as `LRUModel.__call__`.
        - `length`: valid lengths of the two documents, shape `(2,)`; `None`: all valid.
        - `dt`: the documents' time steps, shape `(2, length)` (see `LRUModel.__call__`);
            `None`: none.

        **Returns:** `(logits, new_state)`, logits of shape `(out_size,)`.
        """
        keys = None if key is None else jax.random.split(key, 2)
        _check_known_documents(self.encoder, x, length, dt)

        def encode(doc, doc_length, doc_dt, doc_key):
            options = dict(length=doc_length, dt=doc_dt, key=doc_key, inference=inference)
            return self.encoder(doc, state, **options)

        (u, v), state = jax.vmap(encode, axis_name=_PAIR_AXIS, out_axes=(0, None))(
            jnp.asarray(x),
            None if length is None else jnp.asarray(length),
            None if dt is None else _pair_steps(dt),
            keys,
        )
        return self.classify(u, v), state

    @checks_first()
    @jaxtyped(typechecker=beartype)
    def classify(
        self, u: Float[ArrayLike, " d_model"], v: Float[ArrayLike, " d_model"]
    ) -> Float[Array, " out_size"]:
        r"""The logits of a pair from its two documents' pooled features $u, v$ (the
        encoder's outputs): $W_2 \operatorname{GELU}(W_1 [u, v, u - v, u \odot v] + b_1) + b_2$.
        """
        u, v = jnp.asarray(u), jnp.asarray(v)
        features = jnp.concatenate([u, v, u - v, u * v])
        return self.mlp_out(jax.nn.gelu(self.mlp_in(features)))


def _check_known_documents(encoder: eqx.Module, x, length, dt) -> None:
    """Each document's known values (token ids, length, time steps) checked at once, as
    the encoder's call checks them (`_checks`); inside the `jax.vmap` over the pair they
    are traced, and checked at run time only. An encoder that is not an `LRUModel` (an
    exporter's streamed stand-in) checks its own inputs."""
    if not isinstance(encoder, LRUModel):
        return
    pairs = [known(v) if v is not None else None for v in (x, length, dt)]
    if any(p is None and v is not None for p, v in zip(pairs, (x, length, dt), strict=True)):
        return
    xs, lengths, steps = pairs
    if xs is None or xs.ndim < 2 or xs.shape[0] != 2:
        return  # the shape checks answer
    for i in range(2):
        n = None if lengths is None or lengths.shape != (2,) else lengths[i]
        if n is not None:
            check_length(n, xs.shape[1], "the padded length")
        step = steps[i] if steps is not None and steps.ndim and steps.shape[0] == 2 else None
        encoder._check_known_values(xs[i], length=n, dt=step)


def _pair_steps(dt: ArrayLike) -> Array:
    """`dt` as an array whose leading axis is the pair, or a `ValueError` naming it."""
    dt = jnp.asarray(dt)
    if dt.ndim == 0 or dt.shape[0] != 2:
        raise ValueError(
            "`dt` holds the time steps of both documents: shape (2, length) (or (2,), one "
            f"scalar step per document); got shape {dt.shape}."
        )
    return dt


def _with_pair_axis(encoder: LRUModel) -> LRUModel:
    """`encoder` with every `MaskedBatchNorm` also reducing over the pair axis."""

    def add_pair_axis(node):
        if not isinstance(node, MaskedBatchNorm):
            return node
        names = node.axis_name if isinstance(node.axis_name, tuple) else (node.axis_name,)
        return node.with_axis_name((*names, _PAIR_AXIS))

    is_norm = lambda node: isinstance(node, MaskedBatchNorm)  # noqa: E731
    return jax.tree_util.tree_map(add_pair_axis, encoder, is_leaf=is_norm)

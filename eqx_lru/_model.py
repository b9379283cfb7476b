r"""Deep LRU models: encoder → depth × `LRUBlock` → pooling → head (paper Fig. 1, §D.1)."""

from collections.abc import Hashable, Sequence
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray, jaxtyped

from ._block import CoreFactory, Form, LRUBlock, _where_valid, valid_mask
from ._init import check_size

Pooling = Literal["mean", "last"] | None
_PAIR_AXIS = "eqx_lru_pair"


def _split(key: PRNGKeyArray | None, num: int) -> list[PRNGKeyArray | None]:
    return [None] * num if key is None else list(jax.random.split(key, num))


class LRUModel(eqx.Module):
    r"""A deep LRU for sequence classification or regression (paper Fig. 1, §D.1).

    $$h^0_t = \operatorname{Enc}(x_t),\quad h^{i} = \operatorname{LRUBlock}_i(h^{i-1}),
    \quad \text{out} = \operatorname{Head}(\operatorname{Pool}(h^{\text{depth}})).$$

    The encoder is an `eqx.nn.Embedding` for integer tokens (`encoder="embedding"`) or an
    `eqx.nn.Linear` for real features (`encoder="linear"`); the head is an
    `eqx.nn.Linear(d_model, out_size)` (or nothing, `out_size=None`, to return features).

    **Variable lengths.** `length=ℓ` marks positions `t >= ℓ` as padding. Whatever they
    contain (any token id, `nan`, …), they never change the output at a valid position or
    the pooled output, in training or inference mode, in either direction: inputs are
    zeroed at pads before the encoder, every block masks pads out of its batch-norm
    statistics and zeroes them before its recurrence (see `LRUBlock`), and pooling reads
    valid positions only. Per-step outputs (`pooling=None`) are zero at padded positions.

    One example per call: batch with `jax.vmap(model, axis_name="batch", in_axes=(0, None),
    out_axes=(0, None))` (the axis name is needed by batch norm in training mode).
    """

    encoder: eqx.nn.Embedding | eqx.nn.Linear
    blocks: tuple[LRUBlock, ...]
    head: eqx.nn.Linear | None
    pooling: Pooling = eqx.field(static=True)

    def __init__(
        self,
        in_size: int,
        out_size: int | None,
        d_model: int,
        d_state: int,
        depth: int,
        *,
        encoder: Literal["embedding", "linear"] = "linear",
        pooling: Pooling = "mean",
        form: Form | CoreFactory = "complex",
        norm: Literal["batch", "layer"] = "batch",
        bidirectional: bool = False,
        dropout: float = 0.0,
        glu: Literal["full", "half"] = "full",
        r_min: float | None = None,
        r_max: float | None = None,
        max_phase: float | None = None,
        axis_name: Hashable | Sequence[Hashable] = "batch",
        dtype=None,
        key: PRNGKeyArray,
    ):
        r"""**Arguments:**

        - `in_size`: the vocabulary size (`encoder="embedding"`) or the number of input
            features (`encoder="linear"`).
        - `out_size`: classes (or regression targets); `None` for no head (the pooled or
            per-step `d_model` features are returned).
        - `d_model`, `d_state`: $H$ and $N$ of every block.
        - `depth`: the number of `LRUBlock`s (the paper uses 6).
        - `encoder`: `"embedding"` — inputs are integer tokens of shape `(length,)`; or
            `"linear"` — inputs are features of shape `(length, in_size)`.
        - `pooling`: `"mean"` over valid positions, `"last"` valid position, or `None` for
            per-step outputs of shape `(length, out_size)`.
        - `form`, `norm`, `bidirectional`, `dropout`, `glu`, `r_min`, `r_max`,
            `max_phase`, `axis_name`, `dtype`: passed to every `LRUBlock`.
        - `key`: a `jax.random.PRNGKey`. The same key gives the same parameters for
            `form="complex"` and `form="real"`.
        """
        check_size("in_size", in_size)
        if out_size is not None:
            check_size("out_size", out_size)
        check_size("d_model", d_model)
        check_size("depth", depth)
        if pooling not in ("mean", "last", None):
            raise ValueError(f"`pooling` must be 'mean', 'last' or None, got {pooling!r}.")
        enc_key, head_key, *block_keys = jax.random.split(key, depth + 2)
        if encoder == "embedding":
            self.encoder = eqx.nn.Embedding(in_size, d_model, dtype=dtype, key=enc_key)
        elif encoder == "linear":
            self.encoder = eqx.nn.Linear(in_size, d_model, dtype=dtype, key=enc_key)
        else:
            raise ValueError(f"`encoder` must be 'embedding' or 'linear', got {encoder!r}.")
        self.blocks = tuple(
            LRUBlock(
                d_model,
                d_state,
                form=form,
                norm=norm,
                bidirectional=bidirectional,
                dropout=dropout,
                glu=glu,
                r_min=r_min,
                r_max=r_max,
                max_phase=max_phase,
                axis_name=axis_name,
                dtype=dtype,
                key=k,
            )
            for k in block_keys
        )
        self.head = (
            None
            if out_size is None
            else eqx.nn.Linear(d_model, out_size, dtype=dtype, key=head_key)
        )
        self.pooling = pooling

    def _check_input(self, x: Array) -> None:
        if isinstance(self.encoder, eqx.nn.Embedding):
            if x.ndim != 1 or not jnp.issubdtype(x.dtype, jnp.integer):
                raise ValueError(
                    "This model embeds tokens (`encoder='embedding'`): `x` must be an integer "
                    f"array of shape (length,); got {x.dtype} of shape {x.shape}. Batch "
                    "with `jax.vmap`."
                )
        else:
            size = self.encoder.in_features
            if x.ndim != 2 or x.shape[1] != size or not jnp.issubdtype(x.dtype, jnp.floating):
                raise ValueError(
                    "This model encodes features (`encoder='linear'`): `x` must be a float "
                    f"array of shape (length, {size}); got {x.dtype} of shape {x.shape}. "
                    "Batch with `jax.vmap`."
                )

    def _encode(self, x: Array, mask: Array | None) -> Array:
        # Sanitise pads first: an out-of-range token or a `nan` feature must not reach
        # any computation (not even through a zero-weighted gradient).
        x = _where_valid(mask, x)
        return jax.vmap(self.encoder)(x)

    def _features(self, x, state, mask, key, inference):
        h = self._encode(x, mask)
        for block, block_key in zip(self.blocks, _split(key, len(self.blocks))):
            h, state = block._forward(h, state, mask, block_key, inference)
        return h, state

    @jaxtyped(typechecker=beartype)
    def features(
        self,
        x: Int[Array, " length"] | Float[Array, "length in_size"],
        state: eqx.nn.State,
        *,
        length: Int[ArrayLike, ""] | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "length d_model"], eqx.nn.State]:
        """The last block's per-step outputs (before pooling and head); zero at pads.

        Same arguments as `__call__`.
        """
        self._check_input(x)
        mask = valid_mask(length, x.shape[0])
        return self._features(x, state, mask, key, inference)

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        x: Int[Array, " length"] | Float[Array, "length in_size"],
        state: eqx.nn.State,
        *,
        length: Int[ArrayLike, ""] | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, "..."], eqx.nn.State]:
        """Run the model on one sequence.

        **Arguments:**

        - `x`: integer tokens of shape `(length,)` or features of shape
            `(length, in_size)`, per `encoder`.
        - `state`: the `eqx.nn.State` from `eqx.nn.make_with_state(LRUModel)(...)`
            (batch-norm running statistics).
        - `length`: number of valid leading positions, `1 <= length <= x.shape[0]`; the
            rest is padding. `None`: all valid.
        - `key`: for dropout (split across blocks); needed in training mode when
            `dropout > 0`. Give each example its own key.
        - `inference`: overrides the `inference` flags (see `eqx.nn.inference_mode`) if
            not `None`. Inference mode: running batch-norm statistics, state unchanged, no
            dropout.

        **Returns:** `(out, new_state)`; `out` has shape `(out_size,)` with pooling,
        `(length, out_size)` with `pooling=None` (zero at pads), `d_model` in place of
        `out_size` if `out_size is None`.
        """
        self._check_input(x)
        mask = valid_mask(length, x.shape[0])
        h, state = self._features(x, state, mask, key, inference)
        if self.pooling is None:
            out = h if self.head is None else jax.vmap(self.head)(h)
            return _where_valid(mask, out), state
        if self.pooling == "mean":
            if length is None:
                pooled = jnp.mean(h, axis=0)
            else:
                pooled = jnp.sum(_where_valid(mask, h), axis=0) / jnp.asarray(length, h.dtype)
        else:
            pooled = h[-1] if length is None else h[jnp.asarray(length) - 1]
        out = pooled if self.head is None else self.head(pooled)
        return out, state


class LRURetrievalModel(eqx.Module):
    r"""Two-tower LRU for document matching (LRA Retrieval / AAN; LRA.md §7).

    Both documents are pooled by the same `LRUModel` encoder (no head) to $u, v \in
    \mathbb R^H$, then

    $$\text{logits} = W_2\, \operatorname{GELU}\big(W_1 [u, v, u - v, u \odot v] + b_1\big)
    + b_2 .$$

    The two documents are encoded in one `jax.vmap` over the pair, and batch norm takes
    its statistics over both documents of every pair in the batch (as S5 does by
    concatenating them along the batch axis).
    """

    encoder: LRUModel
    mlp_in: eqx.nn.Linear
    mlp_out: eqx.nn.Linear

    def __init__(
        self,
        in_size: int,
        out_size: int,
        d_model: int,
        d_state: int,
        depth: int,
        *,
        mlp_size: int | None = None,
        encoder: Literal["embedding", "linear"] = "embedding",
        pooling: Literal["mean", "last"] = "mean",
        form: Form | CoreFactory = "complex",
        norm: Literal["batch", "layer"] = "batch",
        bidirectional: bool = False,
        dropout: float = 0.0,
        glu: Literal["full", "half"] = "full",
        r_min: float | None = None,
        r_max: float | None = None,
        max_phase: float | None = None,
        axis_name: Hashable | Sequence[Hashable] = "batch",
        dtype=None,
        key: PRNGKeyArray,
    ):
        """**Arguments:** as `LRUModel` (`out_size`: classes, 2 for AAN), plus `mlp_size`:
        the hidden width of the head (default `d_model`). `pooling` must be `"mean"` or
        `"last"`; `encoder` defaults to `"embedding"` (character tokens)."""
        if pooling is None:
            raise ValueError("`pooling` must be 'mean' or 'last' for a retrieval model.")
        check_size("out_size", out_size)
        mlp_size = d_model if mlp_size is None else mlp_size
        check_size("mlp_size", mlp_size)
        enc_key, in_key, out_key = jax.random.split(key, 3)
        # Batch norm reduces over the user's batch axis and the pair axis of `__call__`.
        if isinstance(axis_name, str) or not isinstance(axis_name, Sequence):
            axis_name = (axis_name,)
        self.encoder = LRUModel(
            in_size,
            None,
            d_model,
            d_state,
            depth,
            encoder=encoder,
            pooling=pooling,
            form=form,
            norm=norm,
            bidirectional=bidirectional,
            dropout=dropout,
            glu=glu,
            r_min=r_min,
            r_max=r_max,
            max_phase=max_phase,
            axis_name=(*axis_name, _PAIR_AXIS),
            dtype=dtype,
            key=enc_key,
        )
        self.mlp_in = eqx.nn.Linear(4 * d_model, mlp_size, dtype=dtype, key=in_key)
        self.mlp_out = eqx.nn.Linear(mlp_size, out_size, dtype=dtype, key=out_key)

    @jaxtyped(typechecker=beartype)
    def __call__(
        self,
        x: Int[Array, "2 length"] | Float[Array, "2 length in_size"],
        state: eqx.nn.State,
        *,
        length: Int[ArrayLike, " 2"] | None = None,
        key: PRNGKeyArray | None = None,
        inference: bool | None = None,
    ) -> tuple[Float[Array, " out_size"], eqx.nn.State]:
        """Classify one pair of documents.

        **Arguments:**

        - `x`: the two documents stacked, `(2, length)` tokens or `(2, length, in_size)`
            features (pad both to a common length).
        - `state`, `key`, `inference`: as `LRUModel.__call__`.
        - `length`: valid lengths of the two documents, shape `(2,)`; `None`: all valid.

        **Returns:** `(logits, new_state)`, logits of shape `(out_size,)`.
        """
        keys = None if key is None else jax.random.split(key, 2)

        def encode(doc, doc_length, doc_key):
            return self.encoder(doc, state, length=doc_length, key=doc_key, inference=inference)

        (u, v), state = jax.vmap(encode, axis_name=_PAIR_AXIS, out_axes=(0, None))(
            x, None if length is None else jnp.asarray(length), keys
        )
        features = jnp.concatenate([u, v, u - v, u * v])
        return self.mlp_out(jax.nn.gelu(self.mlp_in(features))), state

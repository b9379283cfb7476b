r"""The arguments of `export` and `write`, checked before anything is traced or written:
each wrong one is one line naming it and what was expected (`TypeError` for a wrong kind
of value, `ExportError` for a wrong value)."""

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax

from ._manifest import OWN_KEYS
from ._program import ExportError, Features, Reads, Tokens, reads_of


def _state_indexes(model) -> list:
    """Where `model` keeps state (`eqx.nn.StateIndex`: batch norm's statistics)."""
    is_index = lambda x: isinstance(x, eqx.nn.StateIndex)  # noqa: E731
    return [x for x in jax.tree_util.tree_leaves(model, is_leaf=is_index) if is_index(x)]


def check_model(model, state) -> eqx.nn.State:
    """`state`, or the empty state of a `model` that keeps none; a `TypeError` or an
    `ExportError` naming `model` or `state` otherwise."""
    if not isinstance(model, eqx.Module):
        raise TypeError(
            "`model` must be an equinox Module (an LRUModel, LRUBlock, LRURetrievalModel, or "
            f"a module of your own with their call); got {type(model).__name__}."
        )
    indexes = _state_indexes(model)
    if state is None:
        if indexes:
            raise ExportError(
                f"this {type(model).__name__} keeps state (batch norm's running statistics): "
                "pass it as `state`, the second value of eqx.nn.make_with_state(...)(...), "
                "e.g. export(model, state)."
            )
        return eqx.nn.State(model)
    if not isinstance(state, eqx.nn.State):
        raise TypeError(
            "`state` must be the eqx.nn.State made with the model "
            f"(eqx.nn.make_with_state), or None for a model without one; got "
            f"{type(state).__name__}."
        )
    for index in indexes:
        try:
            state.get(index)
        except (KeyError, ValueError) as e:
            raise ExportError(
                f"`state` holds nothing for this {type(model).__name__}'s state ({e}): pass "
                "the state made with this model, the second value of "
                "eqx.nn.make_with_state(...)(...)."
            ) from None
    return state


def check_reads(model, reads) -> Reads:
    """`reads`, or the model's own (`reads_of`); an error naming `reads` where it is not a
    `Tokens`/`Features` record or disagrees with what a model of the library reads."""
    if reads is None:
        return reads_of(model)
    if not isinstance(reads, Tokens | Features):
        raise TypeError(
            "`reads` must be eqx_lru.export.Tokens(vocab_size) or "
            f"eqx_lru.export.Features(size, dtype); got {type(reads).__name__}."
        )
    try:
        own = reads_of(model)
    except ExportError:
        return reads  # a module of one's own: `reads` says it
    size = lambda r: r.vocab_size if isinstance(r, Tokens) else r.size  # noqa: E731
    if type(own) is not type(reads) or size(own) != size(reads):
        raise ExportError(
            f"`reads` is {reads}, but this {type(model).__name__} reads {own}: leave `reads` "
            "out for the library's models."
        )
    return reads


def check_flags(*, dt, description) -> None:
    if not isinstance(dt, bool):
        raise TypeError(f"`dt` must be True or False; got {dt!r}.")
    if not isinstance(description, str):
        raise TypeError(f"`description` must be a str; got {type(description).__name__}.")


def check_metadata(metadata) -> dict[str, Any]:
    """`metadata` as the manifest will hold it (a JSON copy): its keys strings, none of
    them the manifest's own (`OWN_KEYS`), its values JSON; an error naming the key."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(
            f"`metadata` must be a mapping of names to JSON values; got {type(metadata).__name__}."
        )
    copy = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"`metadata`'s keys must be strings; got {key!r}.")
        if key in OWN_KEYS:
            raise ExportError(
                f"`metadata` key {key!r} is one of the manifest's own entries "
                f"({', '.join(OWN_KEYS)}), which describe the artifact: name yours otherwise."
            )
        try:
            copy[key] = json.loads(json.dumps(value))
        except (TypeError, ValueError, RecursionError) as e:
            raise ExportError(f"`metadata[{key!r}]` is not a JSON value ({e}).") from None
    return copy


def check_path(path) -> Path:
    """`path` as a `Path` naming a file; an error naming `path` otherwise."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"`path` must be a str or a path; got {type(path).__name__}.")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise TypeError(f"`path` must be a str or a path of str; got {text!r}.")
    if "\0" in text:
        raise ExportError(f"`path` must not hold a NUL character; got {text!r}.")
    if not text or Path(text).name in ("", ".", "..") or text.endswith(("/", os.sep)):
        raise ExportError(f"`path` must name the artifact's file; got {text!r}.")
    return Path(text)

"""recurrentgemma's JAX `layers` and `modules`, for the parity tests, without its package
`__init__` files (they import the sampler and checkpoint utilities, which need
`sentencepiece` and `orbax-checkpoint`; the layers need only `flax`, `einops` and
`typeguard<3`). `./dev.sh` installs them with `--no-deps` (recurrentgemma pins
`numpy<2.4`)."""

import importlib
import importlib.util
import os
import sys
import types

import pytest


def load() -> types.SimpleNamespace:
    """`SimpleNamespace(common, layers, modules)`. When recurrentgemma or a module its
    layers import is missing: skip the test, or fail it in CI (`CI` set), where `./dev.sh`
    has installed them. The tests that call this are marked slow, so the quick tier (and
    `./dev.sh test-newest`, which does not install them) never gets here."""
    missing = [n for n in ("recurrentgemma", "flax", "einops", "typeguard") if not _found(n)]
    if missing:
        message = f"needs {', '.join(missing)} (./dev.sh installs them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    if "recurrentgemma" not in sys.modules:
        # Empty package modules in place of the `__init__` files, so that importing the
        # submodules runs only their own imports.
        spec = importlib.util.find_spec("recurrentgemma")
        assert spec is not None and spec.submodule_search_locations  # checked above
        root = spec.submodule_search_locations[0]
        for name, path in (("recurrentgemma", root), ("recurrentgemma.jax", f"{root}/jax")):
            package = types.ModuleType(name)
            package.__path__ = [path]
            sys.modules[name] = package
    names = ("common", "jax.layers", "jax.modules")
    common, layers, modules = (importlib.import_module(f"recurrentgemma.{n}") for n in names)
    return types.SimpleNamespace(common=common, layers=layers, modules=modules)


def _found(name: str) -> bool:
    return name in sys.modules or importlib.util.find_spec(name) is not None

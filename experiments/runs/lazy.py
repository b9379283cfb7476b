"""A module's public names imported when first used (PEP 562's module `__getattr__`): a
command's `--help` and a bad flag answer before JAX is imported, although the module
exports names whose modules import it.

    __getattr__, __dir__ = lazy(globals(), {"build_model": ".steps"})
"""

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy"]


def lazy(
    namespace: Mapping[str, Any], homes: Mapping[str, str], *, submodules: Sequence[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of the module whose `globals()` is `namespace`.

    **Arguments:**

    - `homes`: each lazy name and the module it is imported from (absolute, or relative
        to the module's package: `".steps"`).
    - `submodules`: names that are submodules of the module (a package), imported whole.

    `__dir__` lists the module's names and its `__all__`.
    """
    name, package = namespace["__name__"], namespace["__package__"]

    def __getattr__(attribute: str) -> Any:
        if attribute in submodules:
            return importlib.import_module(f"{name}.{attribute}")
        if attribute in homes:
            return getattr(importlib.import_module(homes[attribute], package), attribute)
        raise AttributeError(f"module {name!r} has no attribute {attribute!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__

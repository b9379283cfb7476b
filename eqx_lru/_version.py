"""The library's version, from its one source: `pyproject.toml`.

An installed package reads it from its distribution's metadata (written from
`pyproject.toml` when the wheel was built). A source checkout (this folder beside the
`pyproject.toml` of eqx_lru) reads that file itself, so an editable install never reports
a stale version. Neither: `"0+unknown"`.
"""

import pathlib
import tomllib
from importlib.metadata import PackageNotFoundError, version


def _from_checkout() -> str | None:
    path = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(path.read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return project.get("version") if project.get("name") == "eqx_lru" else None


def package_version() -> str:
    """The version of this copy of eqx_lru (see the module docstring)."""
    found = _from_checkout()
    if found is not None:
        return found
    try:
        return version("eqx_lru")
    except PackageNotFoundError:
        return "0+unknown"

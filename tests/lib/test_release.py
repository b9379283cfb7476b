"""One version everywhere, a licence, and package metadata (the fast checks of a release;
`./dev.sh release-check` builds and installs it)."""

import pathlib
import re
import tomllib

import eqx_lru
from eqx_lru import _version

# The repository root (the folder holding pyproject.toml), wherever under tests/ this is.
ROOT = next(p for p in pathlib.Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_one_version_everywhere():
    """`pyproject.toml` is the one source: `__version__` and the changelog's newest
    released section agree with it (they said 0.1.0 and 0.2/0.3)."""
    assert eqx_lru.__version__ == PROJECT["version"]
    sections = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    released = [s for s in sections if s != "Unreleased"]
    assert released[0] == PROJECT["version"], sections
    assert len(set(released)) == len(released), f"a version twice in CHANGELOG.md: {sections}"


def test_version_without_a_checkout(monkeypatch):
    """Installed (no pyproject.toml beside the package): the distribution's metadata, else
    a version that says it is unknown."""
    monkeypatch.setattr(_version, "_from_checkout", lambda: None)
    monkeypatch.setattr(_version, "version", lambda name: "9.9.9")
    assert _version.package_version() == "9.9.9"

    def missing(name):
        raise _version.PackageNotFoundError(name)

    monkeypatch.setattr(_version, "version", missing)
    assert _version.package_version() == "0+unknown"


def test_licence_and_metadata():
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    assert PROJECT["authors"] and PROJECT["keywords"] and PROJECT["classifiers"]
    assert {"Repository", "Documentation", "Changelog"} <= set(PROJECT["urls"])
    assert all(url.startswith("https://") for url in PROJECT["urls"].values())

"""One version everywhere, a licence, and package metadata (the fast checks of a release;
`./dev.sh release-check` builds and installs it)."""

import importlib
import pathlib
import re
import shutil
import subprocess
import tomllib
from typing import cast

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
    # Its copyright line, the authors' (the appendix only shows how to write one).
    owner = PROJECT["authors"][0]["name"]
    first = licence.lstrip().splitlines()[0]
    assert re.fullmatch(rf"Copyright \d{{4}}(-\d{{4}})? {re.escape(owner)}", first), first
    # Project addresses only where they exist: none yet (the organisation eqx-lru is not).
    assert all(url.startswith("https://") for url in PROJECT.get("urls", {}).values())
    assert not any(_NOWHERE.search(url) for url in PROJECT.get("urls", {}).values())


#: The addresses of the organisation github.com/eqx-lru, which does not exist.
_NOWHERE = re.compile(r"github\.com/eqx-" + r"lru|eqx-" + r"lru\.github\.io")


def _tracked_text() -> dict[str, str]:
    names = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    texts = {}
    for name in names:
        path = ROOT / name
        if path.suffix in {".md", ".py", ".toml", ".yml", ".yaml", ".sh", ".txt", ".cfg", ""}:
            try:
                texts[name] = path.read_text()
            except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
                continue
    return texts


def test_no_address_of_an_organisation_that_does_not_exist():
    """pyproject.toml's project URLs, the README's links and mkdocs.yml's site_url and
    repo_url pointed at github.com/eqx-lru (the site asked GitHub's API about it on every
    visit); no tracked file names it now (but the history in CHANGELOG.md, and tests)."""
    found = [
        name
        for name, text in _tracked_text().items()
        if _NOWHERE.search(text) and name != "CHANGELOG.md" and not name.startswith("tests/")
    ]
    assert not found, f"files that name github.com/eqx-lru or eqx-lru.github.io: {found}"


def test_extras_mean_something_to_a_package_user():
    """The package publishes the extras a user of it may want (`export`, `cuda`); the
    repository's own sets are dependency groups (PEP 735), not in the package's metadata,
    and everything that installs or names them uses `--group`."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(PROJECT["optional-dependencies"]) == {"export", "cuda"}
    groups = set(pyproject["dependency-groups"])
    assert {"experiments", "test", "docs", "release"} <= groups
    dev = (ROOT / "dev.sh").read_text()
    installed = set(cast(re.Match[str], re.search(r'^groups="([^"]*)"', dev, re.M))[1].split())
    assert installed == groups, f"dev.sh installs the groups {installed}, pyproject has {groups}"
    assert "-e . --group test" in dev, "test-newest installs the test group"
    as_extras = re.compile(r"""(?:eqx_lru|\.)\[[^\]]*\b(?:experiments|test|docs|release)\b""")
    named = {
        name: as_extras.findall(text)
        for name, text in _tracked_text().items()
        if name not in ("CHANGELOG.md", "tests/lib/test_release.py") and as_extras.search(text)
    }
    assert not named, f"files that name the repository's groups as extras: {named}"


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {"": parts[0], **dict(zip(parts[1::2], parts[2::2], strict=True))}


#: A path or a command of the repository (not of the wheel).
_REPOSITORY_THING = re.compile(
    r"^\./|/|\.(?:py|md|sh|toml|yml)$|dev\.sh|^python -m (?!eqx_lru)|-e \.|--group"
)


def test_the_package_description_names_only_what_the_wheel_holds():
    """A package index shows PACKAGE.md (README.md led with `./dev.sh` and `experiments/`,
    neither in the wheel). Outside its section on the rest of the project it names no path
    or command of the repository; every `eqx_lru` name it gives exists (the wheel holds the
    tracked files of eqx_lru/, `./dev.sh release-check` checks), every extra it installs
    is published; the repository's things it names exist; its links are absolute."""
    assert PROJECT["readme"] == "PACKAGE.md"
    text = (ROOT / "PACKAGE.md").read_text()
    sections = _sections(text)
    rest = sections.pop("The rest of the project")
    body = "\n".join(sections.values())
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", body, flags=re.M | re.S))
    commands = re.findall(r"^```sh\n(.*?)^```", body, re.M | re.S)
    lines = [line.split("#")[0].strip() for block in commands for line in block.splitlines()]
    repository = [s for s in spans + lines if _REPOSITORY_THING.search(s)]
    assert not repository, f"PACKAGE.md names the repository's {repository} outside its section"
    for line in lines:
        assert line.startswith("pip install "), line
        for extra in re.findall(r"eqx_lru\[([^\]]+)\]", line):
            assert set(extra.split(",")) <= set(PROJECT["optional-dependencies"]), line
    for name in {m for s in spans for m in re.findall(r"^eqx_lru(?:\.\w+)*", s)}:
        module, _, attribute = name.rpartition(".")
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            assert hasattr(importlib.import_module(module), attribute), name
    for thing in re.findall(r"`([^`\n]+)`", rest):
        if thing.startswith("./dev.sh "):
            job = thing.split()[1]
            assert f"    {job})" in (ROOT / "dev.sh").read_text(), thing
        elif _REPOSITORY_THING.search(thing):
            assert (ROOT / thing).exists(), thing
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert all(re.match(r"https://", link) for link in links), links


def test_dev_sh_says_what_it_installs(tmp_path):
    """`./dev.sh` printed nothing for minutes while pip installed: now one line, before pip
    runs, says what it installs and why (first set-up, pyproject.toml changed); nothing when
    the environment is current. Run with a stand-in for the environment's Python."""
    shutil.copy(ROOT / "dev.sh", tmp_path / "dev.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "python $*"\n')
    python.chmod(0o755)

    def run() -> list[str]:
        result = subprocess.run(
            ["sh", "dev.sh", "release-check"], cwd=tmp_path, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    first = run()
    assert first[0].startswith("dev.sh: installing") and "(first set-up)" in first[0], first
    assert first[1].startswith("python -m pip install --quiet"), first
    assert any("--group experiments --group test" in line for line in first), first
    assert run() == ["python .ci/release_check.py"]
    with (tmp_path / "pyproject.toml").open("a") as f:
        f.write("# changed\n")
    again = run()
    assert "(pyproject.toml changed)" in again[0], again

"""`./dev.sh release-check`: the release a user installs, checked before it is published.

1. builds the sdist, and the wheel from that sdist (`python -m build`: so the sdist alone
   is enough to build), into a temporary folder;
2. checks their metadata with `twine check --strict`;
3. checks what they hold: the wheel exactly the package's tracked files (`git ls-files
   eqx_lru`, `py.typed` included) and the licence; the sdist exactly the tracked files
   that `[tool.hatch.build.targets.sdist]` names (never an untracked file);
4. checks one version everywhere: `pyproject.toml`, the wheel's metadata, the newest
   released section of `CHANGELOG.md`, and `eqx_lru.__version__` of the installed wheel;
   and the wheel's description: `PACKAGE.md` (written for the package; README.md is the
   repository's), with only the package's own extras (`export`, `cuda`) and no project
   address of an organisation that does not exist;
5. installs the wheel into a fresh virtual environment (dependencies from pip's cache or
   the package index), imports it from there, finds there every `eqx_lru` name that
   `PACKAGE.md` names, and runs its example.

Prints one line per step with its time; exits 1 with the reason on the first failure.
"""

import pathlib
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Failed(Exception):
    pass


def _run(*command, cwd=ROOT, env=None) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise Failed(f"{' '.join(map(str, command))} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _tracked(*paths: str) -> set[str]:
    return set(_run("git", "ls-files", "--", *paths).split())


def _check_wheel(wheel: pathlib.Path, version: str) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    info = f"eqx_lru-{version}.dist-info/"
    package = {n for n in names if not n.startswith(info)}
    expected = _tracked("eqx_lru")
    if package != expected:
        raise Failed(
            f"the wheel's package files differ from the tracked ones (git ls-files eqx_lru): "
            f"extra {sorted(package - expected)}, missing {sorted(expected - package)}. "
            "Commit new files, or fix [tool.hatch.build.targets.wheel]."
        )
    if "eqx_lru/py.typed" not in package or f"{info}licenses/LICENSE" not in names:
        raise Failed(f"the wheel lacks py.typed or the licence: {sorted(names)}")
    metadata = zipfile.ZipFile(wheel).read(f"{info}METADATA").decode()
    found = re.search(r"^Version: (.+)$", metadata, re.M)[1]
    if found != version:
        raise Failed(f"the wheel's metadata says version {found}, pyproject.toml {version}.")
    _check_description(metadata)


def _check_description(metadata: str) -> None:
    """The package index's page is PACKAGE.md, and it names only what the wheel holds."""
    headers, _, description = metadata.partition("\n\n")
    if description.strip() != (ROOT / "PACKAGE.md").read_text().strip():
        raise Failed("the wheel's description is not PACKAGE.md (pyproject.toml: readme).")
    extras = set(re.findall(r"^Provides-Extra: (.+)$", headers, re.M))
    if extras - {"export", "cuda"}:
        raise Failed(f"the wheel publishes the repository's sets as extras: {sorted(extras)}")
    if re.search(r"eqx-lru", "\n".join(re.findall(r"^Project-URL: .+$", headers, re.M))):
        raise Failed("the wheel's project URLs name the organisation eqx-lru, which does not exist")


def _check_sdist(sdist: pathlib.Path, version: str) -> None:
    top = f"eqx_lru-{version}/"
    with tarfile.open(sdist) as archive:
        names = {m.name[len(top) :] for m in archive.getmembers() if m.isfile()}
    names.discard("PKG-INFO")
    wanted = _project()["tool"]["hatch"]["build"]["targets"]["sdist"]["only-include"]
    expected = _tracked(*wanted)
    if names != expected:
        raise Failed(
            f"the sdist's files differ from the tracked files it should hold ({wanted}): "
            f"extra {sorted(names - expected)}, missing {sorted(expected - names)}."
        )


def _check_changelog(version: str) -> None:
    sections = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    released = [s for s in sections if s != "Unreleased"]
    if not released or released[0] != version:
        raise Failed(
            f"CHANGELOG.md's newest released section is {released[:1]}, pyproject.toml says "
            f"{version}: add a '## {version}' section."
        )


def _package_example() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "PACKAGE.md").read_text(), re.M | re.S)
    if len(blocks) != 1:
        raise Failed(f"PACKAGE.md should hold one python example, has {len(blocks)}.")
    return blocks[0]


# Run in the fresh environment: each name PACKAGE.md gives is a module or an attribute
# of one there, or the script fails naming it.
_FIND_NAMES = """
import importlib
for name in {names!r}:
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for part in parts[k:]:
            obj = getattr(obj, part, None)
        break
    if obj is None:
        raise SystemExit(f"PACKAGE.md names {{name}}, which the installed wheel does not hold")
"""


def _install_and_run(wheel: pathlib.Path, tmp: pathlib.Path, version: str) -> None:
    venv = tmp / "venv"
    _run(sys.executable, "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    _run(python, "-m", "pip", "install", "--quiet", str(wheel))
    (tmp / "example.py").write_text(_package_example())
    probe = (
        "import eqx_lru, pathlib, sys; "
        f"assert eqx_lru.__version__ == {version!r}, eqx_lru.__version__; "
        f"assert pathlib.Path(eqx_lru.__file__).is_relative_to({str(venv)!r}), eqx_lru.__file__"
    )
    env = {"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu", "HOME": str(tmp)}
    _run(python, "-c", probe, cwd=tmp, env=env)
    names = sorted(set(re.findall(r"`(eqx_lru(?:\.\w+)*)", (ROOT / "PACKAGE.md").read_text())))
    (tmp / "names.py").write_text(_FIND_NAMES.format(names=names))
    _run(python, "names.py", cwd=tmp, env=env)
    _run(python, "example.py", cwd=tmp, env=env)


def main() -> int:
    version = _project()["project"]["version"]
    start = time.perf_counter()

    def step(what: str) -> None:
        print(f"release-check: {what} ({time.perf_counter() - start:.0f} s)", flush=True)

    try:
        with tempfile.TemporaryDirectory() as folder:
            tmp = pathlib.Path(folder)
            _check_changelog(version)
            _run(sys.executable, "-m", "build", "--outdir", str(tmp / "dist"), str(ROOT))
            (sdist,) = (tmp / "dist").glob("*.tar.gz")
            (wheel,) = (tmp / "dist").glob("*.whl")
            step(f"built {sdist.name} and {wheel.name}")
            _run(sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel))
            _check_wheel(wheel, version)
            _check_sdist(sdist, version)
            step("twine check passed; the wheel and sdist hold exactly the intended files")
            _install_and_run(wheel, tmp, version)
            step(
                f"installed into a fresh venv: eqx_lru {version} imports, PACKAGE.md's example runs"
            )
    except Failed as e:
        print(f"release-check: FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

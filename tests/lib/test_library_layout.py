"""The shape of `eqx_lru/` (issue 38): its private modules in concept folders, stacked in
levels that import only downwards, no import cycle (annotation-only imports count too), and
no module over its size cap.

Levels, from the bottom: the helpers every layer uses (checks, the surface decorators,
padding, the version), the scan, the cores, the blocks, the models, then what is built on
models (training, interop, the ablation ladder, the baselines, export), then the package's
`__init__.py`. A module may import its own level or a lower one."""

import ast
from pathlib import Path

from import_graph import assert_no_cycle

PACKAGE = Path(__file__).resolve().parents[2] / "eqx_lru"
#: Each concept folder or top-level name, and its level (higher imports lower).
LEVELS = {
    "_version": 0,
    "_runtime_check": 0,
    "_checks": 0,
    "_surface": 0,
    "_padding": 0,
    "_scan": 1,
    "_cores": 2,
    "_blocks": 3,
    "_models": 4,
    "_training": 5,
    "recurrentgemma": 5,
    "ablation": 5,
    "baselines": 5,
    "export": 5,
    "": 6,  # eqx_lru/__init__.py
}
FOLDERS = ("_scan", "_cores", "_blocks", "_models")
#: Lines a module may have (about 450, the cap of experiments/ too).
SIZE_CAP = 460


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `eqx_lru` that `name` imports, anywhere in the file (under
    `TYPE_CHECKING` too). Names are relative to the package (`_scan._methods`)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [p for p in package if p]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] == "eqx_lru":
                base = ".".join((node.module or "").split(".")[1:])
            else:
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}".lstrip(".")
                found.add(target if target in modules else base)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "eqx_lru":
                    found.add(".".join(alias.name.split(".")[1:]))
    return {m for m in found if m in modules and m != name}


def _level(module: str) -> int:
    return LEVELS[module.split(".")[0]]


def test_every_module_has_a_level_and_the_concepts_have_folders():
    modules = _modules()
    unplaced = sorted(m for m in modules if m.split(".")[0] not in LEVELS)
    assert not unplaced, f"modules of no level (add them to LEVELS or a folder): {unplaced}"
    for folder in FOLDERS:
        assert (PACKAGE / folder / "__init__.py").is_file(), folder


def test_no_import_cycle():
    modules = _modules()
    assert_no_cycle({m: _imports(m, p, modules) for m, p in modules.items()})


def test_imports_run_only_downwards():
    modules = _modules()
    upward = [
        f"{m or '__init__'} (level {_level(m)}) imports {n} (level {_level(n)})"
        for m, p in sorted(modules.items())
        for n in sorted(_imports(m, p, modules))
        if _level(n) > _level(m)
    ]
    assert not upward, "\n".join(upward)


def test_modules_are_small():
    sizes = {m: p.read_text().count("\n") for m, p in _modules().items()}
    large = [f"{m}: {n} lines" for m, n in sorted(sizes.items()) if n > SIZE_CAP]
    assert not large, f"modules over {SIZE_CAP} lines: {large}"


def test_the_checker_sees_an_upward_import(tmp_path):
    """The walk resolves relative imports: a core importing a block is found (so an empty
    result above is not a walk that found nothing)."""
    modules = _modules()
    fake = tmp_path / "_fake.py"
    fake.write_text("from .._blocks._block import LRUBlock\nfrom . import _lru\n")
    found = _imports("_cores._fake", fake, {**modules, "_cores._fake": fake})
    assert found == {"_blocks._block", "_cores._lru"}

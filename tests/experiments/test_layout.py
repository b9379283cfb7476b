"""The shape of `experiments/`: no import cycle, the checkpoint store's few dependencies,
small modules and functions in `experiments/lra`, settings read as `RunConfig` fields, and
task and core names written only in their registries (issue 25's "done when")."""

import ast
import re
from pathlib import Path

import pytest

from experiments.lra import cores, tasks

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
#: Folders another part of the project owns (the export command is ported separately).
OWNED_ELSEWHERE = ("export", "paper", "ldstack")


def _modules() -> dict[str, Path]:
    out = {}
    for path in EXPERIMENTS.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `experiments` that `name` imports, at any level of the file."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in modules else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def test_no_import_cycle():
    modules = _modules()
    graph = {m: _imports(m, p, modules) for m, p in modules.items()}
    done, path = set(), []

    def visit(m):
        if m in path:
            raise AssertionError(f"import cycle: {' -> '.join(path[path.index(m) :] + [m])}")
        if m in done:
            return
        path.append(m)
        for n in sorted(graph[m]):
            visit(n)
        path.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)


def test_the_checkpoint_store_imports_neither_the_command_line_nor_the_steps():
    modules = _modules()
    store = "experiments.lra._checkpoint._store"
    assert _imports(store, modules[store], modules) == {"experiments._atomic"}


def _lra_files():
    return sorted((EXPERIMENTS / "lra").rglob("*.py"))


@pytest.mark.parametrize("path", _lra_files(), ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_lra_modules_and_functions_are_small(path):
    text = path.read_text()
    assert text.count("\n") <= 460, f"{path.name}: {text.count(chr(10))} lines (about 450 at most)"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            assert length <= 62, f"{path.name}:{node.lineno} {node.name}: {length} lines"


def _sources():
    for path in sorted(EXPERIMENTS.rglob("*.py")):
        if path.relative_to(EXPERIMENTS).parts[0] not in OWNED_ELSEWHERE:
            yield path, path.read_text()


def test_settings_are_fields_and_names_live_in_their_registries():
    task_names = "|".join(map(re.escape, tasks.names()))
    core_names = "|".join(map(re.escape, cores.names()))
    homes = {"tasks": EXPERIMENTS / "lra" / "tasks.py", "cores": EXPERIMENTS / "lra" / "cores.py"}
    for path, text in _sources():
        assert 'cfg["' not in text, f"{path}: a setting read from a dict"
        for kind, names in (("tasks", task_names), ("cores", core_names)):
            if path == homes[kind]:
                continue
            # A task's record says which model it trains: "retrieval" there is a model kind.
            text = re.sub(r"""model\s*(==|!=|=)\s*["']retrieval["']""", "model", text)
            literal = re.search(rf"""(?<![\w.])["']({names})["']""", text)
            assert literal is None, f"{path}: {kind} name {literal.group(0)} outside the registry"

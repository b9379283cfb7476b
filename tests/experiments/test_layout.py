"""The shape of `experiments/`: no import cycle, no import of another package's underscore
module, the shared harness (`experiments/runs`) below both trainers, the checkpoint store's
few dependencies, small modules and functions in `experiments/lra`, `experiments/runs` and
`experiments/export`, settings read as `RunConfig` fields everywhere in `experiments/`, and
task and core names written only in their registries (issues 25 and 32's "done when")."""

import ast
import re
from pathlib import Path
from typing import cast

import pytest
from import_graph import assert_no_cycle

from eqx_lru.ablation import ABLATION_CORES
from experiments.lra import cores, tasks
from experiments.statetracking import rungs
from experiments.statetracking import tasks as state_tasks

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
#: Names of another registry that a module may write although a trainer core or task has
#: the same name: the ablation ladder's rungs are the library's `ABLATION_CORES` (its
#: last rung is called "lru", like the trainer's LRU core, but it is another model: the
#: ladder builds it from `eqx_lru.ablation`, never from `experiments/lra/cores.py`).
OTHER_REGISTRIES = {
    EXPERIMENTS / "paper" / name: tuple(ABLATION_CORES) for name in ("ladder.py", "_ladder_cli.py")
}
#: The state-tracking ladder's rungs and tasks are its own registries
#: (`experiments/statetracking/rungs.py`, `tasks.py`: its "lru" is the LRU rung of that
#: ladder, its "s5" the symmetric group, neither the LRA trainer's core).
OTHER_REGISTRIES.update(
    {
        path: (*rungs.RUNGS, *state_tasks.TASKS)
        for path in (EXPERIMENTS / "statetracking").glob("*.py")
    }
)


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
    assert_no_cycle({m: _imports(m, p, modules) for m, p in modules.items()})


def _package(module: str) -> str:
    """The package of `experiments` a module belongs to (`lra`, `runs`, `demo`...)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _private(module: str) -> bool:
    """Whether `module` is an underscore module (or lies in one); dunders are not."""
    return any(p.startswith("_") and not p.startswith("__") for p in module.split(".")[1:])


def test_no_module_imports_another_packages_underscore_module():
    modules = _modules()
    found = [
        f"{m} imports {n}"
        for m, p in sorted(modules.items())
        for n in sorted(_imports(m, p, modules))
        if _private(n) and _package(n) != _package(m)
    ]
    assert not found, "\n".join(found)


def test_the_harness_is_below_both_trainers():
    """`runs/` imports neither trainer; of `experiments/`, the language model imports only
    the harness and itself."""
    modules = _modules()
    for m, p in modules.items():
        imported = {_package(n) for n in _imports(m, p, modules)}
        if _package(m) == "runs":
            assert not imported & {"lra", "lm"}, f"{m} imports a trainer: {imported}"
        if _package(m) == "lm":
            assert imported <= {"lm", "runs"}, f"{m} imports {imported - {'lm', 'runs'}}"


def test_the_checkpoint_store_imports_neither_the_command_line_nor_the_steps():
    """The store imports the atomic writes and the typed reading of JSON records, which
    import nothing else of `experiments`."""
    modules = _modules()
    store, records = "experiments.runs.checkpoint.store", "experiments.runs.records"
    assert _imports(store, modules[store], modules) == {"experiments.runs.atomic", records}
    assert _imports(records, modules[records], modules) == set()


def _redesigned_files():
    """The packages redesigned for issues 25 and 32 (the others are measured by the lead)."""
    return sorted(
        path for name in ("lra", "runs", "export") for path in (EXPERIMENTS / name).rglob("*.py")
    )


@pytest.mark.parametrize("path", _redesigned_files(), ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_lra_modules_and_functions_are_small(path):
    text = path.read_text()
    assert text.count("\n") <= 460, f"{path.name}: {text.count(chr(10))} lines (about 450 at most)"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = cast(int, node.end_lineno) - node.lineno + 1
            assert length <= 62, f"{path.name}:{node.lineno} {node.name}: {length} lines"


def _sources():
    for path in sorted(EXPERIMENTS.rglob("*.py")):
        yield path, path.read_text()


def _literal_names(names, allowed=()) -> str:
    return "|".join(re.escape(n) for n in names if n not in allowed)


def test_settings_are_fields_and_names_live_in_their_registries():
    homes = {"tasks": EXPERIMENTS / "lra" / "tasks.py", "cores": EXPERIMENTS / "lra" / "cores.py"}
    sources = list(_sources())
    assert {p.relative_to(EXPERIMENTS).parts[0] for p, _ in sources} >= {
        "export",
        "paper",
        "ldstack",
        "lra",
        "bench",
    }, "every package of experiments/ is read"
    for path, text in sources:
        assert 'cfg["' not in text, f"{path}: a setting read from a dict"
        allowed = OTHER_REGISTRIES.get(path, ())
        for kind, names in (("tasks", tasks.names()), ("cores", cores.names())):
            if path == homes[kind]:
                continue
            names = _literal_names(names, allowed)
            if not names:
                continue
            # A task's record says which model it trains: "retrieval" there is a model kind.
            text = re.sub(r"""model\s*(==|!=|=)\s*["']retrieval["']""", "model", text)
            # `__all__` lists identifiers (`runs.flags.text`), not task names.
            text = re.sub(r"__all__ = \[[^\]]*\]", "", text)
            literal = re.search(rf"""(?<![\w.])["']({names})["']""", text)
            assert literal is None, f"{path}: {kind} name {literal.group(0)} outside the registry"

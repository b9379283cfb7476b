"""The documentation documents every public name, and its examples run (the built site
is checked in `test_site.py`).

- `test_every_public_name_has_a_reference_entry`: every name in `__all__` of `eqx_lru`,
  `eqx_lru.ablation` and `eqx_lru.baselines` is documented by a `::: path` entry of the
  API reference (`docs/api/*.md`), under its own path or under another public path that
  names the same object.
- `test_code_block[...]`: every ```python block of README.md, PACKAGE.md (the package's
  description) and docs/**/*.md is executed,
  one test per block. The blocks of one page share a namespace, in page order, as a reader
  runs them: block k runs in a copy of the namespace left by blocks 0..k-1 of its page (a
  process that did not run those runs them first, so each test also runs alone; under
  pytest-xdist's `--dist loadfile` (./dev.sh test) or `--dist loadgroup` keeps a page on
  one worker, so none runs twice). A
  page's first block starts from a fresh namespace. Blocks run with JAX's default
  ("standard") dtype promotion, as users have it, in a temporary working directory. Some
  blocks' results are checked further (`CHECKS`).

A block that truly cannot run in the suite is fenced as ```python {.no-run}: it is
reported as a skipped test (with the reason), and `test_no_run_blocks_are_counted` keeps
their number at `NO_RUN_ALLOWED`. Prefer small shapes and tiny generated data instead.
"""

import dataclasses
import functools
import gc
import importlib
import pathlib
import re
import sys
from typing import cast

import jax
import numpy as np
import pytest

# The repository root (the folder holding pyproject.toml), wherever under tests/ this is.
ROOT = next(p for p in pathlib.Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
DOCS = ROOT / "docs"
PUBLIC_MODULES = (
    "eqx_lru",
    "eqx_lru.ablation",
    "eqx_lru.baselines",
    "eqx_lru.export",
    "eqx_lru.recurrentgemma",
)
#: How many ```python {.no-run} blocks the pages may hold (see the module docstring).
NO_RUN_ALLOWED = 0
#: Blocks that take more than a few seconds (they train, compile a trainer step, or export).
SLOW_MARKERS = ("train.run(", "for step in range(steps)", "eqx_lru.export.export(")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")


@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # path relative to the repository root
    index: int  # among the page's python blocks
    line: int  # 1-based line of the opening fence
    code: str
    no_run: bool

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _pages() -> list[pathlib.Path]:
    return [ROOT / "README.md", ROOT / "PACKAGE.md", *sorted(DOCS.rglob("*.md"))]


def _python_blocks(path: pathlib.Path) -> list[Block]:
    """The ```python blocks of one Markdown file, dedented, in order."""
    lines = path.read_text().splitlines()
    page = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence, info = match["indent"], match["fence"], match["info"].strip()
        start = i
        i += 1
        body = []
        while i < len(lines) and not re.match(
            rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", lines[i]
        ):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1  # the closing fence
        language = info.split("{")[0].strip().split(" ")[0] if info else ""
        if language == "python":
            blocks.append(
                Block(page, len(blocks), start + 1, "\n".join(body) + "\n", ".no-run" in info)
            )
    return blocks


@functools.cache
def _all_blocks() -> tuple[Block, ...]:
    return tuple(block for path in _pages() for block in _python_blocks(path))


def _params():
    params = []
    for block in _all_blocks():
        # One page's blocks go to one pytest-xdist worker (the whole file does with
        # `--dist loadfile`, as ./dev.sh test runs; the page's group with `--dist
        # loadgroup`), so none reruns the blocks before it.
        # PACKAGE.md's example is README.md's: on one worker, it finds the JAX caches warm.
        marks = [pytest.mark.xdist_group(name=_group(block.page))]
        if any(marker in block.code for marker in SLOW_MARKERS):
            marks.append(pytest.mark.slow)
        params.append(pytest.param(block, id=block.id, marks=marks))
    return params


def _group(page: str) -> str:
    return "README.md" if page == "PACKAGE.md" else page


# The namespace left by each (page, block index) in this process; an exception if the
# block failed. Shallow copies: a block that mutates an earlier object in place changes it
# for the blocks after it, as it would for a reader. Only the current page's group is
# kept (`_forget_other_pages`).
_NAMESPACES: dict[tuple[str, int], dict | BaseException] = {}


def _forget_other_pages(block: Block) -> None:
    """At a new page's first block in this process, drop the other pages' namespaces
    (their models and arrays) and JAX's compiled programs: a worker holds one page, not
    every page it ran (kept, they took one worker past 3 GiB). A page met again (a test
    run alone, or out of order) reruns its earlier blocks."""
    others = [key for key in _NAMESPACES if _group(key[0]) != _group(block.page)]
    if others:
        for key in others:
            del _NAMESPACES[key]
        gc.collect()
        jax.clear_caches()


def _execute(block: Block, namespace: dict) -> dict:
    namespace = dict(namespace)
    # Padding with newlines makes tracebacks point at the block's line in the page.
    source = "\n" * block.line + block.code
    with jax.numpy_dtype_promotion("standard"):
        exec(compile(source, str(ROOT / block.page), "exec"), namespace)
    return namespace


def _namespace_before(block: Block) -> dict:
    """The namespace that the page's blocks before `block` leave (running them here if
    this process has not run them yet)."""
    _forget_other_pages(block)
    namespace: dict = {"__name__": "__docs__"}
    for earlier in _all_blocks():
        if earlier.page != block.page or earlier.index >= block.index:
            continue
        key = (earlier.page, earlier.index)
        if key not in _NAMESPACES:
            try:
                _NAMESPACES[key] = namespace if earlier.no_run else _execute(earlier, namespace)
            except BaseException as e:  # noqa: B036 - recorded, reported below
                _NAMESPACES[key] = e
        result = _NAMESPACES[key]
        if isinstance(result, BaseException):
            pytest.fail(
                f"the earlier block at {earlier.id} failed ({type(result).__name__}: "
                f"{result}); this block runs after it. Fix that one first."
            )
        namespace = result
    return namespace


def _check_lru_block_training(namespace: dict, out: str) -> None:
    losses = np.asarray(namespace["losses"])
    assert len(losses) == namespace["steps"] and np.all(np.isfinite(losses))
    # It learned: the loss fell well below its start and chance (ln 2), and held-out
    # accuracy is far above chance (50%), in both forms.
    assert losses[-10:].mean() < 0.5 * losses[:10].mean()
    assert losses[-10:].mean() < 0.3
    assert float(namespace["acc"]) > 0.85 and float(namespace["real_acc"]) > 0.85
    assert "test accuracy" in out


def _check_readme_example(namespace: dict, out: str) -> None:
    del out
    assert namespace["y"].shape == (8, 500, 16)
    assert namespace["grads"].nu_log.shape == (32,)
    assert namespace["y_t"].shape == (16,)


#: Further checks of some blocks' results: (page, a string the block contains) -> check.
CHECKS = {
    ("README.md", "def grad_fn"): _check_readme_example,
    ("PACKAGE.md", "def grad_fn"): _check_readme_example,
    ("docs/guides/lru-block.md", "class Classifier"): _check_lru_block_training,
}


@pytest.mark.parametrize("block", _params())
def test_code_block(block: Block, tmp_path, monkeypatch, capsys):
    if block.no_run:
        pytest.skip(f"{block.id} is fenced as ```python {{.no-run}}")
    monkeypatch.chdir(tmp_path)
    namespace = _namespace_before(block)
    key = (block.page, block.index)
    try:
        namespace = _execute(block, namespace)
    except BaseException as e:
        _NAMESPACES[key] = e
        raise
    _NAMESPACES[key] = namespace
    out = capsys.readouterr().out
    for (page, marker), check in CHECKS.items():
        if page == block.page and marker in block.code:
            check(namespace, out)


def test_checked_blocks_exist():
    """Every entry of `CHECKS` still finds its block (a renamed page or a rewritten block
    would otherwise silently drop the check)."""
    for page, marker in CHECKS:
        assert any(b.page == page and marker in b.code for b in _all_blocks()), (
            f"CHECKS expects a python block containing {marker!r} in {page}; update CHECKS."
        )


def test_no_run_blocks_are_counted():
    no_run = [b.id for b in _all_blocks() if b.no_run]
    print(f"{len(no_run)} of {len(_all_blocks())} python blocks are not run: {no_run}")
    assert len(no_run) <= NO_RUN_ALLOWED, (
        f"{len(no_run)} python blocks are fenced {{.no-run}} ({no_run}), more than "
        f"NO_RUN_ALLOWED = {NO_RUN_ALLOWED}: make them runnable (small shapes, generated "
        "data) or raise NO_RUN_ALLOWED in tests/experiments/test_docs.py with a reason."
    )


def test_every_page_has_been_found():
    pages = {b.page for b in _all_blocks()}
    assert "README.md" in pages and any(p.startswith("docs/") for p in pages)


def _nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def _published_pages() -> set[str]:
    """The Markdown files of `experiments/` that docs/hooks.py publishes as pages."""
    hooks = (DOCS / "hooks.py").read_text()
    block = re.search(r"^PUBLISHED = \((.*?)^\)", hooks, re.M | re.S)
    assert block, "docs/hooks.py has no PUBLISHED tuple"
    globs = re.findall(r'"([^"]+)"', block[1])
    return {
        p.relative_to(ROOT).as_posix() for g in globs for p in ROOT.glob(g) if p.suffix == ".md"
    }


def test_every_docs_page_is_in_the_nav():
    """The docs pages and the published pages of experiments/ (the ladder's table was
    published but in no menu)."""
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = set(_nav_pages(config["nav"]))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")} | _published_pages()
    assert not pages - nav, f"pages missing from the nav of mkdocs.yml: {pages - nav}"
    assert config["validation"]["omitted_files"] == "warn", "a page out of the nav must fail"
    missing = [p for p in nav if not (DOCS / p).is_file() and not (ROOT / p).is_file()]
    assert not missing, f"the nav of mkdocs.yml names pages that do not exist: {missing}"


def _reference_entries() -> dict[str, int]:
    """`::: path` entries of the docs pages -> how often each appears."""
    entries: dict[str, int] = {}
    for path in DOCS.rglob("*.md"):
        for match in re.finditer(r"^:::\s*([\w.]+)\s*$", path.read_text(), re.M):
            entries[match[1]] = entries.get(match[1], 0) + 1
    return entries


def _resolve(path: str):
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


def test_every_public_name_has_a_reference_entry():
    entries = _reference_entries()
    documented = {}
    for entry in entries:
        documented.setdefault(id(_resolve(entry)), []).append(entry)
    missing = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if isinstance(obj, type(sys)):
                # A public submodule: documented by the entries of its own names.
                assert any(e.startswith(obj.__name__ + ".") for e in entries), (
                    f"{module_name}.{name} is a public module with no reference entry"
                )
                continue
            if f"{module_name}.{name}" not in entries and id(obj) not in documented:
                missing.append(f"{module_name}.{name}")
    assert not missing, (
        f"public names without a `::: path` entry in docs/api/*.md: {missing}. Add one to "
        "the reference page of its area."
    )
    duplicated = [e for e, n in entries.items() if n > 1]
    assert not duplicated, f"reference entries that appear more than once: {duplicated}"


def test_every_named_eqx_lru_object_exists():
    """Every `eqx_lru.X.Y` that the README, the docs or a docstring names in backticks
    exists (a renamed or removed name leaves no dangling reference behind)."""
    sources = [ROOT / "README.md", ROOT / "PACKAGE.md", *DOCS.rglob("*.md")]
    sources += [*(ROOT / "eqx_lru").rglob("*.py")]
    dangling = set()
    for path in sources:
        for match in re.finditer(r"`(eqx_lru(?:\.[A-Za-z_]\w*)+)", path.read_text()):
            try:
                _resolve(match[1])
            except (ImportError, AttributeError):
                dangling.add(f"{match[1]} ({path.relative_to(ROOT)})")
    assert not dangling, f"names that do not exist: {sorted(dangling)}"


def test_the_pages_a_newcomer_asks_for():
    """The export guide, the data generator's page and the FAQ exist (their code blocks
    run above), and the development page and the FAQ say how long the suite takes and
    name the quick tier that `./dev.sh test --quick` runs."""
    faq = (DOCS / "faq.md").read_text()
    for topic in ("jax.vmap", "two forms", "scan method", "export", "GPU", "tests take"):
        assert topic in faq, f"docs/faq.md does not answer about {topic!r}"
    assert "python -m experiments.lra.generate" in (DOCS / "guides" / "data.md").read_text()
    assert "eqx_lru.export.export(" in (DOCS / "guides" / "export.md").read_text()
    development = (DOCS / "development.md").read_text()
    assert "./dev.sh test --quick" in development and "minutes" in development
    assert "--quick ]; then" in (ROOT / "dev.sh").read_text()


def test_docstrings_with_maths_are_raw():
    """A docstring's TeX reaches the reference pages as written only in a raw string: in a
    plain one `\\bmod` became a backspace and "mod" (api/baselines), `\\nu` would be a
    newline. Every string literal of eqx_lru/ with a `$` and an escape that changes it is
    raw."""
    import tokenize

    changed = re.compile(r"(?<!\\)(?:\\\\)*\\[abfnrtv]")
    plain = []
    for path in sorted((ROOT / "eqx_lru").rglob("*.py")):
        with path.open("rb") as f:
            for token in tokenize.tokenize(f.readline):
                if token.type != tokenize.STRING or "$" not in token.string:
                    continue
                prefix = cast(re.Match[str], re.match(r"[A-Za-z]*", token.string))[0].lower()
                if "r" not in prefix and changed.search(token.string):
                    plain.append(f"{path.relative_to(ROOT)}:{token.start[0]}")
    assert not plain, f'string literals with TeX escapes that are not raw (r"""): {plain}'


def test_the_demo_is_not_a_benchmark():
    """The demo trains the two forms one after the other on a machine that may be busy:
    its table prints each run's wall time as such, no steps per second to compare (on a
    loaded machine it read as "the real form is 3x slower"), and points to the benchmarks;
    its --help gives no fixed duration (it said 3 minutes, the README 1½)."""
    import contextlib
    import io

    from experiments import demo

    results = {
        form: {
            "best_val_accuracy": 0.45,
            "best_step": 10,
            "test_accuracy": 0.4,
            "wall": wall,
            "steps_per_sec": steps,
        }
        for form, wall, steps in (("complex", 41.0, 45.0), ("real", 134.0, 15.2))
    }
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        demo._print_results(results, 0.166, pathlib.Path("demo_out"), steps=10)
    table = out.getvalue()
    assert "steps/s" not in table and "15.2" not in table, table
    assert "not a speed comparison" in table and "experiments.bench" in table, table
    assert not re.search(r"\d\s*minutes", cast(str, demo.__doc__)), demo.__doc__


def test_the_generators_usage_lines_name_every_flag_of_their_task():
    """data.md's ListOps line omitted --overwrite (the command refuses existing files
    without it). Each `--task` line of the page and of the module's docstring names every
    flag of its task's group and the shared ones."""
    from experiments.lra import generate

    parser = generate._parser()
    groups = {g.title: g for g in parser._action_groups}
    shared = [a for a in groups["options"]._group_actions if a.option_strings[0] != "-h"]
    for text in ((DOCS / "guides" / "data.md").read_text(), generate.__doc__ or ""):
        for task in ("listops", "pathfinder"):
            start = text.index(f"python -m experiments.lra.generate --task {task}")
            line = re.split(r"python -m|\n\n", text[start + 10 :])[0]
            for action in [*groups[task]._group_actions, *shared]:
                flag = action.option_strings[-1]
                assert flag in line or action.dest == "task", (task, flag, line)

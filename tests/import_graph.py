"""The import-graph check the layout tests share (`tests/lib/test_library_layout.py` for
`eqx_lru/`, `tests/experiments/test_layout.py` for `experiments/`)."""


def assert_no_cycle(graph: dict[str, set[str]]) -> None:
    """Fail naming the first import cycle of `graph` (module -> the modules it imports)."""
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

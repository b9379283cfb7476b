"""The conformance list (`conformance.py`): every conformance test is parametrised over each
entry of the list that it selects, and one entry added to the list reaches all of them."""

import importlib
from typing import Any, cast

import conformance
import pytest
from conformance import ALGEBRAS, CORES, METHODS, select

ParameterSet = type(pytest.param(None))  # what `pytest.param` gives

MODULES = (
    "test_scan",
    "test_scan_methods",
    "test_lru",
    "test_dt",
    "test_core",
    "test_streaming",
    "test_packing",
)


def _params(fn) -> list[dict]:
    """The parameter sets of test function `fn` as dicts (the product of its marks)."""
    sets = [{}]
    for mark in getattr(fn, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = [n.strip() for n in mark.args[0].split(",")]
        rows = []
        for value in mark.args[1]:
            if isinstance(value, ParameterSet):
                value = value.values
            elif len(names) == 1:
                value = (value,)
            rows.append(dict(zip(names, value, strict=True)))
        sets = [{**s, **row} for s in sets for row in rows]
    return sets


def _coverage() -> dict[str, dict[str, Any]]:
    """What each conformance test runs over, read off its parametrisation."""
    tests = {name: importlib.import_module(name) for name in MODULES}

    def values(fn, key):
        return {p[key] for p in _params(fn)}

    scan, scan_methods, lru = tests["test_scan"], tests["test_scan_methods"], tests["test_lru"]
    core, packing = tests["test_core"], tests["test_packing"]
    streaming = tests["test_streaming"]
    configs = [p["config"] for p in _params(streaming.test_steps_chunks_and_parallel_agree)]
    gradients = scan_methods.test_forward_and_gradients_match_autodiff_of_loop
    return {
        "scan": dict(
            methods=values(scan.test_matches_loop, "method"),
            algebras=values(scan.test_matches_loop, "algebra"),
        ),
        "scan_methods": dict(
            methods=values(gradients, "method"), algebras=values(gradients, "name")
        ),
        "lru": dict(
            methods=values(lru.test_matches_oracle_float64, "method")
            & values(lru.test_gradients_equal_across_forms, "method")
            & values(tests["test_dt"].test_dt_matches_oracle_float64, "method")
        ),
        "core": dict(
            cores=values(core.test_every_core_follows_the_contract, "name"),
            two_forms=values(core.test_to_real_and_to_complex_convert_cores_with_two_forms, "name"),
            one_form=values(core.test_conversion_refuses_cores_with_one_form, "name"),
        ),
        "streaming": dict(
            cores={c["core"] for c in configs},
            # each LRU form with exactly one of the list's methods
            one_method_per_form=all(
                len(ms) == 1 and ms <= set(METHODS)
                for ms in (
                    {c["method"] for c in configs if c["core"] == form}
                    for form in streaming.LRU_FORMS
                )
            ),
        ),
        "packing": dict(methods=values(packing.test_block_packed_equals_separate, "method")),
    }


def _expected() -> dict[str, dict[str, Any]]:
    """What each conformance test must run over, by the list."""
    grid = set(select(METHODS, grid=True))
    return {
        "scan": dict(methods=grid, algebras=set(ALGEBRAS)),
        "scan_methods": dict(methods=grid, algebras=set(ALGEBRAS)),
        "lru": dict(methods=grid),
        "core": dict(
            cores=set(CORES),
            two_forms=set(select(CORES, forms=conformance.BOTH)),
            one_form=set(select(CORES, forms=())),
        ),
        # Streaming is a property of the model around the core: one method per LRU form
        # (the scan's tests and test_packing prove every method equal).
        "streaming": dict(
            cores=set(select(CORES, in_models=True)),
            one_method_per_form=True,
        ),
        "packing": dict(methods=set(METHODS)),
    }


def test_every_conformance_test_runs_every_entry():
    assert _coverage() == _expected()


def test_one_entry_reaches_every_conformance_test():
    """A new method, algebra and core (copies of listed ones under a new name), added to the
    list: the conformance tests, imported again, are parametrised over each of them."""
    entries = (
        (METHODS, METHODS["associative"]),
        (ALGEBRAS, ALGEBRAS["rotation"]),
        (CORES, CORES["s4d"]),
    )
    try:
        for table, entry in entries:
            cast(dict[str, Any], table)["new"] = entry
        for name in MODULES:
            importlib.reload(importlib.import_module(name))
        coverage = _coverage()
        assert coverage == _expected()
        for test in ("scan", "scan_methods", "lru", "packing"):
            assert "new" in coverage[test]["methods"], test
        for test in ("scan", "scan_methods"):
            assert "new" in coverage[test]["algebras"], test
        for key in ("cores", "two_forms"):
            assert "new" in coverage["core"][key], key
        assert "new" in coverage["streaming"]["cores"]
    finally:
        for table, _ in entries:
            table.pop("new", None)
        for name in MODULES:
            importlib.reload(importlib.import_module(name))
    assert "new" not in str(_coverage())

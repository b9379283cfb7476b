"""The export formats the tests run over (`conformance.FORMATS`, issue 32 item 5): they are
the library's (`eqx_lru.export.FORMATS`), every export test parametrised by format runs
each of them, and no export test lists the formats itself."""

import importlib
import pathlib
import re

from conformance import FORMATS, export_formats
from test_conformance import _params

import eqx_lru.export

HERE = pathlib.Path(__file__).parent
MODULES = sorted(p.stem for p in HERE.glob("test_export_*.py") if p.stem != "test_export_formats")


def test_the_list_is_the_librarys():
    assert list(FORMATS) == list(eqx_lru.export.FORMATS)
    assert [getattr(p, "values", (p,))[0] for p in export_formats(slow=True)] == list(FORMATS)


def test_every_test_by_format_runs_every_format():
    tests = 0
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in dir(module):
            fn = getattr(module, attr)
            if not attr.startswith("test_") or not callable(fn):
                continue
            formats = {p["fmt"] for p in _params(fn) if "fmt" in p}
            if formats:
                tests += 1
                assert formats == set(FORMATS), (name, attr, formats)
    assert tests >= 8


def test_no_export_test_lists_the_formats():
    """A tuple or list of format names, or a branch on one, in an export test's source."""
    names = "|".join(re.escape(n) for n in FORMATS)
    listed = re.compile(rf"[\[(]\s*[\"']({names})[\"']\s*,|==\s*[\"']({names})[\"']")
    for name in MODULES:
        source = (HERE / f"{name}.py").read_text()
        assert not listed.search(source), (name, listed.search(source))

"""The documentation site as built: strict, offline, its maths well-formed, and in a real
browser no request to another host.

The site is built once for the module (`mkdocs build --strict` into a temporary folder:
any warning fails, e.g. a broken link, a page missing from the nav, a formula that does not
convert or converts with a fault `docs/hooks.py` knows). Then:

- `test_site_builds_strictly`: the reference pages are rendered, the published tables are
  pages, scripts and stylesheets come from the site itself, maths is MathML (no TeX left),
  and no page names the project address that does not exist;
- `test_maths_is_well_formed`: every `<math>` element of every page is well-formed XML with
  no control character, no `$`, no unconverted `\\command` and none of the markup that laid
  out wrong in Chromium (an empty operator, `mathvariant` other than "normal",
  `columnalign`, an empty style); no `$` outside maths and code in a page's text; the math
  font the stylesheet names is served and has an OpenType MATH table;
- `test_the_site_in_a_browser`: `.ci/site_check.py` loads every page in headless Chromium
  with the network off: zero requests to another host, the math font loaded, no display
  formula overflowing its box (skipped where no Chromium is installed).

Unit tests of the hook's conversion (`tex_to_mathml`, no build) come first.
"""

import html
import importlib.util
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
from xml.etree import ElementTree

import pytest

# The repository root (the folder holding pyproject.toml), wherever under tests/ this is.
ROOT = next(p for p in pathlib.Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
pytestmark = pytest.mark.xdist_group(name="site")  # one build per worker that runs these


def _needs_docs_group() -> None:
    try:
        import latex2mathml  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        message = "the docs group is not installed: pip install -e . --group docs (./dev.sh does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def _hooks():
    _needs_docs_group()
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The formulas that came out wrong, in the page markup that arithmatex hands the hook.
FORMULAS = {
    "operatorname": r"\sqrt{-\operatorname{expm1}(2 \log a_t)}",
    "arg": r"\theta = \arg\lambda",
    "aligned": r"\begin{aligned} z &= x, \\ r &= y \end{aligned}",
    "mathbb": r"x_t \in \mathbb R^H, \ \mathcal N(0, 1)",
    "bars": r"\sqrt{1 - |a_t|^2} \odot x",
    "unary minus": r"\exp(-e^{\nu})",
    "cases": r"\eta = \begin{cases} a & s < w \\ b & s \ge w \end{cases}",
    "text escape": r"\text{max\_phase}",
}

_MATH = re.compile(r"<math\b.*?</math>", re.S)


def _math_faults(math: str) -> list[str]:
    """What is wrong with one `<math>` element of a built page."""
    faults = []
    try:
        ElementTree.fromstring(math)
    except ElementTree.ParseError as e:
        faults.append(f"not well-formed XML ({e})")
    if re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", html.unescape(math)):
        faults.append("a control character")
    if "$" in math:
        faults.append("a $")
    if command := re.search(r"\\[A-Za-z]+", math):
        faults.append(f"an unconverted command {command[0]}")
    if re.search(r"<mo\s*/>|<mo>\s*</mo>", math):
        faults.append("an empty operator (an operator name split into letters)")
    if variant := re.search(r'mathvariant="(?!normal")[^"]*"', math):
        faults.append(f"{variant[0]} (ignored by Chromium)")
    if "columnalign=" in math:
        faults.append("columnalign (ignored by Chromium)")
    if re.search(r"<mstyle[^>]*/>", math):
        faults.append("an empty style")
    return faults


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_the_hook_converts_without_faults(name):
    """Each formula that laid out wrong converts to MathML without a fault, through the
    hook's page entry point."""
    hooks = _hooks()
    tex = FORMULAS[name]
    page = f'<p><span class="arithmatex">\\({html.escape(tex)}\\)</span></p>'

    class File:
        src_uri = "test.md"

    class Page:
        file = File

    content = hooks.on_page_content(page, page=Page, config={}, files=None)
    (math,) = _MATH.findall(content)
    assert not _math_faults(math), (tex, _math_faults(math), math)
    if name == "operatorname":  # one upright name under the whole root
        assert re.search(r"<msqrt><mrow><mo>&#x02212;</mo><mi>expm1</mi>", math), math
    if name == "aligned":  # a table, each & a column
        assert math.count("<mtr>") == 2 and "text-align: left" in math, math
    if name == "mathbb":
        assert "ℝ" in math and "𝒩" in math, math
    if name == "bars":  # the bars fence their group: first and last of a row
        assert re.search(r"<mrow><mo>&#x0007C;</mo><msub>.*?</msub><mo>&#x0007C;</mo></mrow>", math)
    if name == "unary minus":
        assert '<mo lspace="0" rspace="0">&#x02212;</mo>' in math, math
    if name == "text escape":
        assert "<mtext>max_phase</mtext>" in math, math


def test_the_faults_are_found():
    """The checks of this module find each kind of fault the newcomer saw."""
    assert _math_faults("<math><mi>z</mi><mi>&</mi><mo>=</mo></math>")  # aligned's &
    assert _math_faults("<math><mi>n</mi><mi>\x08mod</mi></math>")  # "\bmod" not raw
    assert _math_faults("<math><mi>\\arg</mi></math>")
    assert _math_faults("<math><mi>$x</mi></math>")
    assert _math_faults("<math><mo>-</mo><mo /><mi>e</mi></math>")
    assert _math_faults('<math><mi mathvariant="double-struck">R</mi></math>')
    assert not _math_faults('<math><mi mathvariant="normal">d</mi><mo>&#x02212;</mo></math>')
    hooks = _hooks()
    assert hooks.stray_dollars("<p>the kernel $l &lt; $ <code>length</code></p>")
    assert not hooks.stray_dollars("<p>costs <code>$HOME</code> <math><mi>x</mi></math></p>")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    _needs_docs_group()
    site = tmp_path_factory.mktemp("docs") / "site"
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    result = subprocess.run(
        [*command, "--config-file", str(ROOT / "mkdocs.yml")],
        cwd=ROOT,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    yield site
    shutil.rmtree(site)


def _pages(site: pathlib.Path) -> dict[str, str]:
    return {p.relative_to(site).as_posix(): p.read_text() for p in sorted(site.rglob("*.html"))}


@pytest.mark.slow
def test_site_builds_strictly(site):
    pages = _pages(site)
    # The reference pages are rendered from the docstrings, not left as `:::` lines.
    layers = pages["api/layers/index.html"]
    assert "eqx_lru.ComplexLRU" in layers and "::: eqx_lru" not in layers
    # The measured tables published from experiments/ are pages of the site, in the nav.
    assert "experiments/bench/RESULTS-cpu/index.html" in pages
    assert 'href="experiments/paper/figures/ladder/"' in pages["index.html"]
    # Scripts and stylesheets come from the site itself.
    external = re.compile(r"""<(?:script|link)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""")
    remote = {page: m[0] for page, text in pages.items() for m in external.finditer(text)}
    assert not remote, f"pages that load from another host: {remote}"
    # Its maths is MathML, rendered when the site was built (no MathJax, no TeX left).
    maths = [page for page, text in pages.items() if 'class="arithmatex"' in text]
    assert len(maths) >= 10, f"only {len(maths)} pages with maths: is arithmatex on?"
    for page in maths:
        left = re.findall(r'class="arithmatex">\s*\\[(\[]', pages[page])
        assert not left, f"{page}: maths left as TeX ({len(left)} formulas)"
        mtext = "".join(re.findall(r"<mtext>.*?</mtext>", pages[page]))
        assert "<math" in pages[page] and "\\_" not in mtext
    assert "<mtext>max_phase</mtext>" in layers
    # No address of the organisation eqx-lru, which does not exist (repo_url, site_url).
    named = [page for page, text in pages.items() if re.search(r"eqx-lru", text)]
    assert not named, f"pages that name github.com/eqx-lru or eqx-lru.github.io: {named}"


@pytest.mark.slow
def test_maths_is_well_formed(site):
    pages = _pages(site)
    faults = {}
    for page, text in pages.items():
        for math in _MATH.findall(text):
            if found := _math_faults(math):
                faults.setdefault(page, []).append((found, math[:200]))
        outside = re.sub(r"<(pre|code|math|script|style)\b.*?</\1>", " ", text, flags=re.S)
        outside = html.unescape(re.sub(r"<[^>]+>", " ", outside))
        if "$" in outside:
            found = re.findall(r".{0,30}\$.{0,30}", outside)
            faults.setdefault(page, []).append((["a $ outside maths and code"], found))
    assert not faults, f"maths with faults, by page: {faults}"
    # The math font that the stylesheet names is served, with an OpenType MATH table
    # (without one Chromium stretches no bracket or radical).
    css = (site / "stylesheets" / "maths.css").read_text()
    assert all("stylesheets/maths.css" in pages[p] for p in pages if "<math" in pages[p])
    (url,) = re.findall(r"@font-face\s*{[^}]*url\(\"?([^\")]+)\"?\)", css)
    font = ((site / "stylesheets") / url).resolve().read_bytes()
    tables = struct.unpack(">H", font[4:6])[0]
    tags = {font[12 + 16 * i : 16 + 16 * i] for i in range(tables)}
    assert b"MATH" in tags, f"{url} has no MATH table: {sorted(tags)}"


def _chromium() -> str | None:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return name
    return None


@pytest.mark.slow
def test_the_site_in_a_browser(site):
    """Every page in headless Chromium with the network off (about a second a page)."""
    if _chromium() is None:
        pytest.skip("no chromium here (apt-get install chromium; .ci/run does where it can)")
    result = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "site_check.py"), str(site), "--require-browser"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"site-check: \d+ pages, \d+ requests, 0 findings", result.stdout)


@pytest.mark.slow
def test_the_browser_check_finds_what_it_should(tmp_path):
    """The browser check on a one-page site that asks three hosts for something (an image,
    a script's fetch, a resource hint) and whose display formula overflows its box: four
    findings, each named (so that its zero on the real site means something)."""
    if _chromium() is None:
        pytest.skip("no chromium here (apt-get install chromium; .ci/run does where it can)")
    (tmp_path / "index.html").write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        "<link rel='preconnect' href='https://fonts.example.invalid'></head><body>"
        "<img src='http://images.example.invalid/x.png'>"
        "<script>fetch('https://api.example.invalid/repos/x').catch(() => {});</script>"
        "<div class='arithmatex' style='height: 4px; overflow: hidden'>"
        "<math display='block'><mfrac><mi>a</mi><mi>b</mi></mfrac></math></div>"
        "</body></html>"
    )
    result = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "site_check.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "requested http://images.example.invalid/x.png" in out, out
    assert "requested https://api.example.invalid/repos/x" in out, out
    assert "resource hint to another host" in out and "fonts.example.invalid" in out, out
    assert "1 of 1 display formulas overflow" in out, out

"""MkDocs hooks: publish the measured tables and figures kept under `experiments/` as pages
of the site, and render the maths at build time, so the site needs no network.

**Maths.** `pymdownx.arithmatex` (generic mode) wraps each formula as
`<span class="arithmatex">\\(...\\)</span>` (inline) or `<div class="arithmatex">\\[...\\]</div>`
(display); `on_page_content` replaces the TeX with MathML (`latex2mathml`, pure Python),
which browsers render natively: no MathJax, no script, nothing fetched. A formula that
does not convert is a build warning (an error under `--strict`).

**Published files.**
Each Markdown file and figure listed in `PUBLISHED` becomes a page (or file) of the site at
its own repository path (`experiments/bench/RESULTS-cpu.md` → `experiments/bench/RESULTS-cpu/`),
so its relative links to its figures keep working and docs pages link to it as
`../experiments/bench/RESULTS-cpu.md`. A file that is listed but missing fails the build.
"""

import html
import logging
import pathlib
import re

from latex2mathml.converter import convert
from mkdocs.structure.files import File

log = logging.getLogger("mkdocs.plugins.eqx_lru")

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: Globs relative to the repository root; the Markdown ones must match at least one file.
PUBLISHED = (
    "experiments/bench/RESULTS-*.md",
    "experiments/bench/STREAMING-*.md",
    "experiments/bench/STREAMS-*.md",
    "experiments/bench/HOPPER.md",
    "experiments/lra/MEMORY.md",
    "experiments/paper/README.md",
    "experiments/paper/figures/*",
    "experiments/ldstack/README.md",
    "experiments/ldstack/figures/*",
    "experiments/lm/figures/*",
)
REQUIRED = (
    "experiments/bench/RESULTS-cpu.md",
    "experiments/bench/STREAMING-cpu.md",
    "experiments/bench/STREAMS-cpu.md",
    "experiments/lra/MEMORY.md",
    "experiments/paper/README.md",
    "experiments/ldstack/README.md",
)


def on_files(files, config):
    for required in REQUIRED:
        if not (ROOT / required).is_file():
            raise FileNotFoundError(f"docs/hooks.py publishes {required}, which is missing.")
    for pattern in PUBLISHED:
        for path in sorted(ROOT.glob(pattern)):
            src_uri = path.relative_to(ROOT).as_posix()
            if files.get_file_from_path(src_uri) is None:
                files.append(File.generated(config, src_uri, abs_src_path=str(path)))
    return files


_MATH = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)
_DELIMITERS = {"span": ("\\(", "\\)", "inline"), "div": ("\\[", "\\]", "block")}


def _mathml(match: re.Match, where: str) -> str:
    tag, body = match[1], html.unescape(match[2]).strip()
    start, end, display = _DELIMITERS[tag]
    if not (body.startswith(start) and body.endswith(end)):
        log.warning(f"{where}: maths without {start} {end} delimiters: {body[:80]!r}")
        return match[0]
    tex = body[len(start) : -len(end)].strip()
    try:
        mathml = convert(tex, display=display)
    except Exception as e:  # noqa: BLE001 - any converter failure is reported, not raised
        log.warning(f"{where}: the formula {tex[:80]!r} does not convert to MathML ({e}).")
        return match[0]
    return f'<{tag} class="arithmatex">{mathml}</{tag}>'


def on_page_content(content, page, config, files):
    """The page's formulas as MathML (see the module docstring)."""
    return _MATH.sub(lambda m: _mathml(m, page.file.src_uri), content)

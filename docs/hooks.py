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
import importlib.metadata
import logging
import pathlib
import re
import unicodedata
from xml.etree import ElementTree

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
    "experiments/bench/FLOOR-*.md",
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


#: The maths' font (OFL), from the `ziamath` package of the docs dependency group: a font
#: with an OpenType MATH table, which Chromium needs to stretch brackets and radicals.
MATH_FONT = ("ziamath", "fonts/STIXTwoMath-Regular.ttf", "assets/fonts/STIXTwoMath-Regular.ttf")


def _math_font(config) -> File:
    package, path, site_path = MATH_FONT
    try:  # found through the package's metadata: importing ziamath is slow and warns
        source = pathlib.Path(
            importlib.metadata.distribution(package).locate_file(f"{package}/{path}")
        )
    except importlib.metadata.PackageNotFoundError:
        source = None
    if source is None or not source.is_file():
        raise FileNotFoundError(
            f"docs/hooks.py serves the maths' font {path} of the {package} package, which is "
            "not installed: pip install --group docs (./dev.sh does)."
        )
    return File.generated(config, site_path, abs_src_path=str(source))


def on_files(files, config):
    files.append(_math_font(config))
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

# What latex2mathml gets wrong, mended around it (each fault came out on a page):
# - `\operatorname{expm1}` came out as an empty `<mo/>` and the italic letters e x p m 1,
#   `\arg` as the text "\arg": operator names become one upright `<mi>`, with TeX's thin
#   spaces (before the name after an ordinary symbol, after it unless a bracket follows);
# - `aligned` (not known) left each `&` as a literal, which is not even XML: it is `align*`;
# - `mathvariant` other than "normal" (`\mathbb R`, `\mathcal N`) is ignored by Chromium,
#   which showed an italic R: the letters become Unicode's mathematical letters (ℝ, 𝒩);
# - `\_` and its kin inside `\text{}` kept their backslash.
FUNCTIONS = "arg|cos|cosh|cot|coth|csc|deg|det|dim|exp|hom|ker|lg|ln|log|sec|sin|sinh|tan|tanh"
#: `\max` and its kin too, where they take no limits (`\max(a, b)`, not `\max_i`).
LIMITS = "gcd|inf|lim|max|min|sup"
_OPERATOR = re.compile(
    rf"\\operatorname\*?\{{((?:[^{{}}]|\{{[^{{}}]*\}})*)\}}|\\({FUNCTIONS})(?![A-Za-z])"
    rf"|\\({LIMITS})(?![A-Za-z])(?!\s*[_^])"
)
#: After these commands (spaces, binary operators, relations, opening brackets) and
#: before these plus the closing brackets, an operator name takes no thin space.
_SPACELESS = set(
    ", ; : ! quad qquad left right big Big bigg Bigg bigl Bigl biggl bigr Bigr biggr cdot "
    "times odot otimes oplus pm mp circ bullet le leq ge geq ne neq in sim approx equiv "
    "propto to mapsto leftarrow rightarrow mid lvert lVert langle lfloor lceil rvert rVert "
    "rangle rfloor rceil".split()
)
_PLACEHOLDER = "eqxlruname"
_TEXT_ESCAPES = {"\\_": "_", "\\%": "%", "\\#": "#", "\\&amp;": "&amp;", "\\$": "&#x24;"}
_STYLES = {
    "bold": "BOLD",
    "italic": "ITALIC",
    "bold-italic": "BOLD ITALIC",
    "double-struck": "DOUBLE-STRUCK",
    "script": "SCRIPT",
    "bold-script": "BOLD SCRIPT",
    "fraktur": "FRAKTUR",
    "bold-fraktur": "BOLD FRAKTUR",
    "sans-serif": "SANS-SERIF",
    "bold-sans-serif": "SANS-SERIF BOLD",
    "sans-serif-italic": "SANS-SERIF ITALIC",
    "monospace": "MONOSPACE",
}


def _spaced_before(before: str) -> bool:
    command = re.search(r"\\([A-Za-z]+|.)$", before)
    if command:
        return command[1] not in _SPACELESS
    return bool(re.search(r"[A-Za-z0-9})\]|]$", before))


def _spaced_after(after: str) -> bool:
    command = re.match(r"\\([A-Za-z]+|.)", after)
    if command:
        return command[1] not in _SPACELESS and command[1] not in "{}"
    return bool(re.match(r"[A-Za-z0-9]", after))


def _operator_names(tex: str) -> tuple[str, list[str]]:
    """`tex` with each operator name replaced by a placeholder text, and the names."""
    names: list[str] = []

    def replace(match: re.Match) -> str:
        name = (
            match[2]
            or match[3]
            or re.sub(r"\\text\{([^{}]*)\}", r"\1", match[1]).replace("\\_", "_")
        )
        names.append(name.strip())
        before = tex[: match.start()].rstrip()
        after = tex[match.end() :].lstrip()
        spaced = (r"\," if _spaced_before(before) else "", r"\," if _spaced_after(after) else "")
        return f"{spaced[0]}\\text{{{_PLACEHOLDER}{len(names) - 1}}}{spaced[1]} "

    return _OPERATOR.sub(replace, tex), names


def _bars(tex: str) -> str:
    """Absolute values `|x|` as `\\lvert x\\rvert`, pairing the bars of each brace level in
    order (left alone where a level has an odd number)."""
    levels: dict[int, list[int]] = {}
    depth, i = 0, 0
    while i < len(tex):
        if tex[i] == "\\":  # a command, or an escaped character (`\\|`, `\\{`)
            i += len(re.match(r"\\(?:[A-Za-z]+|.?)", tex[i:], re.S)[0])
            continue
        if tex[i] in "{}":
            depth += 1 if tex[i] == "{" else -1
        elif tex[i] == "|":
            levels.setdefault(depth, []).append(i)
        i += 1
    replace = {}
    for bars in levels.values():
        if len(bars) % 2 == 0:
            for opener, closer in zip(bars[::2], bars[1::2], strict=True):
                replace[opener], replace[closer] = "\\lvert ", "\\rvert "
    return "".join(replace.get(k, c) for k, c in enumerate(tex))


def _fences(tex: str) -> str:
    """Each pair of fences (`\\lvert x \\rvert`, `|x|`, `\\lfloor x \\rceil`, ...) as a group of
    its own, so that the bars are the first and last of their row, which MathML sets as
    fences; in the middle of a row a bar was an operator with a space on each side."""
    tex = _bars(tex)
    sizes = r"(?<!\\left)(?<!\\right)(?<!\\big)(?<!\\Big)(?<!\\bigl)(?<!\\bigr)"
    tex = re.sub(sizes + r"\\(lvert|lVert|langle|lfloor|lceil)(?![A-Za-z])", r"{\\\1 ", tex)
    return re.sub(sizes + r"\\(rvert|rVert|rangle|rfloor|rceil)(?![A-Za-z])", r"\\\1}", tex)


def _letters(variant: str, text: str) -> str | None:
    """`text` in Unicode's mathematical letters of `variant`, or None if one has none."""
    out = []
    for char in html.unescape(text):
        name = unicodedata.name(char, "")
        rest = re.sub(r"^(LATIN|GREEK) (CAPITAL|SMALL) LETTER ", r"\2 ", name)
        for candidate in (f"MATHEMATICAL {_STYLES[variant]} {rest}", f"{_STYLES[variant]} {rest}"):
            try:
                out.append(unicodedata.lookup(candidate))
                break
            except KeyError:
                continue
        else:
            return None
    return html.escape("".join(out), quote=False)


#: An opening bracket, a comma or a relation (`( [ { , ; = < > ≤ ≥ ≈ ∼ ≡ ∈ ← → ↦`).
_AFTER_OPERATOR = (
    r"(<mo[^>]*>&#x(?:00028|0005B|0007B|0002C|0003B|0003D|0003C|0003E|02264|02265|02248|0223C"
    r"|02261|02208|02190|02192|021A6);</mo>)"
)
_UNARY = r'\1<mo lspace="0" rspace="0">\2</mo>'


def _mend(mathml: str, names: list[str]) -> str:
    def name(match: re.Match) -> str:
        text = html.escape(names[int(match[1])], quote=False)
        return f'<mi mathvariant="normal">{text}</mi>' if len(text) == 1 else f"<mi>{text}</mi>"

    def variant(match: re.Match) -> str:
        letters = _letters(match[2], match[3]) if match[2] in _STYLES else None
        return match[0] if letters is None else f"<{match[1]}>{letters}</{match[1]}>"

    def text(match: re.Match) -> str:
        body = match[1]
        for escaped, plain in _TEXT_ESCAPES.items():
            body = body.replace(escaped, plain)
        return f"<mtext>{body}</mtext>"

    mathml = re.sub(rf"<mtext>{_PLACEHOLDER}(\d+)</mtext>", name, mathml)
    # Chromium ignores `columnalign` (not MathML Core): the cells of `align*` and `cases`
    # were centred. CSS aligns them.
    mathml = re.sub(r'<mtd columnalign="(\w+)">', r'<mtd style="text-align: \1">', mathml)
    # A sign right after another operator (`(-x`, `= -x`, `, -x`) is unary, as in TeX; in the
    # middle of a row MathML spaced it as a binary minus.
    mathml = re.sub(_AFTER_OPERATOR + r"<mo>(&#x02212;|&#x0002B;|&#x000B1;)</mo>", _UNARY, mathml)
    mathml = re.sub(r'<(mi|mn) mathvariant="([a-z-]+)">([^<]*)</\1>', variant, mathml)
    return re.sub(r"<mtext>([^<]*)</mtext>", text, mathml)


def _faults(mathml: str) -> list[str]:
    """What makes a converted formula wrong on a page (the site's test checks the same)."""
    faults = []
    try:
        ElementTree.fromstring(mathml)
    except ElementTree.ParseError as e:
        faults.append(f"not well-formed XML ({e})")
    if re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", mathml):
        faults.append("a control character")
    if "$" in mathml:
        faults.append("a stray $")
    command = re.search(r"\\[A-Za-z]+", mathml)
    if command:
        faults.append(f"an unconverted command {command[0]}")
    if re.search(r"<mo\s*/>|<mo></mo>", mathml):
        faults.append("an empty operator")
    if re.search(r"<mstyle[^>]*/>", mathml):
        faults.append(r"an empty style (\textstyle in align*: write {\textstyle ...})")
    return faults


def tex_to_mathml(tex: str, display: str) -> str:
    """The MathML of one formula (`display`: "inline" or "block"), mended as above."""
    tex = re.sub(r"\\(begin|end)\{aligned\}", r"\\\1{align*}", tex)
    tex = _fences(tex)
    tex, names = _operator_names(tex)
    return _mend(convert(tex, display=display), names)


def _mathml(match: re.Match, where: str) -> str:
    tag, body = match[1], html.unescape(match[2]).strip()
    start, end, display = _DELIMITERS[tag]
    if not (body.startswith(start) and body.endswith(end)):
        log.warning(f"{where}: maths without {start} {end} delimiters: {body[:80]!r}")
        return match[0]
    tex = body[len(start) : -len(end)].strip()
    try:
        mathml = tex_to_mathml(tex, display)
    except Exception as e:  # noqa: BLE001 - any converter failure is reported, not raised
        log.warning(f"{where}: the formula {tex[:80]!r} does not convert to MathML ({e}).")
        return match[0]
    faults = _faults(mathml)
    if faults:
        log.warning(f"{where}: the formula {tex[:80]!r} converts with {', '.join(faults)}.")
    return f'<{tag} class="arithmatex">{mathml}</{tag}>'


def stray_dollars(html_text: str) -> list[str]:
    """The page's text around each `$` outside code and maths: a formula that arithmatex did
    not take (`$x = $ y`: a space before the closing dollar), shown as TeX."""
    text = re.sub(r"<(pre|code|math|script|style)\b.*?</\1>", " ", html_text, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    return [" ".join(m[0].split()) for m in re.finditer(r".{0,30}\$.{0,30}", text)]


def on_page_content(content, page, config, files):
    """The page's formulas as MathML (see the module docstring)."""
    content = _MATH.sub(lambda m: _mathml(m, page.file.src_uri), content)
    for context in stray_dollars(content):
        log.warning(f"{page.file.src_uri}: a $ outside maths and code: {context!r}")
    return content

"""The README is the repository's short entry point: what the library is, install, the two
commands, one example, and links into the docs. Its example runs in
`tests/experiments/test_docs.py` (with the docs' blocks); here its shape and links are
checked. (The package's description is PACKAGE.md: tests/lib/test_release.py.)"""

import pathlib
import re

# The repository root (the folder holding pyproject.toml), wherever under tests/ this is.
ROOT = next(p for p in pathlib.Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
README = ROOT / "README.md"
MAX_LINES = 150


def _text() -> str:
    return README.read_text()


def test_short():
    lines = _text().splitlines()
    assert len(lines) <= MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {MAX_LINES}): move reference material "
        "into docs/ and link to it."
    )


def test_sections():
    headings = re.findall(r"^## (.+)$", _text(), re.M)
    for section in ("Install", "The two commands", "Example", "Documentation"):
        assert section in headings, f"README.md has no '## {section}' section"


def test_the_two_commands_and_the_docs_job():
    text = _text()
    assert "./dev.sh demo" in text and "./dev.sh test" in text and "./dev.sh docs" in text
    dev = (ROOT / "dev.sh").read_text()
    for job in ("demo)", "test)", "docs)"):
        assert job in dev, f"dev.sh has no `{job}` job, which README.md names"


def test_one_python_example():
    blocks = re.findall(r"^```python\n", _text(), re.M)
    assert len(blocks) == 1, f"README.md should hold one python example, has {len(blocks)}"


def test_links_resolve():
    """README.md is the repository's page (a package index shows PACKAGE.md instead): its
    links into the repository are relative, and each such path exists. No link goes to
    the organisation github.com/eqx-lru, which does not exist."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", _text())
    absolute = [link for link in links if re.match(r"^[a-z]+://", link)]
    local = [link for link in links if link not in absolute]
    assert any(link.startswith("docs/") for link in local), "README.md links into no docs page"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
    nowhere = [link for link in absolute if re.search(r"eqx-lru", link)]
    assert not nowhere, f"README.md links to an organisation that does not exist: {nowhere}"


def test_every_docs_page_is_linked_from_somewhere():
    """Each concept, guide and reference page is reachable from the README."""
    text = _text()
    for folder in ("concepts", "guides", "api"):
        for page in sorted((ROOT / "docs" / folder).glob("*.md")):
            rel = page.relative_to(ROOT).as_posix()
            assert rel in text, f"README.md does not link to {rel}"


def test_no_measured_numbers():
    """Measured numbers live in the docs with their machine and commit, not here."""
    text = _text()
    units = re.findall(r"\d+(?:\.\d+)?\s?(?:GB|GiB|MB|MiB|ms|steps/s)\b", text)
    assert not units, f"README.md carries measured numbers {units}: move them to docs/"
    hashes = re.findall(r"commit `?[0-9a-f]{7,40}\b", text)
    assert not hashes, f"README.md cites commits {hashes}: measured results go to docs/"

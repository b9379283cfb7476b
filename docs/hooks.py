"""MkDocs hook: publish the measured tables and figures kept under `experiments/` as pages
of the site, from where they are written, so they are never copied by hand.

Each Markdown file and figure listed in `PUBLISHED` becomes a page (or file) of the site at
its own repository path (`experiments/bench/RESULTS-cpu.md` → `experiments/bench/RESULTS-cpu/`),
so its relative links to its figures keep working and docs pages link to it as
`../experiments/bench/RESULTS-cpu.md`. A file that is listed but missing fails the build.
"""

import pathlib

from mkdocs.structure.files import File

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

#!/usr/bin/env sh
# One entry point for set-up and the two everyday jobs. On a fresh machine it creates
# ./.venv, installs eqx_lru with its extras there (again only when pyproject.toml changes),
# then runs the job:
#   ./dev.sh demo   the main job: a short offline demo (no download)
#   ./dev.sh test   the test suite (2 pytest-xdist workers; PYTEST_WORKERS=N to change)
#   ./dev.sh bench  the benchmark suite (experiments/bench), `--quick` for a short run
#   ./dev.sh docs   the documentation site (MkDocs, strict) into site/; `docs serve` to preview
#   ./dev.sh gpu-check  on a CUDA machine: tests, benchmark and six LRA trainer runs, one
#                   Markdown report (experiments/gpu_check.py); exits 2 without a GPU.
#                   Where nvidia-smi exists it installs the `cuda` extra (JAX for CUDA).
set -eu
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
extras=experiments,test,docs
if [ "${1:-}" = gpu-check ] && command -v nvidia-smi >/dev/null 2>&1; then
    extras=$extras,cuda
fi
stamp=.venv/.install-stamp
want="$(cat pyproject.toml | cksum) $extras"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[$extras]"
    echo "$want" > "$stamp"
fi
job=${1:-}
[ $# -gt 0 ] && shift
case "$job" in
    demo) exec .venv/bin/python -m experiments.demo "$@" ;;
    test)
        # Two workers (pytest-xdist): the suite takes about half the time on two cores.
        # PYTEST_WORKERS=0 runs it in one process. Several processes share a GPU, so none
        # preallocates most of its memory unless you say so.
        export XLA_PYTHON_CLIENT_PREALLOCATE="${XLA_PYTHON_CLIENT_PREALLOCATE:-false}"
        # --dist loadgroup: tests marked xdist_group (a docs page's code blocks, which
        # share a namespace) stay on one worker.
        exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadgroup "$@" ;;
    bench) exec .venv/bin/python -m experiments.bench "$@" ;;
    gpu-check) exec .venv/bin/python -m experiments.gpu_check "$@" ;;
    docs)
        # The documentation site (mkdocs.yml, docs/): built strictly into site/;
        # `./dev.sh docs serve` serves it with live reload while you edit.
        export NO_MKDOCS_2_WARNING=1
        if [ "${1:-}" = serve ]; then shift; exec .venv/bin/mkdocs serve "$@"; fi
        exec .venv/bin/mkdocs build --strict "$@" ;;
    *) echo "usage: ./dev.sh {demo|test|bench|gpu-check|docs} [args...]" >&2; exit 2 ;;
esac

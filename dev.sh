#!/usr/bin/env sh
# One entry point for set-up and the two everyday jobs. On a fresh machine it creates
# ./.venv, installs eqx_lru there with its `export` extra and the repository's dependency
# groups (experiments, test, docs, release; pyproject.toml), again only when pyproject.toml
# changes, saying so in one line first (pip itself is quiet), then runs the job:
#   ./dev.sh demo   the main job: a short offline demo (no download)
#   ./dev.sh test   the test suite (2 pytest-xdist workers; PYTEST_WORKERS=N to change):
#                   11 to 32 minutes on two CPU cores. `test --quick`: the library's fast
#                   tests only (tests/lib, not marked slow)
#   ./dev.sh lint   `ruff check` and `ruff format --check` over the repository, pyright
#                   over eqx_lru/, experiments/ and tests/
#   ./dev.sh release-check  build the sdist and wheel, check them (twine, their files, one
#                   version everywhere), install the wheel into a fresh virtual environment
#                   and run the example of its description, PACKAGE.md, there
#                   (.ci/release_check.py)
#   ./dev.sh bench  the benchmark suite (experiments/bench), `--quick` for a short run
#   ./dev.sh docs   the documentation site (MkDocs, strict) into site/; `docs serve` to preview
#   ./dev.sh gpu-check  on a CUDA machine, within --budget SECONDS (480: 8 minutes on one
#                   H100): the GPU-sensitive tests, the layer against the card's bandwidth,
#                   PathX peak memory, ListOps beside the earlier H100 curve; report.md and
#                   report.json under --out, rewritten after every part (experiments/gpu_check/);
#                   exits 2 without a GPU; --dry-run: the same on the CPU at tiny sizes.
#                   Where nvidia-smi exists it installs the `cuda` extra (JAX for CUDA).
#   ./dev.sh test-newest  the library's tests (tests/lib, or the test files that do not
#                   use experiments/), and the check that the private JAX hooks of
#                   experiments/runs resolve, against the newest JAX release, in its own
#                   ./.venv-newest on a Python >= 3.12 (NEWEST_PYTHON, python3.13,
#                   python3.12 or a pyenv one); one line and exit 0 when there is none.
set -eu
cd "$(dirname "$0")"
PY=${PYTHON:-python3}

# Why an environment is (re)installed, for the line printed before pip runs for minutes:
# STAMP (what was installed, "cksum-of-pyproject size ..."), WANT, the other reason.
install_reason() {
    if [ ! -f "$1" ]; then
        echo "first set-up"
    elif [ "$(cut -d' ' -f1-2 "$1")" != "$(echo "$2" | cut -d' ' -f1-2)" ]; then
        echo "pyproject.toml changed"
    else
        echo "$3"
    fi
}

newest_python() {
    # A Python >= 3.12 (the newest JAX releases need one), or nothing.
    for cand in ${NEWEST_PYTHON:-} python3.13 python3.12 \
        "$HOME"/.pyenv/versions/3.13*/bin/python "$HOME"/.pyenv/versions/3.12*/bin/python; do
        if command -v "$cand" >/dev/null 2>&1 &&
            "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            command -v "$cand"
            return
        fi
    done
}

if [ "${1:-}" = test-newest ]; then
    shift
    NEWEST=$(newest_python)
    if [ -z "$NEWEST" ]; then
        echo "test-newest: skipped, no Python >= 3.12 found (set NEWEST_PYTHON to one)"
        exit 0
    fi
    if [ ! -x .venv-newest/bin/python ]; then
        "$NEWEST" -m venv .venv-newest
    fi
    # Re-resolved to the newest releases once a day and whenever pyproject.toml changes.
    stamp=.venv-newest/.install-stamp
    want="$(cat pyproject.toml | cksum) $(date +%Y-%m-%d)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        why=$(install_reason "$stamp" "$want" "a new day: the newest releases again")
        echo "dev.sh: installing eqx_lru, the newest JAX and the test group into" \
            ".venv-newest ($why); a few minutes, pip is quiet"
        .venv-newest/bin/python -m pip install --quiet --upgrade pip
        .venv-newest/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager \
            -e . --group test
        echo "$want" > "$stamp"
    fi
    if [ -d tests/lib ]; then
        set -- tests/lib tests/experiments/test_jax_hooks.py "$@"
    else
        # The library's test files: those that use nothing from experiments/.
        set -- $(grep -LE '(from|import) experiments|experiments[./]' tests/test_*.py) "$@"
    fi
    .venv-newest/bin/python -c 'import jax, sys
print(f"test-newest: JAX {jax.__version__}, Python {sys.version.split()[0]}")'
    export XLA_PYTHON_CLIENT_PREALLOCATE="${XLA_PYTHON_CLIENT_PREALLOCATE:-false}"
    exec .venv-newest/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile \
        --durations=15 --durations-min=1 "$@"
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
# The package's extras, and the repository's dependency groups (pip >= 25.1: pip is
# upgraded first).
extras=export
if [ "${1:-}" = gpu-check ] && command -v nvidia-smi >/dev/null 2>&1; then
    extras=$extras,cuda
fi
groups="experiments test docs release"
stamp=.venv/.install-stamp
want="$(cat pyproject.toml | cksum) $extras $groups recurrentgemma-1.0.1"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    why=$(install_reason "$stamp" "$want" "other extras: $extras")
    echo "dev.sh: installing eqx_lru[$extras] and the groups $groups into .venv ($why);" \
        "a few minutes, pip is quiet"
    .venv/bin/python -m pip install --quiet --upgrade pip
    group_flags=
    for group in $groups; do group_flags="$group_flags --group $group"; done
    # shellcheck disable=SC2086 # one word per flag
    .venv/bin/python -m pip install --quiet -e ".[$extras]" $group_flags
    # recurrentgemma's JAX layers for the parity tests (tests/lib/recurrentgemma_layers.py):
    # --no-deps, as it pins numpy<2.4; its layers need only these (not its sampler's
    # sentencepiece nor its checkpointer's orbax).
    .venv/bin/python -m pip install --quiet --no-deps recurrentgemma==1.0.1 flax==0.12.8 \
        einops==0.8.2 msgpack==1.2.4 typeguard==2.13.3
    echo "$want" > "$stamp"
fi
job=${1:-}
[ $# -gt 0 ] && shift
case "$job" in
    # The main job replaces its own earlier outputs (demo_out/): run it as often as you like.
    demo) exec .venv/bin/python -m experiments.demo --overwrite "$@" ;;
    test)
        # Two workers (pytest-xdist): the suite takes about half the time on two cores.
        # PYTEST_WORKERS=0 runs it in one process. Several processes share a GPU, so none
        # preallocates most of its memory unless you say so.
        export XLA_PYTHON_CLIENT_PREALLOCATE="${XLA_PYTHON_CLIENT_PREALLOCATE:-false}"
        if [ "${1:-}" = --quick ]; then
            # The quick tier: the library's tests that are not marked slow.
            shift
            set -- tests/lib -m "not slow" "$@"
        fi
        # --dist loadfile: each test file runs on one worker, which compiles the programs
        # its tests share (module fixtures, shapes, eager ops) once, not once per worker;
        # a docs page's code blocks (one namespace) stay together too. --durations: the
        # slowest tests in every log (CI's too), the suite's cost where it is paid.
        exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile \
            --durations=25 --durations-min=1 "$@" ;;
    lint)
        # The settings are in pyproject.toml ([tool.ruff], [tool.pyright]); `ruff format .`
        # and `ruff check --fix .` repair most of what ruff reports. pyright (pinned, with
        # the Node it brings from PyPI) checks eqx_lru/, experiments/ and tests/ against this
        # environment's packages; no look-up of newer pyright versions (the network).
        .venv/bin/python -m ruff check .
        .venv/bin/python -m ruff format --check .
        PYRIGHT_PYTHON_IGNORE_WARNINGS=1 exec .venv/bin/python -m pyright \
            --pythonpath .venv/bin/python ;;
    release-check) exec .venv/bin/python .ci/release_check.py "$@" ;;
    bench) exec .venv/bin/python -m experiments.bench "$@" ;;
    gpu-check) exec .venv/bin/python -m experiments.gpu_check "$@" ;;
    docs)
        # The documentation site (mkdocs.yml, docs/): built strictly into site/;
        # `./dev.sh docs serve` serves it with live reload while you edit.
        export NO_MKDOCS_2_WARNING=1
        if [ "${1:-}" = serve ]; then shift; exec .venv/bin/mkdocs serve "$@"; fi
        exec .venv/bin/mkdocs build --strict "$@" ;;
    *) echo "usage: ./dev.sh {demo|test [--quick]|lint|release-check|test-newest|bench|gpu-check|docs} [args...]" >&2; exit 2 ;;
esac

"""Check eqx_lru on a CUDA GPU within a time budget: `./dev.sh gpu-check`.

    python -m experiments.gpu_check [--budget 480] [--out runs/gpu-check] [--dry-run]
        [--parts tests,layer,memory,learning]

Four parts, one after the other, each with its share of the budget (`_plan.py`; a part
that ends early leaves its time to the next), in the order of what they answer:

- (a) **tests**: the GPU-sensitive tests (`selection.py`: precision against the float64
  oracles, determinism, every scan method and algebra against the sequential loop, the
  Pallas kernel forward and backward, `Auto`'s choice, the trainer's bit-exact resume), one
  pytest process, each outcome recorded as it comes (`_pytest_plugin.py`);
- (b) **layer**: forward and forward+backward at the benchmark's shapes (B 16, H = N =
  256, L 16k/4k/1k) for App. A, the floor, both forms with every method (`PallasScan`
  included) and bfloat16, each with the bytes it moves per call (a model) as a fraction
  of the card's nominal peak bandwidth (`experiments.bench`'s timing and traffic model);
- (c) **memory**: the PathX training step's peak device memory (`peak_bytes_in_use`
  after two steps) in both forms with remat, beside XLA's compile-time sizes;
- (d) **learning**: the trainer on ListOps at Table 9 size for the time left, its
  validation curve beside the earlier H100 run's (`experiments/bench/gpu/`), flagged when
  it falls more than 5 points below.

The report (`OUT/report.md` and `OUT/report.json`: device, driver, JAX and jaxlib,
commit, the plan, each part's result and tables) is rewritten after every part and while
a part's records grow, so a run killed at any moment leaves what it had; every part runs
in child processes killed with it. Exit status 0, 1 if a part failed, 2 without a CUDA GPU
(one line) or for a bad flag, 130 on SIGINT/SIGTERM/SIGHUP. `--dry-run` runs the same
script on the CPU at tiny sizes (the CI test of this command).
"""

from ._cli import main, parser

__all__ = ["main", "parser"]

#: The flag parser under the name the command-line tests walk (tests/experiments/test_cli_flags.py).
_parser = parser

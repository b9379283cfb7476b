"""Benchmarks on whatever device JAX has (`jax.default_backend()`).

The LRU layer: time and XLA temp memory (and peak memory in separate processes) of forward
and forward+backward for both forms × every scan method (`impls.methods`: the GPU kernel
`PallasScan` off the CPU only), against a rendering of the paper's App. A (the baseline of
every ratio) and the projections-only floor, at L = 1k/4k/16k. One training step per LRA task
at the paper's Table 9 sizes (the trainer's own program; steps/s, XLA temp, peak device
memory where the backend reports it). Also the sequential block size, glibc huge pages (CPU
only), step (RNN) mode and the error of a bfloat16 compute dtype.

    python -m experiments.bench                 # the full grid (hours on 2 CPU cores)
    python -m experiments.bench --grid reduced  # about 25 minutes on 2 CPU cores
    python -m experiments.bench --quick         # a tiny grid in a minute, printed

writes `experiments/bench/RESULTS-<backend>.md` and `results-<backend>.json` (`--resume`
continues an interrupted run from the JSON file; files there already are replaced only
with `--overwrite`, as in every command that writes files). The benchmark is not a test: tests never
assert on wall time.
"""

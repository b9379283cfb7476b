"""Benchmarks of the LRU layer: time, XLA temp memory and peak RSS of forward and
forward+backward for both forms and every scan method, against a rendering of the paper's
App. A (the baseline of every ratio) and the projections-only floor; plus the sequential
block size, glibc huge pages, step (RNN) mode and the error of a bfloat16 compute dtype.

    python -m experiments.bench            # the full grid (about half an hour on 2 cores),
                                           # writes experiments/bench/RESULTS.md + results.json
    python -m experiments.bench --quick    # a tiny grid in seconds, printed

The benchmark is not a test: tests never assert on wall time.
"""

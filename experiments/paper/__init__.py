"""Reproductions of the LRU paper's analysis figures, each a CPU-sized script.

Run one as `python -m experiments.paper.<name> [--fast] [--out DIR]`; see README.md here.
"""

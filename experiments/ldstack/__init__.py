"""LDStack (Martin & Cundy-style parallel linear recurrences for nonlinear RNNs, NeurIPS 2020)
reproduced on `eqx_lru`: see README.md."""

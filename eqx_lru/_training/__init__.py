"""Training: the optimiser of paper section D.2 and the batched train step."""

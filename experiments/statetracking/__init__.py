"""State tracking: parity, counting modulo k and composition in the symmetric groups S3
and S5, trained at short lengths and tested at 4x the length, for every rung of the
diagonal-to-block ladder of cores (`experiments/statetracking/RESULTS-cpu.md`; the
concepts page `docs/concepts/state-tracking.md`).

- `tasks`: the task generators (NumPy, seeded; every position labelled);
- `rungs`: the cores compared, by name;
- `train`: one cell (task, core, seed) trained and tested, `python -m
  experiments.statetracking.train`;
- `table`: a list of cells run and written as `RESULTS-cpu.md`, `python -m
  experiments.statetracking.table`.
"""

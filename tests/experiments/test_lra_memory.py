"""The LRA trainer's remat step stays within the XLA temp that experiments/lra/MEMORY.md
measured (compile only: nothing of that size is allocated; no timing).

The budget is the table's PathX row: 7.27 GB at Table 9 sizes (batch 32, L 16384, depth 6,
complex LRU, remat, `auto` method, CPU backend). XLA's temp is linear in the length (every
buffer that grows is one sequence long), so the test compiles the same step at 1/16 of the
length and allows 1/16 of the table's figure plus 10% for the part that does not grow with
the length (parameter gradients, the optimiser's update): the step needs 0.471 GB here
against 0.454 GB scaled (0.492 GB before the sequential adjoint loop summed the transition's
cotangent itself, 82aab59). The regression of 1f02d29 (a bidirectional block kept
one direction's states and their adjoint through the other direction's backward pass:
9.42 GB at full length, 0.605 GB here) fails it.
"""

import jax
import pytest

#: experiments/lra/MEMORY.md: PathX, remat, `auto`, XLA temp at the full length.
TABLE_TEMP_BYTES = 7.27e9
TABLE_LENGTH = 16384
LENGTH = TABLE_LENGTH // 16
#: Allowance for the temp that does not grow with the length, a fraction of the scaled figure.
FIXED_PART = 0.10


def _pathx_remat_step(length: int):
    """The trainer's own PathX training step (Table 9 settings, remat on), compiled at
    `length`: experiments.lra.train.task_defaults + steps.compile_train_step."""
    from experiments.lra import steps, train

    cfg = dict(train.task_defaults("pathx"), form="complex", method="auto", remat=True)
    compiled, _ = steps.compile_train_step(cfg, steps.task_spec("pathx", seq_len=length))
    return compiled


@pytest.mark.slow
@pytest.mark.skipif(jax.default_backend() != "cpu", reason="MEMORY.md is the CPU backend's")
def test_pathx_remat_step_temp_within_the_measured_table():
    budget = TABLE_TEMP_BYTES * LENGTH / TABLE_LENGTH * (1 + FIXED_PART)
    temp = _pathx_remat_step(LENGTH).memory_analysis().temp_size_in_bytes
    assert temp <= budget, (
        f"PathX remat step at L = {LENGTH}: XLA temp {temp / 1e9:.3f} GB over the budget "
        f"{budget / 1e9:.3f} GB (experiments/lra/MEMORY.md: {TABLE_TEMP_BYTES / 1e9} GB "
        f"at L = {TABLE_LENGTH}); compare the buffer assignments "
        "(XLA_FLAGS=--xla_dump_to=DIR, *jit_train_step*-buffer-assignment.txt)"
    )


def test_sequence_parallel_over_more_devices_than_there_are_is_one_line(capsys):
    """`--sequence-parallel 2` on one device ended in a traceback."""
    import jax

    from experiments.lra import memory

    n = jax.device_count() + 1
    with pytest.raises(SystemExit) as e:
        memory.main(["--sequence-parallel", str(n), "--tasks", "listops"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    assert f"argument --sequence-parallel: {n} devices asked for" in err
    assert f"xla_force_host_platform_device_count={n}" in err

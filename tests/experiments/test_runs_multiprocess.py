"""`runs.multiprocess.chained`, in one process: the chain that keeps a device from
launching a collective after a failed one. The runs of several processes, and a peer
killed mid-run, are in `test_distributed.py`.

A program that fails on the CPU asynchronously, as a collective does when its peer dies,
cannot be made in one process (a host callback runs synchronously and raises at the
call), so this checks what the chain rests on: the program that makes the copy takes
`after` as an input (the runtime starts it once `after` is made, and skips it with
`after`'s error), and computes new buffers rather than handing back its inputs."""

import jax
import numpy as np

from experiments.runs import multiprocess as mp


def test_a_chained_value_is_a_new_copy_made_by_a_program_that_takes_after(monkeypatch):
    monkeypatch.setattr(mp, "_multi", lambda: True)  # `chained` is the identity in one process
    value = {"tokens": np.arange(6, dtype=np.int32).reshape(2, 3), "weight": np.ones(2, np.float32)}
    value = jax.device_put(value)
    after = jax.device_put(np.float32(1.0))
    done = mp.chained(value, after=after)
    for name, given in value.items():
        assert done[name].dtype == given.dtype and done[name].shape == given.shape
        np.testing.assert_array_equal(np.asarray(done[name]), np.asarray(given))
        assert done[name].unsafe_buffer_pointer() != given.unsafe_buffer_pointer()
    # `after` is an input of the program (kept though unused), after `value`'s two.
    signature = mp._CHAIN.lower(value, after).as_text().split("@main(", 1)[1].split(")", 1)[0]
    assert signature.count("%arg") == 3, signature
    assert mp.chained(value, after=None) is value

"""The private JAX hooks that `experiments/runs` reads resolve on the installed JAX.

Each hook has a documented fallback for a JAX version that lacks it:

- the distributed runtime's key-value store (`runs.watchdog`): without it the watchdog is
  off, and a dead peer ends the others with JAX's native abort;
- JAX's own cluster detection (`runs.parallel.cluster`): without it `--distributed auto`
  finds no Slurm or Open MPI launch.

A JAX release that moves a hook would switch its safeguard off in silence. (JAX 0.12.1
moved `gpu_info`, and a fallback of the same kind hid it until a CUDA lowering failed.)
`./dev.sh test-newest` runs this file beside `tests/lib`, on the newest JAX release.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: One process of a one-process `jax.distributed` run, through the watchdog's own store.
_STORE_CHILD = """
import sys
import jax
from experiments.runs import watchdog

jax.distributed.initialize(sys.argv[1], num_processes=1, process_id=0)
store = watchdog._client()
assert store is not None, "the watchdog found no key-value store"
store.key_value_set("hooks/alive/0", "beat 1", allow_overwrite=True)
store.key_value_set("hooks/alive/0", "beat 2", allow_overwrite=True)
print("read", store.key_value_try_get("hooks/alive/0"), sorted(store.key_value_dir_get("hooks/")))
jax.distributed.shutdown()
"""


def test_the_watchdogs_key_value_store_is_found_and_answers(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", _STORE_CHILD, f"127.0.0.1:{port}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "read beat 2 [('hooks/alive/0', 'beat 2')]" in done.stdout, done.stdout


def test_jaxs_cluster_detection_is_found(monkeypatch):
    from experiments.runs import parallel

    for name in list(os.environ):
        if name.startswith(("SLURM_", "OMPI_")):
            monkeypatch.delenv(name)
    assert parallel.cluster() is None
    for name, value in {
        "SLURM_JOB_ID": "7",
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_NTASKS": "3",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "1",
    }.items():
        monkeypatch.setenv(name, value)
    assert parallel.cluster() == ("slurm", 3)

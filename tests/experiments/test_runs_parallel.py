"""Which launches `--distributed auto` starts `jax.distributed` for
(`runs.parallel.distributed_env`): `JAX_COORDINATOR_ADDRESS`, or an Open MPI or Slurm
launch of more than one process as JAX's own cluster detection sees it. The real
multi-process run under Slurm's variables is in `test_distributed.py`."""

import os

import pytest

from experiments.runs import parallel

_ORTE = "1234.0;tcp://10.0.0.7:5555"  # what `mpirun` sets in OMPI_MCA_orte_hnp_uri


@pytest.fixture
def bare(monkeypatch):
    """An environment without any launcher's variables."""
    for name in list(os.environ):
        if name.startswith(("SLURM_", "OMPI_", "KUBERNETES_", "JAX_COORDINATOR")):
            monkeypatch.delenv(name)
    return monkeypatch


def _slurm(bare, tasks: str) -> None:
    """The variables `srun` sets in task 0 of a job of `tasks` tasks."""
    env = dict(SLURM_JOB_ID="77", SLURM_STEP_NODELIST="node[001-004]", SLURM_NTASKS=tasks)
    for name, value in {**env, "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}.items():
        bare.setenv(name, value)


def test_launches_that_start_jax_distributed(bare):
    assert parallel.distributed_env() is None and parallel.cluster() is None
    bare.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    assert parallel.distributed_env() == "JAX_COORDINATOR_ADDRESS"
    bare.delenv("JAX_COORDINATOR_ADDRESS")

    _slurm(bare, "4")  # inside `srun -n 4`
    assert parallel.cluster() == ("slurm", 4) and parallel.distributed_env() == "slurm"
    _slurm(bare, "1")  # one task: nothing to start
    assert parallel.cluster() == ("slurm", 1) and parallel.distributed_env() is None
    bare.delenv("SLURM_PROCID")  # an `salloc` shell, not a task: JAX could not find ranks
    bare.setenv("SLURM_NTASKS", "4")
    assert parallel.distributed_env() is None

    bare.setenv("OMPI_MCA_orte_hnp_uri", _ORTE)
    bare.setenv("OMPI_COMM_WORLD_SIZE", "3")
    assert parallel.cluster() == ("ompi", 3) and parallel.distributed_env() == "ompi"


def test_other_clusters_need_distributed_on(bare):
    """Kubernetes is not queried (nor warned about) in auto mode."""
    bare.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert parallel.cluster() is None and parallel.distributed_env() is None

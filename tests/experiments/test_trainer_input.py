"""What the user gives the trainer, checked where it enters (issue 27): numbers against the
dtype and range they will meet, the environment variables it reads, and a property-based
walk over every flag: each value parses to a valid `RunConfig` or is refused with the
trainer's own one line, never a traceback.

Nothing here trains: parsing, config checks, and `main` refusing before the data are read.
"""

import argparse
import contextlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import cast

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from listops_argv import listops_argv

from experiments.lra import _setup, cli, train
from experiments.lra.config import ConfigError, RunConfig
from experiments.lra.steps import make_optimizer
from experiments.runs.numbers import FLOAT32_MAX, FLOAT32_TINY, INT32_MAX

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("restore_backend_env")


def _one_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if "error:" in x]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------ numbers at the edges


@pytest.mark.parametrize(
    "flag, value, words",
    [
        ("--seed", str(2**63), "argument --seed: expected an integer >= 0 and <= 4294967295"),
        ("--seed", str(2**32), "(jax.random.PRNGKey keeps 32 bits of it)"),
        ("--steps", str(10**30), "argument --steps: expected an integer >= 1 and <= 2147483647"),
        ("--steps", str(2**31), "(the step counter and the optimiser's are int32)"),
        ("--lr", "1e-50", "argument --lr: expected a finite number >= 1.17549e-38"),
        ("--lr", "1e39", "and <= 3.40282e+38 (a normal float32)"),
        ("--d-model", str(2**40), "argument --d-model: expected an integer >= 1 and <= 2147"),
        ("--max-examples", str(2**64), "argument --max-examples: expected an integer >= 1"),
        ("--lr-factor", "1e-300", "argument --lr-factor: expected a finite number >= 1.17549e"),
        ("--r-max", "0", "--r-max 0.0: its square underflows float32"),
        ("--r-max", "0.99999999", "--r-max 0.99999999 rounds to 1 in float32"),
        ("--lr", "1e-30", "--lr 1e-30 x --lr-factor 1e-10 = 1e-40 is outside float32's range"),
    ],
)
def test_numbers_beyond_what_they_meet_are_one_line_at_the_flag(
    flag, value, words, tmp_path, capsys
):
    """`--seed 2**63` and `--steps 10**30` were tracebacks; a learning rate below float32's
    range ran with a NaN schedule; seeds 2**32 and 0 gave the same key."""
    extra = [flag, value] + (["--lr-factor", "1e-10"] if value == "1e-30" else [])
    if flag == "--r-max":
        extra += ["--r-min", "0"]
    argv = listops_argv(tmp_path, tmp_path / "run", *extra)
    assert train.main(argv) == 2
    assert words in _one_error(capsys.readouterr().err)
    assert not (tmp_path / "run").exists()


def test_a_saved_config_gets_the_same_checks(tmp_path):
    """One place: a config.json holding seed 2**63 is refused like the flag."""
    saved = RunConfig.defaults("listops").to_json()
    with pytest.raises(ConfigError, match=r"--seed: expected an integer >= 0 and <= 4294967295"):
        RunConfig.from_json({**saved, "seed": 2**63})
    with pytest.raises(ConfigError, match=r"--steps: expected an integer >= 1 and <= 2147483647"):
        RunConfig.from_json({**saved, "steps": 10**30})


@pytest.mark.parametrize("x64", [False, True])
def test_the_accepted_extremes_fit_their_dtypes(x64):
    """The largest accepted seed and step count and the smallest accepted rate are exact
    in the dtypes they meet, with and without jax_enable_x64."""
    cfg = RunConfig.defaults("listops").replace(
        seed=2**32 - 1, steps=INT32_MAX, lr=FLOAT32_TINY, lr_factor=1.0
    )
    with jax.enable_x64(x64):
        keys = {tuple(map(int, jax.random.key_data(jax.random.PRNGKey(s)))) for s in (0, cfg.seed)}
        assert len(keys) == 2  # distinct seeds, distinct keys
        assert int(jnp.asarray(cfg.steps - 1, jnp.int32)) == cfg.steps - 1  # the last step
        _, schedule = make_optimizer(cfg)
        for step in (0, 1, cfg.steps // 2, cfg.steps - 1):
            assert math.isfinite(float(cast(jax.Array, schedule(step))))


# ------------------------------------------------------------------ environment variables


@pytest.mark.parametrize(
    "env, words",
    [
        ({"JAX_NUM_PROCESSES": "two"}, "JAX_NUM_PROCESSES='two' is malformed: it must be a whole"),
        (
            {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"},
            "JAX_PROCESS_ID='2' must be below JAX_NUM_PROCESSES='2'",
        ),
        ({"JAX_PROCESS_ID": "-1"}, "JAX_PROCESS_ID='-1' is malformed"),
        ({"JAX_COORDINATOR_ADDRESS": "localhost"}, "JAX_COORDINATOR_ADDRESS='localhost' is"),
        ({"JAX_COORDINATOR_ADDRESS": "h:99999"}, "HOST:PORT with a port in 1..65535"),
        ({"LRA_HEARTBEAT_TIMEOUT": "10s"}, "LRA_HEARTBEAT_TIMEOUT='10s' is malformed"),
        ({"LRA_INIT_TIMEOUT": "0"}, "LRA_INIT_TIMEOUT='0' is malformed"),
        ({"SLURM_NTASKS": "x"}, "SLURM_NTASKS='x' is malformed"),
        ({"XLA_PYTHON_CLIENT_MEM_FRACTION": "1.5"}, "must be a number in (0, 1]"),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "maybe"}, "must be true or false"),
    ],
)
def test_malformed_variables_are_one_line(env, words, tmp_path, capsys, monkeypatch):
    """JAX_NUM_PROCESSES=two was a ValueError traceback from int()."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = listops_argv(tmp_path, tmp_path / "run", "--distributed", "on")
    assert train.main(argv) == 2
    line = _one_error(capsys.readouterr().err)
    assert line.startswith("error: the environment variable") or "JAX_PROCESS_ID" in line
    assert words in line


@pytest.mark.slow
def test_a_platform_jax_cannot_start_is_one_line(tmp_path):
    """JAX_PLATFORMS=cuda on a machine without CUDA was a bare AssertionError (a fresh
    process: this one's backend is started)."""
    if any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("this machine has CUDA")
    env = {**os.environ, "JAX_PLATFORMS": "cuda"}
    argv = listops_argv(tmp_path, tmp_path / "run", "--distributed", "off")
    done = subprocess.run(
        [sys.executable, "-m", "experiments.lra.train", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    line = _one_error(done.stderr)
    assert "JAX_PLATFORMS='cuda': JAX cannot start that platform on this machine" in line


# ------------------------------------------------------------------ every flag, any value

_PARSER = None


def _parser() -> argparse.ArgumentParser:
    global _PARSER
    if _PARSER is None:
        _PARSER = cli._parser()
    return _PARSER


def _flags() -> list[argparse.Action]:
    skip = {"--out", "--task", "--data-root", "--resume", "-h"}
    return [
        a
        for a in _parser()._actions
        if a.option_strings and not skip.intersection(a.option_strings)
    ]


_TEXT = st.sampled_from(
    ["0", "-1", "1", "2", "7", "1.5", "0.5", "1e-50", "1e-38", "3.5e38", "1e39", "nan", "inf"]
    + ["-0.0", "0.99999999", "6.3", str(2**31 - 1), str(2**31), str(2**32), str(2**63)]
    + [str(10**30), "", " ", "abc", "true", "none", "USR1", "usr1,xcpu", "KILL", "1_000"]
    + ["\u0661", "0x10", "1e400", "lin", "legs", "half", "layer", "last", "sequential"]
) | st.text(max_size=8)


@st.composite
def _argv(draw):
    """A command line: the required flags, then 0-6 others with values drawn from odd and
    valid text or each flag's own choices."""
    argv = ["--task", draw(st.sampled_from(["listops", "text", "image", "pathx"]))]
    # An existing folder (read by nothing here): a missing one is refused at parsing,
    # and the examples would never reach `resolve_config`.
    argv += ["--out", "OUT", "--data-root", str(Path(__file__).parent)]
    for action in draw(st.lists(st.sampled_from(_flags()), max_size=6)):
        name = action.option_strings[-1]
        if action.nargs == 0:
            argv.append(name)
        elif action.choices:
            argv += [name, draw(st.sampled_from(list(action.choices)) | _TEXT)]
        else:
            argv += [name, draw(_TEXT)]
    return argv


@settings(
    max_examples=150,
    deadline=2000,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=cast("list[HealthCheck]", list(HealthCheck)),
)
@given(_argv())
def test_every_flag_value_parses_to_a_valid_config_or_one_error_line(argv):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = _parser().parse_args(argv)
    except SystemExit as e:
        assert e.code == 2
        line = _one_error(err.getvalue())
        assert "argument " in line or "unrecognized arguments" in line, line
        return
    try:
        cfg = _setup.resolve_config(args)
    except train.UsageError as e:
        assert str(e) and "\n" not in str(e), str(e)
        return
    assert RunConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg
    assert 0 <= cfg.seed < 2**32 and 1 <= cfg.steps <= INT32_MAX
    assert FLOAT32_TINY <= cfg.lr * cfg.lr_factor <= FLOAT32_MAX

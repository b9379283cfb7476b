"""The typed run configuration (`experiments/lra/config.py`) and the command line generated
from it (`experiments/lra/cli.py`)."""

import dataclasses
import json

import pytest

from experiments.lra import cli, config, cores, tasks
from experiments.lra.config import ConfigError, RunConfig
from experiments.runs.settings import setting_of, settings

#: Settings added to config.json by the core registry (absent from older runs' files).
ADDED = ("blocks", "c_init", "s4d_init", "dt_min", "dt_max")


@pytest.mark.parametrize("core", cores.names())
def test_json_round_trip_for_every_task(core):
    for task in tasks.names():
        c = RunConfig.defaults(task, core)
        assert RunConfig.from_json(json.loads(json.dumps(c.to_json()))) == c


def test_roles_split_the_settings():
    roles = {f.name: s.role for f, s in settings(RunConfig)}
    assert config.TRAINING_KEYS[:3] == ("task", "core", "form") and "seed" in config.TRAINING_KEYS
    assert {"remat", "sequence_parallel", "method"} <= set(config.PROGRAM_KEYS)
    assert not {"seed", "max_examples", "eval_every", "data_root"} & set(config.PROGRAM_KEYS)
    assert roles["eval_every"] == "run" and roles["run_id"] == "record"
    assert set(config.CORE_KEYS) == {"r_min", "r_max", "max_phase", *ADDED}


def test_a_config_saved_before_a_setting_existed_reads_as_it_trained():
    """A run of 0.3 recorded neither the baselines' settings nor (before 0.2) the core:
    they read as what the trainer then used."""
    s5 = RunConfig.defaults("listops", "s5").replace(blocks=1, d_state=6).to_json()
    old = {k: v for k, v in s5.items() if k not in ADDED}
    back = RunConfig.from_json(old)
    assert (back.blocks, back.c_init, back.dt_min, back.dt_max) == (
        1,
        "trunc_standard_normal",
        0.001,
        0.1,
    )
    s4d = RunConfig.defaults("pathx", "s4d").to_json()
    back = RunConfig.from_json({k: v for k, v in s4d.items() if k not in ADDED})
    assert (back.s4d_init, back.dt_min, back.dt_max) == ("lin", 0.001, 0.1)
    lru = {k: v for k, v in RunConfig.defaults("text").to_json().items() if k not in ADDED}
    del lru["core"], lru["remat"]
    back = RunConfig.from_json(lru)
    assert back.core == "lru" and back.remat is False and back.blocks is None
    assert back.r_min == tasks.get_task("text").settings["r_min"]


@pytest.mark.parametrize(
    "edit, words",
    [
        ({"d_model": "x"}, "--d-model: expected a number, got 'x'"),
        ({"dropout": 1.5}, "--dropout: expected a finite number >= 0 and < 1"),
        ({"bidirectional": "yes"}, "--bidirectional: expected true or false"),
        ({"glu": "quarter"}, "--glu: expected one of ('full', 'half'), got 'quarter'"),
        ({"r_min": 0.9, "r_max": 0.5}, "need 0 <= --r-min <= --r-max < 1"),
        ({"colour": "red"}, "unknown settings ['colour']"),
        ({"task": "chess"}, "task 'chess'"),
    ],
)
def test_a_bad_saved_setting_is_one_error_naming_it(edit, words):
    saved = {**RunConfig.defaults("listops").to_json(), **edit}
    with pytest.raises(ConfigError) as e:
        RunConfig.from_json(saved)
    assert words in str(e.value)


def test_resume_refuses_settings_that_bind_the_run():
    saved = RunConfig.defaults("listops").replace(steps=8, run_id="a" * 32).to_json()
    with pytest.raises(ConfigError, match=r"\(steps: 8 in the run, 9 now; seed: 0 in the run"):
        config.resumed_run(saved, {"seed": 4, "steps": 9}, out="runs/x")
    resumed = config.resumed_run(saved, {"eval_every": 2, "steps": 8}, out="runs/x")
    assert (resumed.eval_every, resumed.run_id, resumed.eval_batch_size) == (2, "a" * 32, 32)


def test_a_new_run_refuses_flags_its_core_would_not_use():
    with pytest.raises(ConfigError, match="--core lru is the LRU .*: --blocks 4 would not be used"):
        config.new_run("listops", {"blocks": 4})
    run = config.new_run("listops", {"core": "s5", "blocks": 2})
    assert run.r_min is None and run.blocks == 2 and run.c_init == "lecun_normal"
    assert run.run_id is not None
    assert len(run.run_id) == 32 and run.eval_batch_size == run.batch_size


def test_the_parser_has_a_flag_with_help_and_default_for_every_setting():
    parser = cli._parser()
    actions = {a.dest: a for a in parser._actions}
    for field in dataclasses.fields(RunConfig):
        if setting_of(field).role == "record":
            assert field.name not in actions
            continue
        help_text = actions[field.name].help
        assert help_text is not None, field.name
        assert help_text.endswith("]") and "None" not in help_text, field.name
    assert all(a.help for a in parser._actions), "every flag has a help line"
    assert "(default: None)" not in parser.format_help()
    shown = actions["d_model"].help
    assert shown is not None
    assert all(f"{t} {tasks.get_task(t).settings['d_model']}" in shown for t in tasks.names())
    argv = ["--out", "o", "--task", "pathx", "--core", "s5", "--blocks", "4", "--no-remat"]
    assert cli.given(parser.parse_args(argv)) == {
        "task": "pathx",
        "core": "s5",
        "blocks": 4,
        "remat": False,
    }

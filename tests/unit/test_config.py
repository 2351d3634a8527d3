from __future__ import annotations

import pytest

from gpucli.core.config import build_config
from gpucli.core.errors import UsageError
from gpucli.tasks.embed import EmbedOptions


def test_precedence_flag_over_env_over_file_over_default(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('batch_size = 4\nmax_wait_ms = 7\nchunk_overlap = 8\ndevices = "cpu"\n'
                    '[embed]\nmax_wait_ms = 9\n[classify]\nbatch_size = 99\n')
    env = {"GPUCLI_BATCH_SIZE": "16", "GPUCLI_CHUNK_OVERLAP": "12"}
    config = build_config("embed", EmbedOptions, {"paths": ("x",), "batch_size": 32, "max_wait_ms": None},
                          toml, env)
    assert config.batch_size == 32  # flag
    assert config.task_options["chunk_overlap"] == 12  # env over file
    assert config.max_wait_ms == 9  # task table over top level
    assert config.devices == "cpu"  # file over default
    assert config.workers_per_device == 0  # default: one per device, or the task's choice on a CPU-only host


def test_env_values_are_typed():
    config = build_config("embed", EmbedOptions, {"paths": ("x",)},
                          environ={"GPUCLI_QUIET": "yes", "GPUCLI_INCLUDE": "*.md, *.txt", "GPUCLI_NORMALIZE": "0"})
    assert config.quiet is True and config.include == ("*.md", "*.txt")
    assert config.task_options["normalize"] is False


@pytest.mark.parametrize("cli,env", [
    ({"paths": ("x",), "progress": "loud"}, {}),
    ({"paths": ("x",)}, {"GPUCLI_BATCH_SIZE": "many"}),
    ({"paths": ()}, {}),
    ({"paths": ("x",), "chunk_overlap": -1}, {}),
])
def test_invalid_settings_say_what_to_fix(cli, env):
    with pytest.raises(UsageError):
        build_config("embed", EmbedOptions, cli, environ=env)


@pytest.mark.parametrize("line,message", [
    ("batch_size = true", "batch_size: true is not a number"),
    ("batch_size = 2.5", "batch_size: 2.5 is not a whole number"),
    ('batch_size = "8"', None),  # a string is parsed, as from the environment
    ("max_wait_ms = false", "max_wait_ms: false is not a number"),
    ("max_wait_ms = 2.5", None),
    ("[embed]\nchunk_overlap = true", "chunk_overlap: true is not a number"),
    ("quiet = 1", "quiet: 1 is not true or false"),
    ('quiet = "yes"', None),
    ("devices = 0", "devices: 0 is not text"),
])
def test_a_toml_value_of_another_type_than_its_option_is_exit_2(tmp_path, line, message):
    toml = tmp_path / "c.toml"
    toml.write_text(line + "\n")
    if message is None:
        build_config("embed", EmbedOptions, {"paths": ("x",)}, toml, {})
        return
    with pytest.raises(UsageError, match=message) as raised:
        build_config("embed", EmbedOptions, {"paths": ("x",)}, toml, {})
    assert raised.value.exit_code == 2


def test_a_config_key_typo_says_did_you_mean(tmp_path):
    from gpucli.core.config import build_config

    config = tmp_path / "run.toml"
    config.write_text("batchsize = 3\n")
    with pytest.raises(UsageError, match="did you mean batch_size") as caught:
        build_config("embed", EmbedOptions, {"paths": (".",)}, config, environ={})
    assert "known:" not in str(caught.value)  # one guess, not forty-five names


def test_a_gpucli_variable_typo_says_did_you_mean_and_others_are_left_alone():
    from gpucli.core.config import build_config

    with pytest.raises(UsageError, match="GPUCLI_BATCHSIZE is not an option; did you mean GPUCLI_BATCH_SIZE"):
        build_config("embed", EmbedOptions, {"paths": (".",)}, None, environ={"GPUCLI_BATCHSIZE": "3"})
    quiet = {"GPUCLI_DEBUG": "1", "GPUCLI_QDRANT_RETRIES": "2", "GPUCLI_SOMETHING_ELSE": "x"}
    assert build_config("embed", EmbedOptions, {"paths": (".",)}, None, environ=quiet).batch_size == 0


def test_a_common_option_is_one_field_that_every_command_takes_as_a_flag():
    """Declared once (core/config.py `option`): its flag, help and panel come from the field."""
    import dataclasses

    from gpucli.app.options import task_parameters
    from gpucli.core.config import RunConfig
    from gpucli.tasks import all_tasks

    declared = [f for f in dataclasses.fields(RunConfig) if f.metadata.get("flags")]
    assert {"out", "batch_size", "engine", "from_table"} <= {f.name for f in declared}
    for task in all_tasks().values():
        taken = {p.name: p for p in task_parameters(task)}
        for f in declared:
            if f.metadata["tables"] and not getattr(task, "reads_tables", False):
                assert f.name not in taken
                continue
            typer_option = taken[f.name].annotation.__metadata__[0]
            flags = (typer_option.default, *typer_option.param_decls)
            assert f.metadata["flags"][0] in flags and typer_option.rich_help_panel == f.metadata["panel"].value


@pytest.mark.parametrize("name", ["workers_per_device", "batch_size", "max_batch_cost", "max_wait_ms", "max_file_mb",
                                  "limit", "fail_on", "setup_timeout_s", "batch_timeout_s", "dtype", "progress",
                                  "engine", "queue_items", "read_chunks_in_flight", "part_rows", "max_restarts"])
def test_each_checked_setting_refuses_a_bad_value_with_its_own_message(name):
    import dataclasses

    from gpucli.core.config import RunConfig

    field = next(f for f in dataclasses.fields(RunConfig) if f.name == name)
    bad = "sometimes" if isinstance(field.default, str) else -5
    with pytest.raises(UsageError) as refused:
        RunConfig(task="embed", paths=("x",), **{name: bad})
    choices = field.metadata.get("choices")
    expected = f"{field.metadata['flags'][0]} must be one of {', '.join(choices)}" if choices else field.metadata["must"]
    assert str(refused.value) == expected and expected

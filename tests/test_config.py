"""The shared config: layering, provenance, and one-line errors."""

from pathlib import Path

import pytest

from nvrx.config import (
    ENV_ALIASES,
    FIELDS,
    ConfigError,
    load_config,
    parse_assignments,
)
from nvrx.config.shellwords import parse_env_file


def load(tmp_path: Path, environ: dict[str, str] | None = None, **kwargs: object):  # type: ignore[no-untyped-def]
    return load_config(environ=environ or {}, cwd=tmp_path, home=tmp_path / "home", **kwargs)  # type: ignore[arg-type]


def test_defaults_are_the_upstream_defaults(tmp_path: Path) -> None:
    cfg = load(tmp_path).config
    assert (cfg.chain.train_tasks, cfg.chain.hot_spares, cfg.chain.cold_spares) == (1, 1, 3)
    assert cfg.chain.depth == 4 and cfg.chain.time_limit == "00:25:00"
    assert cfg.inject.batch_size == 2 and cfg.slurm.gpus_per_node == 4
    assert cfg.watch.storm_cycles == 5 and cfg.watch.stall_seconds == 3600
    assert cfg.score.segment_size == 32 and cfg.slurm.command_timeout == 30


def test_every_value_starts_out_from_the_default_layer(tmp_path: Path) -> None:
    loaded = load(tmp_path)
    assert {str(o) for o in loaded.origins.values()} == {"default"}
    assert len(loaded.rows()) == len(FIELDS)


def test_layers_override_in_order_and_each_value_names_its_source(tmp_path: Path) -> None:
    yaml_file = tmp_path / "site.yaml"
    yaml_file.write_text(
        "slurm:\n  partition: from-yaml\n  account: yaml-acct\n"
        "chain:\n  depth: 6\n  train_tasks: 2\n  hot_spares: 0\n"
    )
    env_file = tmp_path / "user.env"
    env_file.write_text("PARTITION=from-env-file\nNVRX_CHAIN_DEPTH=7\n")
    environ = {"NVRX_SLURM_PARTITION": "from-env", "NVRX_TRAIN_TASKS": "3"}
    loaded = load(
        tmp_path,
        environ,
        config_file=yaml_file,
        env_file=env_file,
        cli={"slurm.partition": ("from-cli", "--partition")},
    )
    cfg = loaded.config
    assert cfg.slurm.partition == "from-cli"
    assert str(loaded.origins["slurm.partition"]) == "cli --partition"
    assert cfg.slurm.account == "yaml-acct"
    assert str(loaded.origins["slurm.account"]) == f"file {yaml_file}"
    assert cfg.chain.depth == 7
    assert str(loaded.origins["chain.depth"]) == f"env-file {env_file}:2 NVRX_CHAIN_DEPTH"
    assert cfg.chain.train_tasks == 3
    assert str(loaded.origins["chain.train_tasks"]) == "env NVRX_TRAIN_TASKS"
    assert cfg.chain.hot_spares == 0
    assert str(loaded.origins["chain.nodes_per_task"]) == "default"


def test_config_file_search_order(tmp_path: Path) -> None:
    home_cfg = tmp_path / "home" / ".config" / "nvrx" / "config.yaml"
    home_cfg.parent.mkdir(parents=True)
    home_cfg.write_text("chain:\n  depth: 2\n")
    assert load(tmp_path).config_file == home_cfg

    local = tmp_path / "nvrx.yaml"
    local.write_text("chain:\n  depth: 3\n")
    assert load(tmp_path).config.chain.depth == 3

    named = tmp_path / "named.yaml"
    named.write_text("chain:\n  depth: 5\n")
    assert load(tmp_path, {"NVRX_CONFIG": str(named)}).config.chain.depth == 5

    explicit = tmp_path / "explicit.yaml"
    explicit.write_text("chain:\n  depth: 9\n")
    loaded = load(tmp_path, {"NVRX_CONFIG": str(named)}, config_file=explicit)
    assert loaded.config.chain.depth == 9


def test_a_missing_explicit_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found: .*nope.yaml"):
        load(tmp_path, config_file=tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="from NVRX_CONFIG"):
        load(tmp_path, {"NVRX_CONFIG": str(tmp_path / "gone.yaml")})


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("slurm:\n  partiton: x\n", r"unknown key 'slurm.partiton' in .*bad.yaml"),
        ("slurmm:\n  partition: x\n", r"unknown key 'slurmm' in .*bad.yaml"),
        ("- a\n- b\n", "must be a mapping"),
        ("slurm: [1]\n", "section 'slurm' .* must be a mapping"),
        ("slurm:\n  partition: [unclosed\n", r"bad.yaml line \d+ is not valid YAML"),
    ],
)
def test_file_errors_name_the_key_and_the_file(tmp_path: Path, text: str, match: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load(tmp_path, config_file=bad)


def test_a_bad_value_names_key_value_and_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, {"BATCH_SIZE": "two"})
    assert str(err.value).startswith("bad value for inject.batch_size: 'two' (from env BATCH_SIZE)")

    cfg = tmp_path / "c.yaml"
    cfg.write_text("chain:\n  time_limit: soon\n")
    with pytest.raises(ConfigError, match=r"chain.time_limit: 'soon' \(from file .*c.yaml\)"):
        load(tmp_path, config_file=cfg)


def test_unknown_key_in_an_env_file_names_key_file_and_line(tmp_path: Path) -> None:
    env_file = tmp_path / "user.env"
    env_file.write_text("# site\nACCOUNT=a\nNOT_A_SETTING=1\n")
    with pytest.raises(ConfigError, match=r"unknown key 'NOT_A_SETTING' in .*user.env line 3"):
        load(tmp_path, env_file=env_file)


def test_canonical_env_name_beats_the_upstream_alias(tmp_path: Path) -> None:
    loaded = load(tmp_path, {"GPUS_PER_NODE": "8", "NVRX_SLURM_GPUS_PER_NODE": "4"})
    assert loaded.config.slurm.gpus_per_node == 4
    assert str(loaded.origins["slurm.gpus_per_node"]) == "env NVRX_SLURM_GPUS_PER_NODE"


def test_the_current_upstream_alias_beats_a_deprecated_one(tmp_path: Path) -> None:
    loaded = load(tmp_path, {"FR_RACK_SIZE": "16", "FR_SEGMENT_SIZE": "8"})
    assert loaded.config.score.segment_size == 8


def test_every_alias_points_at_a_real_setting() -> None:
    for name, key in ENV_ALIASES:
        assert key in FIELDS, name


@pytest.mark.parametrize(
    ("name", "value", "key", "expected"),
    [
        ("POOL", "GPU_SLEEP:1:5:2 SIGKILL:0:5:2", "inject.pool", "GPU_SLEEP:1:5:2 SIGKILL:0:5:2"),
        ("JUDGE_MODEL", "m", "score.model", "m"),
        ("NVRX_TRAIN_TASKS", "32", "chain.train_tasks", 32),
        ("NVRX_LOG_DEBUG", "false", "chain.log_debug", False),
        (
            "NVRX_WATCH_DISABLE",
            "suspect_node, restart_storm",
            "watch.disable",
            ["suspect_node", "restart_storm"],
        ),
        ("NVRX_CHAIN_EXTRA_ENV", '{"A": "1"}', "chain.extra_env", {"A": "1"}),
    ],
)
def test_environment_values_are_parsed_to_their_types(
    tmp_path: Path, name: str, value: str, key: str, expected: object
) -> None:
    assert load(tmp_path, {name: value}).value(key) == expected


def test_set_to_empty_is_not_the_same_as_unset(tmp_path: Path) -> None:
    # The upstream ${VAR-default} knobs: unset keeps the default, empty switches the feature off.
    cfg = load(tmp_path).config.chain
    assert (cfg.segment, cfg.container_mounts) == (1, "/lustre:/lustre")
    cfg = load(tmp_path, {"NVRX_SEGMENT": "", "NVRX_CONTAINER_MOUNTS": ""}).config.chain
    assert (cfg.segment, cfg.container_mounts) == (None, "")


def test_paths_expand_home_and_relative_file_paths_resolve_against_the_file(tmp_path: Path) -> None:
    sub = tmp_path / "etc"
    sub.mkdir()
    cfg = sub / "nvrx.yaml"
    cfg.write_text("chain:\n  work_dir: runs/a\ninject:\n  base_experiments_dir: ~/exp\n")
    loaded = load(tmp_path, config_file=cfg)
    assert loaded.config.chain.work_dir == sub / "runs" / "a"
    assert str(loaded.config.inject.base_experiments_dir).endswith("/exp")
    assert "~" not in str(loaded.config.inject.base_experiments_dir)


def test_set_assignments_parse_and_reject_unknown_keys() -> None:
    assert parse_assignments(["slurm.partition=gpu"]) == {
        "slurm.partition": ("gpu", "--set slurm.partition")
    }
    with pytest.raises(ConfigError, match="unknown key 'slurm.nope'"):
        parse_assignments(["slurm.nope=1"])
    with pytest.raises(ConfigError, match="SECTION.KEY=VALUE"):
        parse_assignments(["partition"])


class TestUserEnvFile:
    """The upstream site file: a shell subset, parsed without running anything."""

    def parse(self, text: str, environ: dict[str, str] | None = None) -> dict[str, str]:
        return parse_env_file(text, environ or {}).as_dict()

    def test_comments_export_and_quotes(self) -> None:
        text = (
            "# comment\n"
            "\n"
            "export ACCOUNT=acct   # trailing comment\n"
            "PARTITION='batch # not a comment'\n"
            'CONTAINER_IMAGE="nvcr.io/nvidia/nemo:26.04"\n'
        )
        assert self.parse(text) == {
            "ACCOUNT": "acct",
            "PARTITION": "batch # not a comment",
            "CONTAINER_IMAGE": "nvcr.io/nvidia/nemo:26.04",
        }

    def test_expansion_from_the_file_then_the_environment(self) -> None:
        text = (
            "BASE=${HOME}/exp\n"
            'BASE_EXPERIMENTS_DIR="$BASE/fi"\n'
            "LITERAL='$HOME'\n"
            'ESCAPED="\\$HOME"\n'
            "DEFAULTED=${UNSET_VAR:-fallback}\n"
            "DASH=${EMPTY-kept}\n"
            "MISSING=$NOPE\n"
        )
        parsed = self.parse(text, {"HOME": "/home/u", "EMPTY": ""})
        assert parsed["BASE_EXPERIMENTS_DIR"] == "/home/u/exp/fi"
        assert parsed["LITERAL"] == "$HOME"
        assert parsed["ESCAPED"] == "$HOME"
        assert parsed["DEFAULTED"] == "fallback"
        assert parsed["DASH"] == ""
        assert parsed["MISSING"] == ""

    def test_defaults_expand_and_nest(self) -> None:
        parsed = self.parse(
            'A=${UNSET:-$HOME/foo}\nB=${UNSET:-${HOME}}\nC="${UNSET-a b}"\n',
            {"HOME": "/home/u"},
        )
        assert parsed == {"A": "/home/u/foo", "B": "/home/u", "C": "a b"}

    def test_escapes(self) -> None:
        parsed = self.parse('A="q\\"x\\\\y\\`z"\nB=a\\ b\nC="\\n"\n')
        assert parsed == {"A": 'q"x\\y`z', "B": "a b", "C": "\\n"}

    @pytest.mark.parametrize("line", ["X=$(id -u)", 'X="`id -u`"', "X=a$(rm -rf /)"])
    def test_command_substitution_is_refused(self, line: str) -> None:
        with pytest.raises(ConfigError, match="command substitution is not supported"):
            self.parse(line)

    @pytest.mark.parametrize(
        "line", ["X=${HOME:=y}", "X=${HOME:+y}", "X=${#HOME}", "X=$'a'", "X=$1", "X=${HOME"]
    )
    def test_other_shell_expansions_are_refused_not_kept_literally(self, line: str) -> None:
        with pytest.raises(ConfigError, match="line 1: (unsupported expansion|unterminated)"):
            self.parse(line)

    def test_a_lone_dollar_is_literal(self) -> None:
        assert self.parse("X=a$\n") == {"X": "a$"}

    @pytest.mark.parametrize(
        ("line", "match"),
        [
            ("not an assignment", "expected KEY=VALUE"),
            ("X='open", "unterminated single quote"),
            ('X="open', "unterminated double quote"),
            ("X=two words", "unquoted space"),
        ],
    )
    def test_malformed_lines_name_the_line(self, line: str, match: str) -> None:
        with pytest.raises(ConfigError, match=f"line 1: {match}"):
            parse_env_file(line, {}, "user.env")


def test_helper_variables_are_allowed_when_another_line_expands_them(tmp_path: Path) -> None:
    env_file = tmp_path / "user.env"
    env_file.write_text("BASE=/lustre/me\nBASE_EXPERIMENTS_DIR=$BASE/exp\n")
    loaded = load(tmp_path, env_file=env_file)
    assert loaded.config.inject.base_experiments_dir == Path("/lustre/me/exp")

    env_file.write_text("BASE=/lustre/me\nBASE_EXPERIMENTS_DIR=/x\n")
    with pytest.raises(ConfigError, match=r"unknown key 'BASE' in .*user.env line 1"):
        load(tmp_path, env_file=env_file)


def test_in_an_env_file_too_the_canonical_name_beats_the_upstream_one(tmp_path: Path) -> None:
    env_file = tmp_path / "user.env"
    env_file.write_text("NVRX_SLURM_ACCOUNT=a\nACCOUNT=b\nACCOUNT=c\n")
    loaded = load(tmp_path, env_file=env_file)
    assert loaded.config.slurm.account == "a"
    env_file.write_text("ACCOUNT=b\nACCOUNT=c\n")
    loaded = load(tmp_path, env_file=env_file)
    assert loaded.config.slurm.account == "c"
    assert str(loaded.origins["slurm.account"]) == f"env-file {env_file}:2 ACCOUNT"


def test_files_that_are_not_utf8_are_a_one_line_error(tmp_path: Path) -> None:
    env_file = tmp_path / "user.env"
    env_file.write_bytes(b"ACCOUNT=\xff\n")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load(tmp_path, env_file=env_file)
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(b"slurm:\n  account: \xff\n")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load(tmp_path, config_file=cfg)


def test_yaml_numbers_stay_text_where_a_setting_is_text(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "chain:\n  time_limit: 1:30:00\n  fault_ranks: 2\n  depth: 6\n"
        "slurm:\n  account: 012345\n  command_timeout: 12.5\ninject:\n  time_limit: 30\n"
    )
    cfg_ = load(tmp_path, config_file=cfg).config
    assert cfg_.chain.time_limit == "1:30:00"
    assert cfg_.chain.fault_ranks == "2" and cfg_.chain.depth == 6
    assert cfg_.slurm.account == "012345" and cfg_.slurm.command_timeout == 12.5
    assert cfg_.inject.time_limit == "30"


@pytest.mark.parametrize(
    ("environ", "match"),
    [
        ({"PARTITION": "a b,c"}, r"slurm.partition: 'a b,c' \(from env PARTITION\)"),
        ({"NVRX_JOB_NAME": "bad name;rm"}, r"chain.job_name: 'bad name;rm'"),
        (
            {"NVRX_SLURM_RETRY_MAX_BACKOFF": "0.5"},
            r"^bad value for slurm.retry_max_backoff: '0.5' \(from env "
            r"NVRX_SLURM_RETRY_MAX_BACKOFF\): below retry_initial_backoff \(1\)$",
        ),
        # Accepted here, these would crash every Slurm call (subprocess, datetime) later.
        ({"NVRX_SLURM_COMMAND_TIMEOUT": "inf"}, r"slurm.command_timeout: 'inf'"),
        ({"NVRX_SLURM_RETRY_DEADLINE": "nan"}, r"slurm.retry_deadline: 'nan'"),
        # Fields with no upper bound: only the section's no-inf/nan rule refuses these.
        ({"NVRX_SCORE_TEMPERATURE": "inf"}, r"score.temperature: 'inf'"),
        ({"NVRX_WATCH_HEALTHY_CYCLE_SECONDS": "nan"}, r"watch.healthy_cycle_seconds: 'nan'"),
        ({"NVRX_SLURM_ACCOUNTING_WINDOW": "1e12"}, r"slurm.accounting_window: '1e12'"),
        ({"NVRX_SLURM_BIN_DIR": "slurm/bin"}, r"slurm.bin_dir: .*must be an absolute path"),
        ({"NVRX_INJECT_GPU_FAILURE": "1:0,two"}, r"chain.inject_gpu_failure: '1:0,two'"),
    ],
)
def test_values_slurm_would_reject_are_refused_at_load(
    tmp_path: Path, environ: dict[str, str], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        load(tmp_path, environ)


def test_secrets_are_never_shown(tmp_path: Path) -> None:
    loaded = load(tmp_path, {"JUDGE_API_KEY": "sk-very-secret", "LLM_API_KEY": ""})
    rows = {key: (value, str(origin)) for key, value, origin in loaded.rows()}
    assert rows["score.api_key"] == ("<hidden>", "env JUDGE_API_KEY")
    assert rows["inject.llm_api_key"][0] is None
    assert "sk-very-secret" not in repr(loaded.config)
    assert loaded.config.score.api_key is not None
    assert loaded.config.score.api_key.get_secret_value() == "sk-very-secret"


def test_stop_dimensions_are_the_text_dimensions_unless_set(tmp_path: Path) -> None:
    from typing import get_args

    from nvrx.config import Dimension
    from nvrx.score.model import DIMENSIONS

    assert get_args(Dimension) == DIMENSIONS  # one list of names, held equal here
    assert load(tmp_path).config.inject.stop_dimensions == [
        "restart_correct", "rank_primary", "rank_any", "fault_described",
    ]  # fmt: skip
    env = {"NVRX_INJECT_STOP_DIMENSIONS": "restart_correct, fr_rank_correct"}
    assert load(tmp_path, env).config.inject.stop_dimensions == [
        "restart_correct", "fr_rank_correct",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "says"),
    [("restart_correct,bogus", "bogus"), ("", "at least one"), ("rank_any,rank_any", "twice")],
)
def test_a_bad_stop_dimension_list_is_refused_naming_it(
    tmp_path: Path, value: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=f"inject.stop_dimensions.*{says}"):
        load(tmp_path, {"NVRX_INJECT_STOP_DIMENSIONS": value})

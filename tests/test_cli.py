"""The `nvrx` entry point as users run it: a real process, its stdout, stderr and exit code."""

import json
import os
import subprocess
import sys
from pathlib import Path

import nvrx

from .cli_runner import clean_environ
from .cli_runner import nvrx as nvrx_in_process

NVRX = [sys.executable, "-m", "nvrx.cli"]


def run(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    # Nothing from the developer's environment may leak in (TIME, ACCOUNT, POOL, NVRX_*...).
    return nvrx_in_process(*args, env=clean_environ(env), cwd=cwd)


def test_version_from_a_real_process() -> None:
    proc = subprocess.run([*NVRX, "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"nvrx {nvrx.__version__}"


def test_help_lists_every_subcommand() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for command in ("config", "submit-chain", "watch", "inject-loop", "score", "analyze", "report"):
        assert command in proc.stdout


def test_config_show_json_gives_every_value_with_its_source(tmp_path: Path) -> None:
    cfg = tmp_path / "nvrx.yaml"
    cfg.write_text("slurm:\n  partition: main\n")
    proc = run(
        "config",
        "show",
        "--json",
        "--set",
        "chain.depth=6",
        env={"BATCH_SIZE": "3", "HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    settings = doc["settings"]
    assert doc["config_file"] == str(cfg)
    assert settings["slurm.partition"] == {"value": "main", "source": f"file {cfg}"}
    assert settings["inject.batch_size"] == {"value": 3, "source": "env BATCH_SIZE"}
    assert settings["chain.depth"] == {"value": 6, "source": "cli --set chain.depth"}
    assert settings["chain.train_tasks"] == {"value": 1, "source": "default"}


def test_config_show_table_names_sources(tmp_path: Path) -> None:
    proc = run("config", "show", env={"PARTITION": "gpu", "HOME": str(tmp_path)}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("slurm.partition"))
    assert "gpu" in line and "env PARTITION" in line


def test_config_show_is_aligned_lines_padded_nowhere(tmp_path: Path) -> None:
    proc = run("config", "show", env={"HOME": str(tmp_path)}, cwd=tmp_path)
    lines = proc.stdout.splitlines()
    assert all(line == line.rstrip() for line in lines)  # no padding, not even on blank rows
    assert "" in lines  # the sections are apart
    header = next(line for line in lines if line.startswith("setting"))
    source_at = header.index("source")
    assert source_at < 80  # one long value no longer widens every row
    short = [ln for ln in lines if ln.startswith("slurm.gpus_per_node")]
    assert short and short[0].index("default") == source_at


def on_terminal(args: list[str], columns: int, env: dict[str, str]) -> str:
    """What `nvrx ARGS` shows on a terminal `columns` wide (a pseudo-terminal: a real process),
    colours left out."""
    import fcntl
    import re
    import struct
    import termios
    import threading

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal's other end closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    environ = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run([*NVRX, *args], stdout=slave, stderr=subprocess.PIPE, env=environ,
                          timeout=60, check=False)  # fmt: skip
    os.close(slave)
    reader.join(10)
    os.close(master)
    assert proc.returncode == 0, proc.stderr
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def test_config_show_fits_an_80_column_terminal_and_stays_one_line_a_setting_in_a_pipe(
    tmp_path: Path,
) -> None:
    deep = tmp_path / "a-project-with-a-long-name" / "and-its-training-configuration"
    deep.mkdir(parents=True)
    (deep / "nvrx.yaml").write_text("chain:\n  megatron_path: " + "/lustre/x" * 12 + "\n")
    env = clean_environ({"HOME": str(deep)})
    shown = on_terminal(["config", "show", "--config", str(deep / "nvrx.yaml")], 80, env)
    screen = shown.splitlines()
    assert max(len(line) for line in screen) <= 80
    keys = [line.split()[0] for line in screen if line[:1].strip()]
    assert keys.count("chain.megatron_path") == 1 and keys.count("slurm.partition") == 1
    # The long value folds into its column below its key, its source into the next column.
    at = next(i for i, line in enumerate(screen) if line.startswith("chain.megatron_path"))
    value_at, source_at = screen[at].index("/lustre"), screen[at].index("file ")
    values: list[str] = []
    sources: list[str] = []
    for line in screen[at:]:
        if line[:value_at].strip() and values:
            break  # the next setting
        values.append(line[value_at:source_at].strip())
        sources.append(line[source_at:])
    assert "".join(values) == "/lustre/x" * 12 and len(values) > 1
    assert "".join(sources) == f"file {deep / 'nvrx.yaml'}"
    # In a pipe: one line per setting, the value whole, for grep and awk.
    piped = run("config", "show", env={"HOME": str(deep)}, cwd=deep).stdout.splitlines()
    (line,) = [ln for ln in piped if ln.startswith("chain.megatron_path")]
    assert "/lustre/x" * 12 in line and line.endswith(f"file {deep / 'nvrx.yaml'}")


def test_bad_input_is_one_line_on_stderr_and_a_nonzero_exit(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("slurm:\n  partiton: main\n")
    proc = run("config", "show", "--config", str(bad), env={"HOME": str(tmp_path)}, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"nvrx: error: unknown key 'slurm.partiton' in {bad}. Did you mean 'slurm.partition'?"
    ]

    proc = run(
        "config", "show", env={"NVRX_COLD_SPARES": "-1", "HOME": str(tmp_path)}, cwd=tmp_path
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "chain.cold_spares: '-1' (from env NVRX_COLD_SPARES)" in proc.stderr


def test_config_env_lists_canonical_and_upstream_names() -> None:
    proc = run("config", "env", "--json")
    assert proc.returncode == 0
    mapping = json.loads(proc.stdout)["names"]
    assert mapping["inject.batch_size"] == ["NVRX_INJECT_BATCH_SIZE", "BATCH_SIZE"]
    assert mapping["chain.train_tasks"] == ["NVRX_CHAIN_TRAIN_TASKS", "NVRX_TRAIN_TASKS"]


def test_the_documented_mapping_table_is_exactly_the_code_table() -> None:
    from nvrx.config import ENV_ALIASES

    readme = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    rows = [ln for ln in readme.splitlines() if ln.startswith("| `") and ln.endswith("` |")]
    documented = [tuple(cell.strip(" `") for cell in ln.strip("|").split("|")) for ln in rows]
    assert documented == list(ENV_ALIASES)


def test_api_keys_never_reach_the_output(tmp_path: Path) -> None:
    env = {"JUDGE_API_KEY": "sk-live-123", "HOME": str(tmp_path)}
    for args in (("config", "show"), ("config", "show", "--json")):
        proc = run(*args, env=env, cwd=tmp_path)
        assert proc.returncode == 0
        assert "sk-live-123" not in proc.stdout + proc.stderr
        assert "<hidden>" in proc.stdout


def test_markup_in_values_is_shown_as_typed(tmp_path: Path) -> None:
    proc = run(
        "config",
        "show",
        "--set",
        "chain.fault_types=[/x]",
        env={"HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[/x]" in proc.stdout


def test_list_pool_shows_the_default_pool_before_any_sbatch_script_exists(tmp_path: Path) -> None:
    # The README's first look at a campaign: llama4_scout's script is the user's to provide.
    proc = run("inject-loop", "--list-pool", "--pool", "default", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in map(str.split, proc.stdout.splitlines()) if r and r[0] != "#"]
    assert len(rows) == 34
    assert rows[0][1:5] == ["GPU_SLEEP", "1", "5", "2"]


def test_user_text_prints_literally_never_as_markup_or_emoji(tmp_path: Path) -> None:
    # rich would print `:-1:` as a thumbs-down and `:x:` as a cross, and eat `[bold]`.
    for entry in ("SIGKILL:-1:5:2", "SIGKILL:x:5:2"):
        proc = run("inject-loop", "--pool", entry, "--dry-run", cwd=tmp_path)
        assert proc.returncode == 2 and f"'{entry}'" in proc.stderr, proc.stderr
    model = "[bold]:x:[/bold]:-1:"
    proc = run("config", "show", "--set", f"inject.llm_model={model}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert model in proc.stdout


def test_help_prints_its_text_literally() -> None:
    proc = run("analyze", "log", "--help")
    assert proc.returncode == 0
    assert "[rankN]:" in " ".join(proc.stdout.split())  # not eaten as a rich style tag
    assert not any(ord(c) > 0x2FFF for c in proc.stdout)  # box drawing, never an emoji


def test_nvrx_help_imports_no_subcommand_and_no_settings_model() -> None:
    # `nvrx --help` must feel instant: it lists the subcommands without importing them.
    probe = (
        "import contextlib, io, sys\n"
        "sys.argv = ['nvrx', '--help']\n"
        "from nvrx.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main()\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(proc.stdout.split())
    heavy = {"nvrx.config", "nvrx.chain", "nvrx.watch", "nvrx.inject", "nvrx.score", "nvrx.slurm"}
    assert not {
        m for m in loaded if m.split(".")[0] == "nvrx" and ".".join(m.split(".")[:2]) in heavy
    }
    assert "pydantic" not in loaded and "yaml" not in loaded and "httpx" not in loaded


def _complete(words: str, tmp_path: Path) -> list[str]:
    """What bash completion offers for `words` (the last word being completed)."""
    env = {**os.environ, "_NVRX_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split(" ")) - 1), "HOME": str(tmp_path)}  # fmt: skip
    for name in [n for n in env if n.startswith("NVRX_") and n != "NVRX_REQUIRE_SLURM"]:
        del env[name]
    # The installed entry point: completion is keyed on the program's name (`_NVRX_COMPLETE`).
    script = Path(sys.executable).parent / "nvrx"
    proc = subprocess.run([script], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_completion_offers_subcommands_options_pools_and_workloads(tmp_path: Path) -> None:
    assert _complete("nvrx wa", tmp_path) == ["watch"]
    assert "--batch-size" in _complete("nvrx inject-loop --ba", tmp_path)
    assert _complete("nvrx inject-loop --pool ", tmp_path) == ["default", "n3_super", "quick"]
    assert "cpu_fault_demo" in _complete("nvrx inject-loop --workload ", tmp_path)
    assert _complete("nvrx inject-loop --workload cpu", tmp_path) == ["cpu_fault_demo"]


def test_a_subcommand_builds_its_own_options_only() -> None:
    # `nvrx watch` pays for watch's command line, not for inject-loop's or score's.
    probe = (
        "import contextlib, io, sys\n"
        "sys.argv = ['nvrx', 'watch', '--help']\n"
        "from nvrx.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main()\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(proc.stdout.split())
    assert "nvrx.cli.watch" in loaded
    assert not {"nvrx.cli.inject", "nvrx.cli.score", "nvrx.cli.chain"} & loaded


HELP_PAGES = [
    [], ["config"], ["config", "show"], ["config", "env"], ["submit-chain"], ["watch"],
    ["inject-loop"], ["analyze"], ["analyze", "fr"], ["analyze", "log"], ["report"], ["score"],
]  # fmt: skip


def test_a_bare_group_prints_its_help_and_succeeds(tmp_path: Path) -> None:
    for group in ([], ["config"], ["analyze"]):
        proc = run(*group, env={"HOME": str(tmp_path)}, cwd=tmp_path)
        assert proc.returncode == 0, (group, proc.stderr)
        assert proc.stdout.startswith(f"Usage: nvrx {' '.join(group)}".rstrip() + " [OPTIONS]")
        assert "Commands:" in proc.stdout and proc.stderr == ""


def test_help_names_values_not_python_types_and_completion_is_on_the_root_only(
    tmp_path: Path,
) -> None:
    for page in HELP_PAGES:
        text = run(*page, "--help", env={"HOME": str(tmp_path)}, cwd=tmp_path).stdout
        for leak in ("<str>", "<int>", "<path>", "<file>", "<list[", "<float>", "[[", "{"):
            assert leak not in text, (page, leak)
        assert ("--install-completion" in text) == (page == []), page
    watch = run("watch", "--help", env={"HOME": str(tmp_path)}, cwd=tmp_path).stdout
    assert "--platform slurm|none" in watch and "[JOB_ID|PATH]..." in watch
    inject = run("inject-loop", "--help", env={"HOME": str(tmp_path)}, cwd=tmp_path).stdout
    assert "node-aware|strict|barrier" in inject


def _metavars(text: str) -> list[str]:
    """The value names of a help page: each option's and each argument's."""
    import re

    names = re.findall(r"^  (?:-\w, )?--[\w-]+(?:, --[\w-]+)* ([^\s]+)", text, re.M)
    if "Arguments:" in text:
        section = text.split("Arguments:", 1)[1].split("\n\n", 1)[0]
        names += re.findall(r"^  (\S+)", section, re.M)
    return names


def test_every_value_is_named_in_capitals_for_what_it_is(tmp_path: Path) -> None:
    pages: dict[str, str] = {}
    for page in HELP_PAGES:
        text = run(*page, "--help", env={"HOME": str(tmp_path)}, cwd=tmp_path).stdout
        pages[" ".join(page)] = text
        for name in _metavars(text):  # capitals, or the choices themselves (slurm|none)
            assert name == name.upper() or "|" in name, (page, name)
    wanted = {
        "watch": ["--work-dir DIR", "--state-dir DIR", "--prom-file FILE",
                  "--pd-routing-key-file FILE"],
        "submit-chain": ["--work-dir DIR", "--launcher COMMAND"],
        "inject-loop": ["--base-dir DIR", "--sbatch-script FILE", "--resume SESSION",
                        "--reanalyze SESSION", "--rerun-failing SESSION", "--next SESSION",
                        "--workload NAME"],
        "analyze log": ["analyze log [OPTIONS] FILE", "  FILE  A job log"],
        "analyze fr": ["  PATH  A dump directory"],
        "score": ["score [OPTIONS] [DIR]...", "  DIR  Session or experiment", "--run-valid true|false"],
    }  # fmt: skip
    for command, pieces in wanted.items():
        for piece in pieces:
            assert piece in pages[command], (command, piece)


def test_an_unknown_command_is_one_line_that_names_it_once(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    for args, line in [
        (["frobnicate"], "nvrx: error: no such command 'frobnicate' (see nvrx --help)"),
        (["analyze", "xyz"], "nvrx: error: no such command 'xyz' in nvrx analyze "
                             "(see nvrx analyze --help)"),
    ]:  # fmt: skip
        proc = run(*args, env=env, cwd=tmp_path)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n")


def test_a_group_lists_each_command_with_its_whole_first_line(tmp_path: Path) -> None:
    text = run("analyze", "--help", env={"HOME": str(tmp_path)}, cwd=tmp_path).stdout
    listing = " ".join(text.split("Commands:", 1)[1].split())
    assert "..." not in listing
    assert (
        "fr Missing ranks from NCCL flight-recorder dumps, torch-free (upstream's table or "
        "JSON)." in listing
    )
    assert (
        "log The built-in log attribution (logsage's 5-field text): root rank, fault class, "
        "decision." in listing
    )


def test_a_mistyped_command_or_setting_gets_the_closest_name(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    proc = run("wach", env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "nvrx: error: no such command 'wach'. Did you mean 'watch'?\n"
    proc = run("config", "shw", env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == (
        "nvrx: error: no such command 'shw' in nvrx config. Did you mean 'show'?\n"
    )
    proc = run("config", "show", "--set", "watch.storm_cycle=3", env=env, cwd=tmp_path)
    assert proc.stderr.strip() == (
        "nvrx: error: unknown key 'watch.storm_cycle' (from --set). "
        "Did you mean 'watch.storm_cycles'?"
    )
    proc = run("watch", "--job-nme", "x", env=env, cwd=tmp_path)
    assert "--job-name" in proc.stderr and proc.returncode == 2


def test_detector_descriptions_are_whole_sentences(tmp_path: Path) -> None:
    proc = run("watch", "--list-detectors", env={"HOME": str(tmp_path)}, cwd=tmp_path)
    lines = proc.stdout.splitlines()
    assert len(lines) >= 10
    for line in lines:
        assert line.rstrip().endswith((".", ")")), line


def test_a_shared_environment_name_never_breaks_a_command_that_only_reads(
    tmp_path: Path,
) -> None:
    # GNU time reads TIME (TIME=%e is common in shell profiles); nvrx reads it as upstream's
    # inject.time_limit. A read-only command warns and goes on; one that submits refuses.
    env = {"HOME": str(tmp_path), "TIME": "%e"}
    shown = run("config", "show", "--json", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr.strip() == (
        "nvrx: warning: ignoring TIME='%e' from the environment: not a valid inject.time_limit"
    )
    watched = run("watch", "--platform", "none", "--work-dir", str(tmp_path / "w"),
                  "--state-dir", str(tmp_path / "s"), env=env, cwd=tmp_path)  # fmt: skip
    assert "ignoring TIME=" in watched.stderr and "bad value" not in watched.stderr
    submitted = run("inject-loop", "--dry-run", env=env, cwd=tmp_path)
    assert submitted.returncode == 2 and "bad value for inject.time_limit: '%e'" in submitted.stderr
    # nvrx's own names stay strict everywhere.
    strict = run("config", "show", env={"HOME": str(tmp_path), "NVRX_WATCH_STORM_CYCLES": "x"},
                 cwd=tmp_path)  # fmt: skip
    assert strict.returncode == 2


def test_every_error_of_nvrx_carries_its_exit_code_and_nothing_else_does() -> None:
    from nvrx.analyze.fr import FrError
    from nvrx.campaign.errors import JournalError, PoolError
    from nvrx.chain.shape import ChainError
    from nvrx.cli import exit_code_of
    from nvrx.config import ConfigError
    from nvrx.files import InputError
    from nvrx.score.model import ScoreError
    from nvrx.slurm import SlurmError, SlurmUnavailable, SlurmValueError
    from nvrx.terminal import CommandError
    from nvrx.watch.fleet import FleetError
    from nvrx.watch.resolve import WatchBlind

    bad_input = [ConfigError("x"), InputError("log", Path("f"), "unreadable"), PoolError("x"), JournalError("x"),
                 ScoreError("x"), SlurmValueError("x"), FrError("x"), ChainError("x"),
                 FleetError("x"), CommandError("x")]  # fmt: skip
    assert [exit_code_of(e) for e in bad_input] == [2] * len(bad_input)
    assert exit_code_of(SlurmError("x")) == exit_code_of(SlurmUnavailable("x")) == 1
    assert exit_code_of(CommandError("x", 1)) == 1
    assert exit_code_of(WatchBlind("x")) == 3

    class Foreign(Exception):
        exit_code = 2

    # Not nvrx's: a bug or a library's error keeps its traceback.
    assert exit_code_of(Foreign()) is None
    assert exit_code_of(ValueError("x")) is None

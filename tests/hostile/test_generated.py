"""Generated hostile inputs (hypothesis) for the parsers and the commands that read them: config
YAML, user.env, pool entries, cycle-info files, FR dumps and tables, job logs, journals and
judge replies. Whatever comes in: never a traceback, exit 0 or 2 (1 and 3 where the command
has them), one error line on 2, within the budget; a command that only reads never writes.

Example counts are kept small so the suite stays fast in CI; NVRX_HOSTILE_EXAMPLES raises them
for a longer local run."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from nvrx.analyze import fr as fr_analyzer
from nvrx.analyze.logattr import attribute_log
from nvrx.campaign.errors import PoolError
from nvrx.campaign.pool import FaultType, build_pool
from nvrx.campaign.poolfile import pool_entries
from nvrx.config import FIELDS, SECTIONS, ConfigError
from nvrx.config.load import read_config_text
from nvrx.config.shellwords import parse_env_file
from nvrx.config.yamlfile import yaml_settings
from nvrx.score.prompt import AnswerError, parse_answer
from nvrx.watch.cycleformat import REQUIRED_KEYS, CycleParseError, parse_cycle_info

from ..test_watch_watcher import cycle_file
from .harness import (
    Result,
    assert_no_traceback,
    assert_ok_or_one_line_error,
    assert_unchanged,
    call_in_child,
    run_nvrx,
    tree_state,
)
from .inputs import HUGE, FakeOpenAI, Reply, damage_journal_line, good, session_with_two

EXAMPLES = int(os.environ.get("NVRX_HOSTILE_EXAMPLES", "15"))
HOSTILE = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    # CI runs the same examples every time (a landing must not depend on the draw); a
    # developer's runs draw new ones.
    derandomize=bool(os.environ.get("CI")),
    # No shrinking: each step is a fork under a wall budget, and a hang found would be re-run
    # for minutes; the falsifying example is reported as generated.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
WALL = 10.0
_HUGE_MARK = "__HUGE_NUMBER__"


def fresh_dir(tmp_path: Path) -> Path:
    """A directory of its own for one generated example (tmp_path is shared by all of them)."""
    return Path(tempfile.mkdtemp(dir=tmp_path))


def with_huge_numbers(doc: Any) -> str:
    """JSON text of `doc` in which every _HUGE_MARK string became a 5,000-digit number (json.dumps
    itself cannot write one)."""
    return json.dumps(doc).replace(f'"{_HUGE_MARK}"', HUGE)


def expect_one_line(result: Result) -> None:
    """A pure function's outcome: it returned (0), or raised its own error (2) whose message is
    one non-empty line."""
    assert_no_traceback(result)
    if result.code == 2:
        message = result.stderr.rstrip("\n")
        assert message and "\n" not in message, result.describe()


# --- building blocks ------------------------------------------------------------------------

numbers = st.one_of(
    st.integers(min_value=-5, max_value=64),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.just(_HUGE_MARK),
)
words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
scalars = st.one_of(st.none(), st.booleans(), numbers, words, st.floats(allow_nan=True))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3),
    max_leaves=8,
)


# --- config YAML ----------------------------------------------------------------------------

_SETTING_NAMES = [*sorted({key.split(".", 1)[1] for key in FIELDS}), "nope"]
yaml_docs = st.dictionaries(
    st.sampled_from([*SECTIONS, "bogus"]),
    st.none() | st.dictionaries(st.sampled_from(_SETTING_NAMES), values, max_size=4),
    max_size=3,
)
yaml_noise = st.text(alphabet="slurm:chain: \n-[]{}&*!|>'\"#%@`,?0123456789abc", max_size=120)
yaml_texts = st.one_of(
    yaml_docs.map(lambda d: yaml.safe_dump(d).replace(f"'{_HUGE_MARK}'", HUGE)),
    yaml_noise,
    st.tuples(yaml_docs, yaml_noise).map(lambda t: yaml.safe_dump(t[0]) + t[1]),
)


@HOSTILE
@given(text=yaml_texts)
def test_generated_config_files(tmp_path: Path, text: str) -> None:
    where = fresh_dir(tmp_path)
    config = where / "nvrx.yaml"
    config.write_text(text)
    expect_one_line(
        call_in_child(
            lambda: yaml_settings(read_config_text(config, "config file"), config),
            (ConfigError,),
            label="yaml_settings",
            cwd=where,
        )
    )
    proc = run_nvrx("config", "show", "--config", str(config), cwd=where, wall=WALL)
    assert_ok_or_one_line_error(proc)


# --- user.env -------------------------------------------------------------------------------

env_names = st.sampled_from(
    ["A", "B", "export A", "NVRX_WATCH_USER", "NVRX_SLURM_PARTITION", "JUDGE_MODEL", "POOL", "1X"]
)
env_values = st.text(alphabet="ab$_{}:-'\"\\ #`()=x09AB", max_size=40)
env_lines = st.one_of(
    st.builds(lambda n, v: f"{n}={v}", env_names, env_values),
    st.text(alphabet="ab$={}#' \t", max_size=20),
)
env_texts = st.one_of(
    st.lists(env_lines, max_size=6).map("\n".join),
    st.integers(0, 120).map(lambda d: "NVRX_WATCH_USER=" + "${A:-" * d + "x" + "}" * d),
    st.integers(0, 30).map(lambda n: "A=xy\n" + "A=$A$A\n" * n + "NVRX_WATCH_USER=$A"),
)


@HOSTILE
@given(text=env_texts)
def test_generated_user_env_files(tmp_path: Path, text: str) -> None:
    where = fresh_dir(tmp_path)
    expect_one_line(
        call_in_child(
            lambda: parse_env_file(text, {}, "user.env"),
            (ConfigError,),
            label="parse_env_file",
            cwd=where,
        )
    )
    env_file = where / "user.env"
    env_file.write_text(text + "\n")
    proc = run_nvrx("config", "show", "--env-file", str(env_file), cwd=where, wall=WALL)
    assert_ok_or_one_line_error(proc)


# --- pool entries ---------------------------------------------------------------------------

pool_numbers = st.one_of(
    st.integers(-3, 40).map(str), st.integers(0, 10**30).map(str), st.just(HUGE)
)
faults = st.sampled_from([f.value for f in FaultType] + ["segfault", "BOOM", ""])
pool_entry = st.one_of(
    st.builds(
        lambda f, r, i, n: f"{f}:{r}:{i}:{n}", faults, pool_numbers, pool_numbers, pool_numbers
    ),
    st.text(alphabet="SEGFAULT:0123456789-_", max_size=20),
)
pool_texts = st.tuples(
    st.lists(pool_entry, max_size=5), st.sampled_from([" ", ",", "\n", " # note\n", ", "])
).map(lambda t: t[1].join(t[0]))


def _build_pool(text: str) -> None:
    build_pool(pool_entries(text), gpus_per_node=4, min_nodes=1, workload="w")


@HOSTILE
@given(text=pool_texts)
def test_generated_pool_entries(tmp_path: Path, text: str) -> None:
    where = fresh_dir(tmp_path)
    expect_one_line(call_in_child(lambda: _build_pool(text), (PoolError,), label="pool", cwd=where))
    proc = run_nvrx("inject-loop", "--list-pool", "--pool", text, cwd=where, wall=WALL)
    assert_ok_or_one_line_error(proc)


# --- cycle-info files -----------------------------------------------------------------------

_GOOD_CYCLE: dict[str, Any] = {
    "job_id": "900",
    "attempt_index": 0,
    "cycle_number": 1,
    "cycle_start_time": "2026-11-29T10:00:00.000000Z",
    "cycle_end_time": "",
    "cycle_log_file": "",
    "active_nodes": "n[1-2]",
    "standby_nodes": "n3",
    "generation": "0",
    "active_ranks": "0-1",
}
cycle_values = st.one_of(
    values,
    st.sampled_from(["n[1-99999999]", "n[", "2026-13-40T99:00:00Z", "-1", "1" * 30]),
)
cycle_docs = st.fixed_dictionaries(
    {},
    optional={key: st.just(_GOOD_CYCLE[key]) | cycle_values for key in REQUIRED_KEYS},
)
cycle_names = st.one_of(
    st.just("cycle_info.900.0.1"),
    st.text(alphabet="cycle_info.90\n\x1b[]31m;\x07\t é", min_size=1, max_size=40),
    st.binary(min_size=1, max_size=40).map(lambda b: "cycle_info." + os.fsdecode(b)),
).filter(
    lambda n: (
        "/" not in n and "\x00" not in n and n not in (".", "..") and len(os.fsencode(n)) < 250
    )
)


@HOSTILE
@given(doc=cycle_docs, name=cycle_names, raw=st.booleans())
def test_generated_cycle_info_files(
    tmp_path: Path, doc: dict[str, Any], name: str, raw: bool
) -> None:
    where = fresh_dir(tmp_path)
    text = with_huge_numbers(doc) if not raw else with_huge_numbers(doc)[: len(name)]
    expect_one_line(
        call_in_child(
            lambda: parse_cycle_info(text, name), (CycleParseError,), label="parse", cwd=where
        )
    )
    work = where / "w"
    cycle_file(work, "900", 0, datetime.now(UTC) - timedelta(hours=1), None)
    (work / "nvrx" / "900" / "cycle_infos" / name).write_text(text)
    for fmt in ([], ["--json"]):
        proc = run_nvrx(
            "watch", "--platform", "none", "--work-dir", str(work), "--state-dir",
            str(where / "state"), *fmt, cwd=where, wall=WALL,
        )  # fmt: skip
        assert_no_traceback(proc)
        assert proc.code in (0, 1, 3), proc.describe()
        assert len(proc.stderr.splitlines()) <= 1, proc.describe()
        assert b"\x1b" not in proc.stdout_bytes and b"\x07" not in proc.stdout_bytes
    for log in (where / "state").rglob("watch.log"):
        data = log.read_bytes()
        assert b"\x1b" not in data and b"\x07" not in data


# --- FR dumps and FR tables -----------------------------------------------------------------

ranks_text = st.one_of(
    st.lists(st.integers(-2, 9), max_size=4).map(lambda r: str(r)),
    st.just(f"[0, {HUGE}]"),
    words,
)
fr_entries = st.fixed_dictionaries(
    {},
    optional={
        "collective_seq_id": numbers,
        "p2p_seq_id": numbers,
        "pg_id": numbers,
        "process_group": st.lists(words, max_size=3) | values,
        "profiling_name": st.sampled_from(["nccl:all_reduce", "nccl:send 0->1", "nccl:recv 1<-0"])
        | values,
        "state": st.sampled_from(["scheduled", "completed"]) | values,
        "input_sizes": st.lists(st.lists(numbers, max_size=2), max_size=2) | values,
        "input_dtypes": st.lists(words, max_size=2) | values,
    },
)
fr_docs = st.fixed_dictionaries(
    {},
    optional={
        "pg_config": st.dictionaries(
            st.sampled_from(["0", "1", "x"]),
            st.fixed_dictionaries({"desc": words | values, "ranks": ranks_text | values}),
            max_size=2,
        )
        | values,
        "pg_status": st.dictionaries(
            st.sampled_from(["0", "1", "-1", "x"]),
            st.dictionaries(
                st.sampled_from(["last_enqueued_collective", "last_completed_collective"]),
                numbers,
            ),
            max_size=2,
        )
        | values,
        "entries": st.lists(fr_entries, max_size=4) | values,
    },
)


@HOSTILE
@given(docs=st.lists(fr_docs, min_size=1, max_size=3))
def test_generated_fr_dumps(tmp_path: Path, docs: list[dict[str, Any]]) -> None:
    where = fresh_dir(tmp_path)
    dumps = where / "dumps"
    dumps.mkdir()
    for rank, doc in enumerate(docs):
        (dumps / f"_dump_{rank}").write_text(with_huge_numbers(doc))
    expect_one_line(
        call_in_child(
            lambda: fr_analyzer.analyze_path(dumps),
            (fr_analyzer.FrError,),
            label="analyze_path",
            cwd=where,
        )
    )
    for fmt in ([], ["--json"]):
        proc = run_nvrx("analyze", "fr", str(dumps), *fmt, cwd=where, wall=WALL)
        assert_ok_or_one_line_error(proc)


fr_table_rows = st.lists(
    st.lists(st.one_of(words, pool_numbers, st.just("0,1,2"), st.just(" ")), max_size=7).map(
        " | ".join
    ),
    max_size=4,
)


@HOSTILE
@given(rows=fr_table_rows)
def test_generated_fr_tables_in_a_session(tmp_path: Path, rows: list[str]) -> None:
    session = session_with_two(fresh_dir(tmp_path))
    header = "PGID | Process Group Desc | Op Type | Size | Dtype | Missing Ranks\n"
    (session / "n2_SEGFAULT_r3_i5" / "analysis" / "fr_analysis.txt").write_text(
        header + "\n".join(rows) + "\n"
    )
    before = tree_state(session)
    proc = run_nvrx("score", str(session), "--json", cwd=session.parent, wall=WALL)
    assert_ok_or_one_line_error(proc, ok=(0, 1, 3))
    assert_unchanged(before, session)


# --- job logs -------------------------------------------------------------------------------

labels = st.one_of(st.integers(0, 40).map(str), st.just(HUGE), st.just(" 3"), st.just(""))
log_bodies = st.one_of(
    st.sampled_from(
        [
            "iteration 5 / 100",
            "Fatal Python error: Segmentation fault",
            "Traceback (most recent call last):",
            '  File "train.py", line 3, in step',
            "    raise RuntimeError('x')",
            "RuntimeError: x",
            "Watchdog caught collective operation timeout",
            "Ranks missing from collective: [1, 2]",
            "CUDA error: an illegal memory access was encountered",
            "srun: error: n1: task 0-1048000: Segmentation fault",
            "srun: error: n1: tasks 0-3,7: Exited with exit code 1",
            "srun: StepId=5.0 tasks 0-1048575: running",
            f"srun: error: n2: task {HUGE}: Killed",
            f"rank {HUGE} crashed",
        ]
    ),
    words,
)
log_lines = st.builds(lambda label, body: f"{label}: {body}" if label else body, labels, log_bodies)
log_texts = st.lists(log_lines, max_size=25).map("\n".join)


@HOSTILE
@given(text=log_texts)
def test_generated_job_logs(tmp_path: Path, text: str) -> None:
    where = fresh_dir(tmp_path)
    expect_one_line(
        call_in_child(lambda: attribute_log(text), (), label="attribute_log", cwd=where, wall=5.0)
    )
    log = where / "job.log"
    log.write_text(text)
    for fmt in ([], ["--json"]):
        proc = run_nvrx("analyze", "log", str(log), *fmt, cwd=where, wall=5.0)
        assert_no_traceback(proc, stdout=False)  # the answer quotes the log's own tracebacks
        assert proc.code == 0, proc.describe()


# --- journals -------------------------------------------------------------------------------

journal_events = st.fixed_dictionaries(
    {"event": st.sampled_from(["session", "planned", "submitted", "ended", "analysed", "boom"])},
    optional={
        "index": numbers | values,
        "fault": faults | values,
        "rank": numbers,
        "iter": numbers,
        "nodes": numbers,
        "job_id": numbers | values,
        "at": st.just("2026-01-01T00:00:00+00:00") | values,
        "verdict": values,
        "spec": values,
    },
)
journal_lines = st.one_of(
    journal_events.map(with_huge_numbers).map(str.encode),
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")),
    st.text(max_size=60).map(lambda t: t.replace("\n", "").encode("utf-8", "surrogatepass")),
)


@HOSTILE
@given(line=st.integers(1, 9), text=journal_lines)
def test_generated_journal_lines(tmp_path: Path, line: int, text: bytes) -> None:
    session = session_with_two(fresh_dir(tmp_path))
    damage_journal_line(session, line, text)
    before = tree_state(session)
    for args in (["report", str(session)], ["report", str(session), "--json"]):
        proc = run_nvrx(*args, cwd=session.parent, wall=WALL)
        assert_ok_or_one_line_error(proc)
    proc = run_nvrx("score", str(session), cwd=session.parent, wall=WALL)
    assert_ok_or_one_line_error(proc, ok=(0, 1, 3))
    assert_unchanged(before, session)


# --- judge replies --------------------------------------------------------------------------

reply_texts = st.one_of(
    st.text(alphabet='{}[]":, \n`<>/thinkrestaupfl_notes', max_size=200),
    st.integers(1, 60_000).map(lambda n: "{ " * n),
    st.integers(1, 20_000).map(lambda n: '{"a": ' * n),
    st.dictionaries(st.sampled_from(["restart_correct", "rank_any", "notes", "x"]), values).map(
        with_huge_numbers
    ),
)


@pytest.fixture(scope="module")
def judge() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@HOSTILE
@given(text=reply_texts)
def test_generated_judge_replies(tmp_path: Path, judge: FakeOpenAI, text: str) -> None:
    where = fresh_dir(tmp_path)
    expect_one_line(
        call_in_child(lambda: parse_answer(text), (AnswerError,), label="parse", cwd=where, wall=3)
    )
    judge.default = Reply(content=text)
    proc = run_nvrx(
        "score", "--fault-type", "SEGFAULT", "--rank", "1", "--iter", "3", "--nodes", "1",
        "--log-output", good(1, "Segmentation fault"), "--judge", "llm",
        "--base-url", judge.base_url, "--no-cache", "--set", "score.max_retries=0",
        cwd=where, wall=WALL,
    )  # fmt: skip
    assert_no_traceback(proc)
    assert proc.code in (0, 3), proc.describe()

"""The flight-recorder analyzer: upstream's missing ranks and table rows on real traces, the
same answer from JSON dumps, and a one-line typed error (never a traceback, never code run) for
any file it cannot use."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import re
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from nvrx.analyze import fr

from .conftest import REPO
from .conftest import SCORE_DEMO as CPU_SESSION

# The real trace sets live in the project's shared/ folder, beside the checkout. When
# NVRX_FR_TRACES names them (.ci/run does), they must be there: CI never passes by skipping.
TRACES = Path(os.environ.get("NVRX_FR_TRACES") or REPO.parent / "shared" / "data" / "fr_traces")
if os.environ.get("NVRX_FR_TRACES") and not TRACES.is_dir():
    raise pytest.UsageError(f"NVRX_FR_TRACES={TRACES} is not a directory")
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason=f"no FR trace sets at {TRACES}")
# A real session of the CPU fault workload on the local cluster (docs/score.md's scoring demo).
CPU_SETS = sorted(p.parent.name for p in CPU_SESSION.glob("*/checkpoints"))


def cpu_dumps(experiment: str) -> Path:
    return CPU_SESSION / experiment / "checkpoints"


# what upstream's CollectiveAnalyzer printed for the two shared sets (upstream_reference.txt)
UPSTREAM = {
    "gpu_error_1st": ["74", "EXPERT_MODEL_PARALLEL_GROUP,0", "nccl:all_to_all", "4027x5120",
                      "BFloat16", "12"],
    "lock_gil_1st": ["72", "EXPERT_MODEL_PARALLEL_GROUP,0", "nccl:all_to_all", "2048x5120",
                     "BFloat16", "9,14"],
}  # fmt: skip


def table_rows(text: str) -> list[list[str]]:
    """Rows as the table's consumers read them: split on `|`, cells stripped, header skipped."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[0].split("|")[0].strip() == "PGID"
    return [[cell.strip() for cell in line.split("|")] for line in lines[1:]]


def injected_rank(experiment: str) -> int:
    match = re.search(r"_r(\d+)_", experiment)
    assert match, experiment
    return int(match[1])


def read_pickle(path: Path) -> Any:
    return pickle.loads(path.read_bytes())  # trusted fixture data


def copy_dumps(src: Path, dst: Path, skip: Collection[int] = ()) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.glob("_dump_*"):
        if fr.rank_of(path) not in skip:
            shutil.copy(path, dst / path.name)
    return dst


# --- the shared real traces (16-rank Megatron runs) -----------------------------------------------


@needs_traces
@pytest.mark.parametrize(
    ("trace_set", "ranks"), [("gpu_error_1st", (12,)), ("lock_gil_1st", (9, 14))]
)
def test_real_traces_give_upstreams_missing_ranks(trace_set: str, ranks: tuple[int, ...]) -> None:
    result = fr.analyze_path(TRACES / trace_set)
    assert not result.no_dumps
    assert result.dump_ranks == tuple(range(16))
    assert result.missing_ranks == ranks
    assert result.wavefront_exact


@needs_traces
@pytest.mark.parametrize("trace_set", sorted(UPSTREAM))
def test_real_traces_give_upstreams_table_rows(trace_set: str) -> None:
    text = fr.table(fr.analyze_path(TRACES / trace_set))
    reference = (TRACES / trace_set / "upstream_reference.txt").read_text()
    assert table_rows(text) == table_rows(reference) == [UPSTREAM[trace_set]]
    assert text.splitlines()[0] == reference.splitlines()[0] == fr.HEADER
    assert text == reference  # byte for byte, upstream's odd padding included


@needs_traces
def test_only_the_wavefront_head_is_reported_of_all_groups_missing_ranks() -> None:
    gpu_error = fr.analyze_path(TRACES / "gpu_error_1st")
    assert [g.name for g in gpu_error.groups_with_missing] == ["74", "41", "58", "69", "94"]
    assert all(g.missing == {12} for g in gpu_error.groups_with_missing)
    lock_gil = fr.analyze_path(TRACES / "lock_gil_1st")
    assert len(lock_gil.groups_with_missing) == 12
    assert sum(g.send_recv for g in lock_gil.groups_with_missing) == 8  # pipeline sends
    assert [g.name for g in lock_gil.reported] == ["72"]


@needs_traces
def test_json_form_lists_the_reported_groups_and_ranks() -> None:
    doc = fr.to_json(fr.analyze_path(TRACES / "lock_gil_1st"))
    assert doc == {
        "groups": [
            {
                "name": "72",
                "desc": "EXPERT_MODEL_PARALLEL_GROUP",
                "window": 0,
                "op": "nccl:all_to_all",
                "size": "2048x5120",
                "dtype": "BFloat16",
                "missing": [9, 14],
            }
        ],
        "ranks": [9, 14],
    }
    json.dumps(doc)  # plain data


@needs_traces
@pytest.mark.parametrize("rank", range(16))
def test_a_rank_whose_dump_is_gone_is_missing_from_its_groups(tmp_path: Path, rank: int) -> None:
    result = fr.analyze_path(copy_dumps(TRACES / "gpu_error_1st", tmp_path, skip={rank}))
    assert rank not in result.dump_ranks
    assert any(rank in g.missing for g in result.groups_with_missing)


@needs_traces
def test_path_budget_exceeded_reports_every_group_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fr, "MAX_PATHS", 1)
    result = fr.analyze_path(TRACES / "lock_gil_1st")
    assert not result.wavefront_exact and result.notes
    assert [g.name for g in result.reported] == ["37", "38", "64", "72"]
    assert result.missing_ranks == (9, 14)


# --- the project's CPU fault workload (4 ranks; the faulted rank wrote no dump) -------------------


@pytest.mark.parametrize("experiment", CPU_SETS)
def test_cpu_workload_traces_name_the_faulted_rank(experiment: str) -> None:
    result = fr.analyze_path(cpu_dumps(experiment))
    rank = injected_rank(experiment)
    assert rank not in result.dump_ranks and len(result.dump_ranks) == 3
    assert result.missing_ranks == (rank,)
    assert table_rows(fr.table(result)) == [
        ["5", "DATA_PARALLEL_GROUP,0", "nccl:all_reduce", "2097152", "BFloat16", str(rank)]
    ]


def test_cpu_workload_expectations_cover_the_four_experiments() -> None:
    assert {injected_rank(e) for e in CPU_SETS} == {0, 1, 2, 3}
    assert len(CPU_SETS) == 4


@pytest.mark.parametrize("experiment", CPU_SETS)
def test_every_rank_without_a_dump_is_missing(tmp_path: Path, experiment: str) -> None:
    present = [fr.rank_of(p) for p in (cpu_dumps(experiment)).glob("_dump_*")]
    for n_removed in (1, 2):
        for removed in itertools.combinations(present, n_removed):
            work = copy_dumps(cpu_dumps(experiment), tmp_path / "-".join(map(str, removed)),
                              skip=set(removed))  # fmt: skip
            absent = sorted(set(range(4)) - set(present) | set(removed))
            assert fr.analyze_path(work).missing_ranks == tuple(absent)


def test_nothing_missing_gives_just_the_header(tmp_path: Path) -> None:
    one = (cpu_dumps(CPU_SETS[0]) / "_dump_0").read_bytes()
    for rank in range(4):
        (tmp_path / f"_dump_{rank}").write_bytes(one)  # four ranks in lockstep
    result = fr.analyze_path(tmp_path)
    assert result.dump_ranks == (0, 1, 2, 3) and not result.no_dumps
    assert result.missing_ranks == ()
    assert fr.table(result) == fr.HEADER + "\n"
    assert fr.to_json(result) == {"groups": [], "ranks": []}


# --- file forms: pickle or JSON, directory, file, prefix ------------------------------------------


@pytest.mark.parametrize("suffix", ["", ".json"])
@pytest.mark.parametrize(
    "source", [*(f"shared:{s}" for s in sorted(UPSTREAM)), f"cpu:{CPU_SETS[0]}"]
)
def test_json_dumps_give_the_same_result_as_pickles(
    tmp_path: Path, source: str, suffix: str
) -> None:
    kind, name = source.split(":")
    if kind == "shared" and not TRACES.is_dir():
        pytest.skip(f"no FR trace sets at {TRACES}")
    src = TRACES / name if kind == "shared" else cpu_dumps(name)
    for path in src.glob("_dump_*"):
        doc = read_pickle(path)  # tuples become lists, as a JSON dump has them
        (tmp_path / f"{path.name}{suffix}").write_text(json.dumps(doc))
    from_json = fr.analyze_path(tmp_path)
    from_pickle = fr.analyze_path(src)
    assert fr.table(from_json) == fr.table(from_pickle)
    assert fr.to_json(from_json) == fr.to_json(from_pickle)
    assert from_json.dump_ranks == from_pickle.dump_ranks


def test_json_is_recognised_by_content_even_with_a_byte_order_mark(tmp_path: Path) -> None:
    for path in (cpu_dumps("n2_SEGFAULT_r1_i3")).glob("_dump_*"):
        text = json.dumps(read_pickle(path))
        (tmp_path / path.name).write_bytes(b"\xef\xbb\xbf  \n" + text.encode())
    assert fr.analyze_path(tmp_path).missing_ranks == (1,)


def test_a_single_file_and_a_path_prefix_are_accepted() -> None:
    experiment = cpu_dumps("n2_SEGFAULT_r1_i3")
    single = fr.analyze_path(experiment / "_dump_2")
    assert single.dump_ranks == (2,)
    assert single.missing_ranks == (0, 1, 3)  # only rank 2 is seen in the group
    prefix = fr.analyze_path(experiment / "_dump_")
    assert prefix.dump_ranks == (0, 2, 3) and prefix.missing_ranks == (1,)
    assert fr.analyze_path(experiment / "_dump_[02]").dump_ranks == (0, 2)


def test_the_rank_comes_from_the_file_name_suffix() -> None:
    assert fr.rank_of(Path("x/_dump_12")) == 12
    assert fr.rank_of(Path("x/_dump_12.json")) == 12
    with pytest.raises(fr.FrError, match="cannot tell the rank"):
        fr.rank_of(Path("x/_dump_latest"))


def test_group_ranks_are_parsed_never_evaluated() -> None:
    assert fr.parse_rank_list("[0, 4, 8, 12]") == (0, 4, 8, 12)
    assert fr.parse_rank_list("[]") == ()
    assert fr.parse_rank_list(" [3] ") == (3,)
    for bad in ("__import__('os').system('true')", "[0, 'x']", "[1.5]", "0, 1"):
        with pytest.raises(ValueError):
            fr.parse_rank_list(bad)


# --- what cannot be used: a typed, one-line error naming the file, or the no-dumps outcome ------


class _CallsOsSystem:
    """Pickles to a call of os.system; only ever pickled here, never unpickled by pickle."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("true",))


def test_the_restricted_unpickler_refuses_code(tmp_path: Path) -> None:
    doc = {"pg_config": {}, "pg_status": {}, "entries": [], "payload": _CallsOsSystem()}
    (tmp_path / "_dump_0").write_bytes(pickle.dumps(doc))
    with pytest.raises(fr.FrError) as err:
        fr.analyze_path(tmp_path)
    message = str(err.value)
    assert "_dump_0" in message and "system" in message and "refusing" in message
    assert "\n" not in message


def test_the_restricted_unpickler_admits_plain_containers(tmp_path: Path) -> None:
    doc = read_pickle(cpu_dumps("n2_SEGFAULT_r1_i3") / "_dump_0")
    doc["extra"] = {"a set": {1, 2}, "frozen": frozenset({3}), "float": 1.5, "none": None}
    for protocol in (0, 2, pickle.HIGHEST_PROTOCOL):  # sets go through find_class below 4
        (tmp_path / "_dump_0").write_bytes(pickle.dumps(doc, protocol=protocol))
        assert fr.analyze_path(tmp_path).dump_ranks == (0,)
    doc["extra"] = b"bytes"  # native from protocol 3 on
    (tmp_path / "_dump_0").write_bytes(pickle.dumps(doc, protocol=3))
    assert fr.analyze_path(tmp_path).dump_ranks == (0,)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"\x80\x04garbage", "not a flight-recorder dump"),
        (pickle.dumps({"entries": []})[:-5], "not a flight-recorder dump"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "top level: expected a mapping"),
        (pickle.dumps([1, 2]), "top level: expected a mapping"),
        (pickle.dumps({"entries": {}}), "entries: expected a list"),
        (json.dumps({"pg_config": {"5": {"ranks": "[0, oops]"}}}).encode(), "pg_config['5'].ranks"),
        (json.dumps({"entries": [{"collective_seq_id": 1}]}).encode(), "entries[0].process_group"),
        (json.dumps({"pg_status": {"0": {"last_enqueued_collective": "1"}}}).encode(),
         "last_enqueued_collective: expected an integer"),
    ],
)  # fmt: skip
def test_an_unusable_file_is_a_one_line_error_naming_it(
    tmp_path: Path, content: bytes, message: str
) -> None:
    shutil.copy(cpu_dumps("n2_SEGFAULT_r1_i3") / "_dump_0", tmp_path / "_dump_0")
    (tmp_path / "_dump_3").write_bytes(content)
    with pytest.raises(fr.FrError) as err:
        fr.analyze_path(tmp_path)
    text = str(err.value)
    assert text.startswith(str(tmp_path / "_dump_3")) and message in text
    assert "\n" not in text
    assert isinstance(err.value, ValueError)


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    doc = read_pickle(cpu_dumps("n2_SEGFAULT_r1_i3") / "_dump_0")
    doc["stack_frames"] = [{"file": "x.py"}]
    doc["entries"][-1]["frames"] = [1, 2, 3]
    (tmp_path / "_dump_0").write_bytes(pickle.dumps(doc))
    assert fr.analyze_path(tmp_path).missing_ranks == (1, 2, 3)


def test_two_dumps_for_one_rank_is_an_error(tmp_path: Path) -> None:
    copy_dumps(cpu_dumps("n2_SEGFAULT_r1_i3"), tmp_path)
    doc = read_pickle(tmp_path / "_dump_0")
    (tmp_path / "_dump_0.json").write_text(json.dumps(doc))
    with pytest.raises(fr.FrError, match=r"rank 0 already has a dump \(_dump_0\)"):
        fr.analyze_path(tmp_path)
    assert fr.analyze_path(tmp_path, "_dump_?").dump_ranks == (0, 2, 3)  # a narrower pattern


@pytest.mark.parametrize("where", ["empty dir", "pattern matching nothing"])
def test_no_dump_files_is_the_no_dumps_outcome(tmp_path: Path, where: str) -> None:
    copy_dumps(cpu_dumps("n2_SEGFAULT_r1_i3"), tmp_path / "ckpt")
    (tmp_path / "empty").mkdir()
    path, pattern = {
        "empty dir": (tmp_path / "empty", fr.DEFAULT_PATTERN),
        "pattern matching nothing": (tmp_path / "ckpt", "*.pkl"),
    }[where]
    result = fr.analyze_path(path, pattern)
    assert result.no_dumps
    assert result.missing_ranks == () and result.dump_ranks == ()
    assert fr.table(result) == fr.HEADER + "\n"
    assert fr.to_json(result) == {"groups": [], "ranks": []}


@pytest.mark.parametrize("where", ["nowhere", "ckpt/rank_"])
def test_a_path_that_names_nothing_is_an_error_not_no_dumps(tmp_path: Path, where: str) -> None:
    copy_dumps(cpu_dumps("n2_SEGFAULT_r1_i3"), tmp_path / "ckpt")
    with pytest.raises(fr.FrError, match="no such file or directory, and no file starts with it"):
        fr.analyze_path(tmp_path / where)


@needs_traces
def test_a_pattern_that_takes_in_other_files_is_an_error_naming_one() -> None:
    with pytest.raises(fr.FrError, match=r"fault_injection\.log: cannot tell the rank"):
        fr.analyze_path(TRACES / "gpu_error_1st", "*")

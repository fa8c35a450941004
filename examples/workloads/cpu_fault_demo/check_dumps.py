#!/usr/bin/env python3
"""Check flight-recorder dumps: their structure, and per process group the ranks missing.

    python3 check_dumps.py EXPERIMENT_DIR/checkpoints [--pattern '_dump_*'] [--json]

For every process group that has in-flight (`scheduled`) work in some dump, the latest collective
is the highest `last_enqueued_collective` of the group's members; a member is missing when it has
no scheduled entry of that group, or when it enqueued fewer collectives than that (this is the
missing-rank rule of the upstream CollectiveAnalyzer, without its window split and group graph;
the real analyser is nvrx's). The structure check compares every dump with the format observed
in real PyTorch dumps (top-level keys, pg_config, pg_status, entry fields and their types).

Dumps are read with a restricted unpickler that admits only plain containers and scalars.
Exit status: 0 when the dumps are well-formed, 1 when a structure problem was found, 2 when no
dump could be read. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import pickle
import sys
from pathlib import Path
from typing import Any

TOP_LEVEL = {"version": str, "pg_config": dict, "nccl_version": str, "pg_status": dict}
PG_CONFIG_FIELDS = {"name": str, "desc": str, "ranks": str}
PG_STATUS_FIELDS = (
    "last_enqueued_collective",
    "last_started_collective",
    "last_completed_collective",
)
ENTRY_FIELDS: dict[str, tuple[type, ...]] = {
    "record_id": (int,),
    "pg_id": (int,),
    "process_group": (tuple,),
    "thread_name": (str,),
    "thread_id": (str,),
    "collective_seq_id": (int,),
    "p2p_seq_id": (int,),
    "op_id": (int,),
    "profiling_name": (str,),
    "time_created_ns": (int,),
    "input_sizes": (list,),
    "input_dtypes": (list,),
    "output_sizes": (list,),
    "output_dtypes": (list,),
    "state": (str,),
    "time_discovered_started_ns": (int, type(None)),
    "time_discovered_completed_ns": (int, type(None)),
    "retired": (bool,),
    "timeout_ms": (int,),
    "is_p2p": (bool,),
}
STATES = {"scheduled", "started", "completed"}


class PlainUnpickler(pickle.Unpickler):
    """Refuses every global: a dump holds only dicts, lists, tuples, str, int, bool and None."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing {module}.{name} in a flight-recorder dump")


def load_dump(path: Path) -> dict[str, Any]:
    data = PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    if not isinstance(data, dict):
        raise ValueError("top level is not a dict")
    return data


def parse_ranks(text: str) -> list[int]:
    value = ast.literal_eval(text) if text.strip() else []
    return [int(r) for r in value]


def structure_problems(data: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for key, typ in TOP_LEVEL.items():
        if not isinstance(data.get(key), typ):
            problems.append(f"top-level {key!r} missing or not {typ.__name__}")
    if not isinstance(data.get("entries"), list):
        problems.append("top-level 'entries' missing or not a list")
    for name, cfg in (data.get("pg_config") or {}).items():
        if not isinstance(name, str) or not isinstance(cfg, dict):
            problems.append(f"pg_config[{name!r}] is not str -> dict")
            continue
        for fld, typ in PG_CONFIG_FIELDS.items():
            if not isinstance(cfg.get(fld), typ):
                problems.append(f"pg_config[{name!r}].{fld} missing or not {typ.__name__}")
        if cfg.get("name") != name:
            problems.append(f"pg_config[{name!r}].name differs from its key")
        try:
            parse_ranks(str(cfg.get("ranks", "")))
        except (ValueError, SyntaxError):
            problems.append(f"pg_config[{name!r}].ranks is not a list literal")
    for pg_id, status in (data.get("pg_status") or {}).items():
        if not isinstance(pg_id, str) or not isinstance(status, dict):
            problems.append(f"pg_status[{pg_id!r}] is not str -> dict")
            continue
        for fld in PG_STATUS_FIELDS:
            if type(status.get(fld)) is not int:
                problems.append(f"pg_status[{pg_id!r}].{fld} missing or not int")
    for i, entry in enumerate(data.get("entries") or []):
        for fld, types in ENTRY_FIELDS.items():
            if fld not in entry or type(entry[fld]) not in types:
                problems.append(f"entries[{i}].{fld} missing or of type {type(entry.get(fld))}")
        pg = entry.get("process_group")
        if isinstance(pg, tuple) and (len(pg) != 2 or pg[0] not in data.get("pg_config", {})):
            problems.append(f"entries[{i}].process_group {pg!r} not a known (name, desc)")
        if str(entry.get("pg_id")) not in (data.get("pg_status") or {}):
            problems.append(f"entries[{i}].pg_id {entry.get('pg_id')} has no pg_status")
        if entry.get("state") not in STATES:
            problems.append(f"entries[{i}].state {entry.get('state')!r} unknown")
    return problems


def missing_ranks(dumps: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per process group with in-flight work: the latest collective and who is missing."""
    members: dict[str, list[int]] = {}
    descs: dict[str, str] = {}
    local_id: dict[int, dict[str, str]] = {}  # rank -> group name -> local pg id
    scheduled: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for rank, data in dumps.items():
        for name, cfg in data["pg_config"].items():
            ranks = set(members.get(name, [])) | set(parse_ranks(cfg["ranks"]))
            members[name] = sorted(ranks)
            descs[name] = cfg["desc"]
        for entry in data["entries"]:
            name = entry["process_group"][0]
            local_id.setdefault(rank, {})[name] = str(entry["pg_id"])
            if entry["state"] == "scheduled" and not entry["is_p2p"]:
                scheduled.setdefault(name, {}).setdefault(rank, []).append(entry)
    rows = []
    for name in sorted(scheduled, key=lambda n: (len(n), n)):
        present = scheduled[name]
        # every member is looked up with one participating rank's local id, as upstream does
        pg_id = local_id[min(present)][name]

        def enqueued(rank: int, pg_id: str = pg_id) -> int | None:
            status = dumps.get(rank, {}).get("pg_status", {}).get(pg_id)
            return None if status is None else int(status["last_enqueued_collective"])

        latest = max(v for v in (enqueued(r) for r in present) if v is not None)
        behind = [r for r in members[name] if (e := enqueued(r)) is not None and e < latest]
        missing = sorted((set(members[name]) - set(present)) | set(behind))
        first = min(present)
        at_latest = [e for e in present[first] if e["collective_seq_id"] == latest]
        entry = (at_latest or present[first][-1:])[0]
        sizes = entry["input_sizes"]
        rows.append(
            {
                "name": name,
                "desc": descs[name],
                "op": entry["profiling_name"],
                "seq": latest,
                "size": "x".join(str(d) for d in sizes[0]) if sizes else "N/A",
                "dtype": entry["input_dtypes"][0] if entry["input_dtypes"] else "N/A",
                "present": sorted(present),
                "without_dump": sorted(set(members[name]) - set(dumps)),
                "missing": missing,
            }
        )
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("path", type=Path, help="directory with the dumps (or one dump file)")
    parser.add_argument("-p", "--pattern", default="_dump_*")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--all", action="store_true", help="also list groups with no rank missing")
    args = parser.parse_args(argv)

    files = [args.path] if args.path.is_file() else sorted(args.path.glob(args.pattern))
    dumps: dict[int, dict[str, Any]] = {}
    problems: dict[int, list[str]] = {}
    for path in files:
        try:
            rank = int(path.name.rsplit("_", 1)[-1])
            dumps[rank] = load_dump(path)
        except (ValueError, OSError, EOFError, pickle.UnpicklingError) as exc:
            print(f"cannot read {path}: {exc}", file=sys.stderr)
            continue
        found = structure_problems(dumps[rank])
        if found:
            problems[rank] = found
    if not dumps:
        print(f"no readable dumps matching {args.pattern!r} in {args.path}", file=sys.stderr)
        return 2
    rows = missing_ranks(dumps)
    if args.json:
        result = {
            "dumps": sorted(dumps),
            "structure_problems": {str(k): v for k, v in problems.items()},
            "groups": rows,
            "ranks": sorted({r for row in rows for r in row["missing"]}),
        }
        print(json.dumps(result, indent=2))
    else:
        print(f"dumps from ranks: {sorted(dumps)}")
        for rank, found in sorted(problems.items()):
            for problem in found:
                print(f"structure problem in _dump_{rank}: {problem}")
        header = f"{'PGID':<6} | {'Process Group Desc':<25} | {'Op Type':<16} | {'SeqNum':<6}"
        print(f"{header} | {'Size':<10} | {'Dtype':<8} | Missing Ranks")
        for row in rows:
            if not row["missing"] and not args.all:
                continue
            print(
                f"{row['name']:<6} | {row['desc']:<25} | {row['op']:<16} | {row['seq']:<6} | "
                f"{row['size']:<10} | {row['dtype']:<8} | {','.join(map(str, row['missing']))}"
            )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

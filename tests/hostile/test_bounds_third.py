"""Bounds that held for one part but not for the whole (issue 40, item 4): a job log's task-id
cap held per restart cycle, so cycles × tasks multiplied the work and the answer; the report
page's verdict and trend text had no byte budget; a journalled verdict's text reached `nvrx
report`'s terminal raw. Each test failed before its fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from nvrx.score.model import DIMENSIONS

from .harness import assert_no_traceback, run_nvrx
from .inputs import many_cycle_log

WALL = 20.0
TASKS = 1 << 17  # a 131,072-task job: every srun range of it is at the task-id cap


def test_a_many_cycle_many_task_log_costs_what_its_lines_say(tmp_path: Path, home: Path) -> None:
    # Before: each cycle expanded its own 131,072 task ids and listed every one in its
    # explanation (0.6 s, 10 MB and 1.3 MB of JSON a cycle: 8 cycles took 5 s and 10 MB).
    cycles = 8
    log = tmp_path / "job.log"
    many_cycle_log(log, cycles)
    assert log.stat().st_size < 300 * cycles
    answers = {}
    for fmt in ("--json", ""):
        flags = [fmt] if fmt else []
        proc = run_nvrx(
            "analyze", "log", str(log), *flags, cwd=home, wall=4.0, cpu_seconds=4, memory_mb=256
        )
        assert_no_traceback(proc, stdout=False)
        assert proc.code == 0, proc.describe()
        # A few KB a cycle, whatever the job's width: the answer is bounded by the log's lines.
        assert len(proc.stdout_bytes) < 4096 * cycles, len(proc.stdout_bytes)
        answers[fmt] = proc.stdout
    doc = json.loads(answers["--json"])
    assert len(doc["cycles"]) == cycles
    assert (doc["fault_class"], doc["root_rank"]) == ("SEGFAULT", 0)
    assert f"(and {TASKS - 1 - 128} more) ended after it" in doc["cycles"][0]["explanation"]


HOSTILE = "evil \x1b[2J\x1b]0;owned\x07 \u202eesrever"  # clear screen, retitle, reverse


def raw_controls(text: str) -> list[str]:
    """Terminal controls or bidi overrides that reached the output unescaped."""
    return [c for c in "\x1b\x07\u202e" if c in text]


def demo_sessions(tmp_path: Path) -> tuple[Path, Path]:
    """The demo session and a copy of it beside it, one day older (the previous session)."""
    from ..conftest import SCORE_DEMO

    new = tmp_path / "fault_injection" / SCORE_DEMO.name
    shutil.copytree(SCORE_DEMO, new)
    old = new.with_name("20200101_000000")
    shutil.copytree(SCORE_DEMO, old)
    return old, new


def rewrite_verdicts(session: Path, **fields: str | None) -> None:
    """Every journalled verdict of `session` with `fields` set (a scored verdict may hold any
    text in its dimensions: nvrx never wrote it, someone did)."""
    journal = session / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    for ev in events:
        if ev.get("event") == "analysed":
            ev["verdict"].update(fields)
    journal.write_text("".join(json.dumps(ev) + "\n" for ev in events))


def test_hostile_verdict_and_trend_text_leave_the_page_its_size(tmp_path: Path, home: Path) -> None:
    # Before: a verdict cell and a change's before/after had no budget: 300 KB of `"` in
    # each dimension of 4 verdicts made a 117 MB page (the cells, the list of changes and the
    # picture of them each carrying the text six times over).
    _, new = demo_sessions(tmp_path)
    text = '"' * 300_000
    rewrite_verdicts(new, **dict.fromkeys(DIMENSIONS, text), judge=text, notes=text)
    page = tmp_path / "page.html"
    proc = run_nvrx("report", str(new), "--html", str(page), "--json", cwd=home, wall=20.0)
    assert proc.code == 0, proc.describe()
    shown = page.read_text()
    assert "regressed since the previous session" in shown
    assert shown.count("<details") == 4
    assert len(shown.encode()) < 100_000, len(shown.encode())


def test_no_field_of_a_journalled_verdict_reaches_the_terminal_raw(
    tmp_path: Path, home: Path
) -> None:
    # Before: the verdict's dimension values went to `nvrx report`'s table, and a change's
    # before/after to `nvrx report diff`, as they were: ESC and all.
    old, new = demo_sessions(tmp_path)
    values = {d: f"{d} {HOSTILE}" for d in DIMENSIONS}
    rewrite_verdicts(new, **values, notes=HOSTILE, judge=HOSTILE, model=HOSTILE)
    for argv in (["report", str(new)], ["report", "diff", str(old), str(new)]):
        proc = run_nvrx(*argv, cwd=home, wall=WALL)
        assert proc.code in (0, 1), proc.describe()
        assert "evil" in proc.stdout and raw_controls(proc.output) == [], proc.describe()
    # An experiment left unscored says why, escaped too.
    rewrite_verdicts(new, status="unscored", reason=HOSTILE, **dict.fromkeys(DIMENSIONS, None))
    proc = run_nvrx("report", str(new), cwd=home, wall=WALL)
    assert "unscored" in proc.stdout and raw_controls(proc.output) == [], proc.describe()


def test_a_session_named_to_clear_the_screen_is_shown_escaped_by_report_and_score(
    tmp_path: Path, home: Path
) -> None:
    # Before: `session NAME`, the line above the table of both, printed the name raw.
    _, demo = demo_sessions(tmp_path)
    session = demo.with_name(f"20261129_124154{HOSTILE}")
    demo.rename(session)
    for argv in (["report", str(session)], ["score", str(session), "--judge", "rules"]):
        proc = run_nvrx(*argv, cwd=home, wall=WALL)
        assert proc.code in (0, 1), proc.describe()
        assert "session 20261129_124154evil" in proc.stdout, proc.describe()
        assert raw_controls(proc.output) == [], proc.describe()


def test_inject_loop_prints_a_journalled_job_and_its_state_escaped(
    tmp_path: Path, home: Path
) -> None:
    # Before: `--reanalyze`'s upstream-style lines printed the journal's job id, state and
    # exit, and the reason that quotes them, raw.
    _, session = demo_sessions(tmp_path)
    journal = session / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    for ev in events:
        if ev.get("event") in ("submitted", "ended"):
            ev["job_id"] += HOSTILE
        if ev.get("event") == "ended":
            ev["state"] = ev["exit"] = HOSTILE
    journal.write_text("".join(json.dumps(ev) + "\n" for ev in events))
    proc = run_nvrx("inject-loop", "--reanalyze", str(session), "--no-progress", cwd=home)
    assert proc.code == 3, proc.describe()  # no job log under such a job id: unscored
    assert "state=evil" in proc.stdout and raw_controls(proc.output) == [], proc.describe()

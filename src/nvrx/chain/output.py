"""How submit-chain reports to people (the --json form is ChainReport.to_json)."""

from __future__ import annotations

import shlex

from rich.console import Console

from nvrx.chain.submit import ChainReport, shape_summary
from nvrx.display import counted


def print_report(report: ChainReport, out: Console, err: Console) -> None:
    m = report.manifest
    s = shape_summary(report.shape)

    def say(text: str) -> None:
        out.print(text, markup=False)

    for argv in report.planned:
        say(f"[dry-run] {shlex.join(argv)}")
    if report.planned and report.script_copy:
        say(f"script (not written here; its text is in {report.script_copy}): {m.script}")
    elif report.planned:
        say(f"script (not written; --write-script FILE to read it): {m.script}")
    for index, answer in enumerate(report.test_only):
        say(f"generation {index}: {answer.describe()}")
    for note in report.notes:
        if note.startswith("note: "):  # a note is for the person, not the answer: stderr
            err.print(f"nvrx: {note}", markup=False, highlight=False)
        else:
            say(note)
    planned = not report.written
    count = m.depth if planned else len(m.generations)
    say(f"Chain {m.chain_id}: {counted(count, 'generation')} of {m.job_name!r} (singleton)")
    say(
        f"Array: {s['array']} ({s['train_tasks']} train + {counted(s['hot_spares'], 'hot spare')} "
        f"running, {counted(s['cold_spares'], 'cold spare')} pending; "
        f"{counted(s['nodes_per_task'], 'node')} per task)"
    )
    say(f"Launcher: --nnodes {s['nnodes']}; world size {s['world_size']} GPUs")
    say(f"Drain poller: {m.shape.get('drain_poller') or 'unknown (an older manifest)'}")
    if not planned:
        say("Generations: " + (" ".join(f"{g.index}:{g.job_id}" for g in m.generations) or "none"))
        if report.live is not None:
            say(f"Queued or running: {' '.join(report.live) or 'none'}")
        if report.cancelled is not None:
            say(f"Cancelled (were queued or running): {' '.join(report.cancelled) or 'none'}")
        say(f"Manifest: {m.work_dir}/chain.json")
        if report.action != "cancelled":
            where = shlex.quote(m.work_dir)
            say(f"Cancel it with: nvrx submit-chain --cancel --work-dir {where}")
    if report.error:
        err.print(f"nvrx: error: {report.error}", markup=False)
        if report.finish_command:
            err.print(
                f"nvrx: note: finish the chain with: {shlex.join(report.finish_command)}",
                markup=False,
            )

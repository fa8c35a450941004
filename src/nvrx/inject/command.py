"""`nvrx inject-loop`: which of run, resume, re-run, re-analyse, list, dry run and next
iteration is asked for, with what; then the campaign, its summary and its report."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvrx.config import ConfigSource
from nvrx.contract import write_document
from nvrx.display import counted
from nvrx.terminal import CommandError, error_line, note, stderr, stdout, warn

if TYPE_CHECKING:
    from nvrx.inject.rows import Stop


def note_duplicates(duplicates: Sequence[str]) -> None:
    for dup in sorted(set(duplicates)):
        note(f"duplicate entry {dup} kept in its own directory")


@dataclass(frozen=True)
class InjectRequest:
    """What the command line asked `inject-loop` for, beyond the settings its flags set (the
    flags map, built with the options in `cli.inject`)."""

    pool: str | None = None
    workload: str | None = None
    sbatch_script: Path | None = None
    batch_size: int | None = None
    window_mode: str | None = None
    base_dir: Path | None = None
    time_limit: str | None = None
    resume: Path | None = None
    reanalyze: Path | None = None
    rerun_failing: Path | None = None
    next_: Path | None = None
    iters: str | None = None
    no_analysis: bool = False
    no_progress: bool = False
    allow_duplicates: bool = False
    cancel_on_interrupt: bool = False
    list_pool: bool = False
    dry_run: bool = False
    force: bool = False
    as_json: bool = False
    extra_args: tuple[str, ...] = ()

    def given(self) -> list[str]:
        """The options the command line gave, by their flags (a default is not given)."""
        values: dict[str, object] = {
            "--pool": self.pool,
            "--workload": self.workload,
            "--sbatch-script": self.sbatch_script,
            "--batch-size": self.batch_size,
            "--window": self.window_mode,
            "--base-dir": self.base_dir,
            "--time-limit": self.time_limit,
            "--resume": self.resume,
            "--reanalyze": self.reanalyze,
            "--rerun-failing": self.rerun_failing,
            "--next": self.next_,
            "--iters": self.iters,
            "--no-analysis": self.no_analysis or None,
            "--no-progress": self.no_progress or None,
            "--allow-duplicates": self.allow_duplicates or None,
            "--cancel-on-interrupt": self.cancel_on_interrupt or None,
            "--list-pool": self.list_pool or None,
            "--dry-run": self.dry_run or None,
            "--force": self.force or None,
            "--json": self.as_json or None,
            "-- ARGS": self.extra_args or None,
        }
        return [flag for flag, value in values.items() if value is not None]

    def check(self) -> None:
        """One line naming what does not go together: each mode refuses every option it would
        drop without a word. (`--dry-run` and `--list-pool` preview a run or a re-run: they take
        that run's options.)"""
        given = self.given()

        def refuse(mode: str, says: str, keeps: set[str]) -> None:
            # --no-progress asks for plain lines, which every mode without a live view prints.
            keeps = keeps | {mode, "--no-progress"}
            extra = [flag for flag in given if flag not in keeps]
            if extra:
                raise CommandError(f"{mode} {says}: not with {', '.join(extra)}")

        if self.next_ is not None:
            refuse("--next", "reads one session and prints the next pool", {"--json"})
        if self.reanalyze is not None:
            refuse("--reanalyze", "works on a session alone (it takes --force and --json)",
                   {"--force", "--json"})  # fmt: skip
        if self.force and self.reanalyze is None:
            raise CommandError(
                "--force applies to --reanalyze only (a campaign never runs on a damaged journal)"
            )
        # How a campaign runs, not what it runs: a resumed or re-run session takes these.
        runtime = {"--batch-size", "--window", "--no-analysis", "--cancel-on-interrupt", "--json"}
        if self.rerun_failing is not None:
            refuse(
                "--rerun-failing",
                "re-runs that session's campaign as it was recorded",
                runtime | {"--list-pool", "--dry-run"},
            )
        if self.resume is not None:
            refuse("--resume", "finishes a session as it was planned", runtime)
        if self.list_pool and self.dry_run:
            raise CommandError("--list-pool prints the pool, --dry-run the sbatch lines: not both")

    def resolved(self) -> InjectRequest:
        """The same request, its session paths absolute."""
        return replace(
            self,
            resume=self.resume.resolve() if self.resume is not None else None,
            reanalyze=self.reanalyze.resolve() if self.reanalyze is not None else None,
            rerun_failing=(
                self.rerun_failing.resolve() if self.rerun_failing is not None else None
            ),
        )


def inject_loop(
    request: InjectRequest, flags: Mapping[str, tuple[Any, str]], source: ConfigSource
) -> int:
    """Run (or resume, re-run, re-analyse, list) a campaign. Returns the exit code: 0 done, 1 a
    failure, 3 an experiment unscored after re-analysis, 130 interrupted."""
    from nvrx.campaign.session import Session, SessionState
    from nvrx.inject.analyst import Analyst, Analyzers, Judge
    from nvrx.inject.driver import Campaign
    from nvrx.inject.output import (
        LineReporter,
        LiveReporter,
        pool_json,
        print_summary,
        summary_json,
    )
    from nvrx.inject.plan import (
        campaign_window,
        make_plan,
        plan_pool,
        planned_commands,
        rerun_plan,
        start_session,
    )
    from nvrx.inject.rows import failing_entries
    from nvrx.inject.rows import rows as report_rows
    from nvrx.score.judges import campaign_judge
    from nvrx.slurm import Slurm

    request.check()
    if request.next_ is not None:
        return next_iteration(request.next_, source, request.as_json)
    r = request.resolved()
    entries: list[str] = []
    old: SessionState | None = None  # the journal of the session --rerun-failing re-runs
    if r.rerun_failing is not None:
        old = Session.open(r.rerun_failing).state()

    loaded = source.load(flags, submits_from=("inject", "slurm"))
    cfg = loaded.config.inject
    slurm = Slurm(loaded.config.slurm)
    if old is not None:
        entries = failing_entries(report_rows(old), cfg.stop_dimensions)
        if not entries:
            dimensions = ", ".join(cfg.stop_dimensions)
            stdout().print(
                f"every experiment of {r.rerun_failing} passes {dimensions}: nothing to re-run"
            )
            return 0
        note(
            f"re-running {counted(len(entries), 'failing experiment')} of {r.rerun_failing} "
            "with its recorded workload, script and shape"
        )

    def analysis(gpus_per_node: int) -> tuple[Analyzers, Judge] | None:
        """The analysers and the judge, built (and their settings checked) before any session
        is created or resumed."""
        if r.no_analysis:
            return None
        return Analyzers.from_config(loaded.config, gpus_per_node), campaign_judge(
            loaded.config, warn
        )

    if r.reanalyze is not None:
        session, state = open_session(r.reanalyze, r.force)
        tools = analysis(state.gpus_per_node())
        assert tools is not None  # --reanalyze refuses --no-analysis
        analyst = Analyst(session, *tools, cfg.analysis_workers)
        return reanalyze_session(session, state, analyst, r.as_json, r.force, cfg.stop_dimensions)
    if r.resume is not None:
        session = Session.open(r.resume)
        state = session.state()
        window = campaign_window(loaded, state.info)
        tools = analysis(state.gpus_per_node())
    else:
        if r.rerun_failing is not None and old is not None:
            plan = rerun_plan(r.rerun_failing, old, entries)
            home = r.rerun_failing.parent.parent  # beside OLD: the stop condition compares them
            window = campaign_window(loaded, old.info)
        elif r.list_pool:  # the pool alone: listing it needs no sbatch script yet
            listed = plan_pool(loaded, allow_duplicates=r.allow_duplicates)
            note_duplicates(listed.pool.duplicates)
            return _list_pool(list(listed.pool.experiments), listed.gpus_per_node, r.as_json)
        else:
            plan = make_plan(loaded, allow_duplicates=r.allow_duplicates, extra_args=r.extra_args)
            home = Path(cfg.base_experiments_dir)
            window = campaign_window(loaded)
        note_duplicates(plan.pool.duplicates)
        if r.list_pool:  # with --rerun-failing: the pool the re-run would run
            return _list_pool(list(plan.pool.experiments), plan.spec.gpus_per_node, r.as_json)
        lines = planned_commands(plan, slurm, home)
        if r.dry_run:
            if r.as_json:
                listing = pool_json(list(plan.pool.experiments), plan.spec.gpus_per_node)
                for entry, argv in zip(listing["experiments"], lines, strict=True):
                    entry["sbatch"] = argv
                write_document({"dry_run": True, **listing}, 0)
                return 0
            for argv in lines:
                stdout().print(f"[dry-run] {shlex.join(argv)}")
            return 0
        tools = analysis(plan.spec.gpus_per_node)
        session = start_session(plan, loaded, sys.argv, home, window)

    reporter = (
        LiveReporter(stdout())
        if sys.stdout.isatty() and not r.as_json and not r.no_progress
        else LineReporter(stderr() if r.as_json else stdout())
    )
    if not r.as_json:
        stdout().print(f"session: {session.dir}")
    campaign = Campaign(
        session,
        slurm,
        reporter,
        window=window,
        poll_interval=loaded.config.slurm.poll_interval,
        cap_seconds=cfg.experiment_timeout,
        cancel_on_interrupt=r.cancel_on_interrupt,
        analyst=Analyst(session, *tools, cfg.analysis_workers) if tools is not None else None,
    )
    try:
        outcome = campaign.run()
    finally:
        reporter.close()
    summary = summary_json(outcome.state, str(session.dir), outcome.error, outcome.interrupted)
    code = 1 if outcome.error else 130 if outcome.interrupted else 0
    if campaign.analyst is not None:
        campaign.analyst.close()
    if r.as_json:
        write_document(summary, code)
    else:
        print_summary(stdout(), summary)
    if campaign.analyst is not None:
        finish_report(session.dir, r.as_json, dimensions=cfg.stop_dimensions)
    if outcome.error:  # one line, as every failure; the document above already carries it
        error_line(outcome.error)
    return code


def _list_pool(experiments: list[Any], gpus_per_node: int, as_json: bool) -> int:
    from nvrx.inject.output import pool_json, pool_table

    if as_json:
        write_document(pool_json(experiments, gpus_per_node), 0)
    else:
        stdout().print(pool_table(experiments, gpus_per_node))
    return 0


def open_session(directory: Path, force: bool) -> tuple[Any, Any]:
    """A session and its state, saying on stderr what a forced read skipped."""
    from nvrx.campaign.session import Session

    session = Session.open(directory)
    state = session.state(force=force)
    for skipped in state.notes(session.journal.path):
        warn(skipped)
    return session, state


def next_iteration(session_dir: Path, source: ConfigSource, as_json: bool = False) -> int:
    """`--next SESSION`: the next iteration's pool on stdout (for `--pool "$(...)"`), why on
    stderr; with `as_json`, both in one document (`entries` empty: nothing left to run)."""
    from nvrx.inject.sweep import next_iteration as sweep_next

    dimensions = source.load().config.inject.stop_dimensions
    session = session_dir.resolve()
    open_session(session, False)
    step = sweep_next(session, dimensions)
    note(f"iteration {step.iteration}: {step.why}")
    if as_json:
        doc = {"session": str(session), "iteration": step.iteration, "why": step.why,
               "entries": list(step.entries)}  # fmt: skip
        write_document(doc, 0)
    elif step.entries:
        sys.stdout.write(" ".join(step.entries) + "\n")
    return 0


def reanalyze_session(
    session: Any, state: Any, analyst: Any, as_json: bool, force: bool, dimensions: Sequence[str]
) -> int:
    """Analyse and score every ended experiment of `session` again; journal each result as it
    comes; rebuild the report. Exit 3 when any is unscored (as `nvrx score`), 130 on Ctrl-C
    (what finished is kept, the rest is not started)."""
    from nvrx.inject.output import LineReporter

    reporter = LineReporter(stderr() if as_json else stdout())
    ended = state.by_status("ended")
    for record in ended:
        analyst.submit(record)
    done = unscored = 0
    code = 0
    try:
        while analyst.busy:
            for record, result in analyst.collect():
                done += 1
                unscored += result.verdict is None or result.verdict.status == "unscored"
                reporter.analysed(record, result, done, len(ended))
            time.sleep(0.1)
    except KeyboardInterrupt:
        for record, result in analyst.collect():
            done += 1
            reporter.analysed(record, result, done, len(ended))
        analyst.close(cancel=True)
        stderr().print(f"nvrx: interrupted after {done} of {len(ended)} analyses")
        code = 130
    else:
        analyst.close()
    rows, stop = finish_report(session.dir, as_json, force, dimensions)
    if as_json:
        from nvrx.inject import rows as report

    if code == 0 and unscored:
        warn(f"{counted(unscored, 'experiment')} unscored after re-analysis")
        code = 3
    if as_json:
        write_document(report.report_json(session.dir, rows, stop), code)
    return code


def finish_report(
    session_dir: Path, quiet: bool, force: bool = False, dimensions: Sequence[str] | None = None
) -> tuple[list[Any], Stop]:
    """Rebuild the session's report from its journal, say where it is; its rows and stop
    condition."""
    from nvrx.inject.report import write_reports
    from nvrx.inject.rows import stop_sentence

    try:
        paths, rows, stop = write_reports(
            session_dir, force=force, **({"dimensions": dimensions} if dimensions else {})
        )
    except OSError as exc:
        raise CommandError(f"cannot write the report in {session_dir}: {exc.strerror}", 1) from None
    out = stderr() if quiet else stdout()
    scored = sum(r.verdict.status == "scored" for r in rows)
    out.print(f"report: {paths[0]} ({counted(len(rows), 'experiment')}, {scored} scored)")
    out.print(f"page: {paths[3]}")
    out.print(stop_sentence(stop))
    return rows, stop

"""`nvrx watch`: resolve the chain, then one pass (cron) or a pass every `watch.interval`
seconds, each printed as a screen or one JSON object."""

from __future__ import annotations

import gc
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from nvrx.config import ConfigSource
from nvrx.contract import OK, write_document
from nvrx.terminal import CommandError, error_line, note
from nvrx.watch.passoutput import PassOutput

if TYPE_CHECKING:
    from nvrx.config import WatchSettings
    from nvrx.slurm import Slurm
    from nvrx.watch.watcher import ExitCodes, PassResult, Watcher

TIMELINE_PAGE = "timeline.html"  # `--html` with no FILE: in the chain's state directory


@dataclass(frozen=True)
class WatchRequest:
    """What the command line asked for, beyond the settings its flags set."""

    targets: tuple[str, ...] = ()  # JOB_ID, or the PATHs of --fleet
    fleet: bool = False
    mine: bool = False
    work_dir: Path | None = None
    job_name: str | None = None
    user: str | None = None
    cycle_info_glob: str | None = None
    checkpoint_iteration_file: str | None = None
    max_restarts: int | None = None
    act: bool = False
    dry_run: bool = False
    as_json: bool = False
    list_detectors: bool = False
    html: str | None = None  # the timeline page, rewritten after every pass ("": state dir)
    junit: Path | None = None  # the pass as JUnit, rewritten after every pass
    goodput: bool = False  # one read-only pass; print where the wall time went

    @property
    def job_id(self) -> str | None:
        return self.targets[0] if self.targets and not self.fleet else None

    def given(self, flags: Mapping[str, tuple[object, str]]) -> list[str]:
        """The options the command line gave, by their flags (a default is not given): this
        request's and those of the flags map (`cli.watch`)."""
        values: dict[str, object] = {
            "JOB_ID|PATH": self.targets or None,
            "--fleet": self.fleet or None,
            "--mine": self.mine or None,
            "--work-dir": self.work_dir,
            "--job-name": self.job_name,
            "--cycle-info-glob": self.cycle_info_glob,
            "--checkpoint-iteration-file": self.checkpoint_iteration_file,
            "--act": self.act or None,
            "--dry-run": self.dry_run or None,
            "--json": self.as_json or None,
            "--goodput": self.goodput or None,
            "--html": self.html,
            "--junit": self.junit,
            **{flag: value for value, flag in flags.values()},
        }
        return [flag for flag, value in values.items() if value is not None]

    def check(self, flags: Mapping[str, tuple[object, str]] | None = None) -> None:
        """One line naming what does not go together (`flags`: the flags map's options)."""
        given = [flag for flag in self.given(flags or {}) if flag != "--json"]
        if self.list_detectors and given:
            raise CommandError(
                f"--list-detectors lists the detectors and exits: not with {', '.join(given)}"
            )
        if self.goodput:
            # A report of one read-only pass: it loops, acts, alerts and writes nothing.
            dropped = ["--act", "--interval", "--html", "--junit", "--webhook-url",
                       "--pd-routing-key", "--pd-routing-key-file", "--heartbeat-url",
                       "--prom-file", "--disable"]  # fmt: skip
            extra = [flag for flag in given if flag in dropped]
            if extra:
                raise CommandError(
                    f"--goodput only reads, in one pass: not with {', '.join(extra)}"
                )
        if self.fleet or self.mine:
            one = ("--work-dir", "--job-name", "--cycle-info-glob", "--checkpoint-iteration-file",
                   "--html", "--junit")  # fmt: skip
            single = [flag for flag in given if flag in one]
            if single:
                many = "--fleet" if self.fleet else "--mine"
                each = "is for" if len(single) == 1 else "are for"
                raise CommandError(f"{', '.join(single)} {each} one chain: not with {many}")
        if self.fleet and not self.targets:
            raise CommandError("--fleet needs at least one PATH (a chain work dir or above one)")
        if self.mine and self.targets and not self.fleet:
            raise CommandError(
                f"--mine takes no JOB_ID ({self.targets[0]!r}); --fleet PATH... adds dirs"
            )
        if not self.fleet and len(self.targets) > 1:
            raise CommandError(
                f"one JOB_ID, not {len(self.targets)} ({' '.join(self.targets[:3])}...); "
                "--fleet watches several chains"
            )


def list_detectors(as_json: bool) -> None:
    """The detector catalogue (`detectors.catalogue`), as text or a document under --json."""
    from nvrx.watch.detectors import catalogue

    rows = catalogue()
    if as_json:
        detectors = [{"name": n, "scope": scope, "summary": what} for n, scope, what in rows]
        write_document({"detectors": detectors}, OK)
        return
    sys.stdout.write("".join(f"{name:22} {what}\n" for name, _, what in rows))


def _blind(message: str, as_json: bool, codes: ExitCodes) -> int:
    """A pass that saw nothing: one line (and a JSON object with --json), exit 3 (upstream's
    codes: 1)."""
    from nvrx.watch.watcher import pass_exit_code

    code = pass_exit_code(critical=False, blind=True, codes=codes)
    if as_json:
        write_document({"state": "blind", "degraded": True, "error": message}, code)
    error_line(message)  # after the answer, as every failure a command reports beside it
    return code


def _write_files(
    request: WatchRequest,
    watcher: Watcher,
    result: PassResult,
    detectors: list[str],
    *,
    announce: bool,
) -> bool:
    """The pages the user asked for, replaced atomically after every pass: `--html` (no FILE: the
    chain's state dir) and `--junit`; never over one of the pass's inputs (`refuse_input`, and
    this generation's checkpoint file when its path names the job). Whether any was asked for."""
    from nvrx.terminal import Output, write_outputs
    from nvrx.watch.output import pass_junit
    from nvrx.watch.resolve import refuse_input
    from nvrx.watch.timeline import timeline_page

    snap = result.snapshot
    wanted: list[Output] = []
    if request.html is not None:
        page = Path(request.html) if request.html else watcher.dir / TIMELINE_PAGE
        wanted.append((page, "--html", partial(timeline_page, result)))
    if request.junit is not None:
        wanted.append((request.junit, "--junit", partial(pass_junit, result, detectors)))
    cycles = tuple(c.path for c in snap.cycles)
    for path, what, _ in wanted:
        refuse_input(path, watcher.target, watcher.dir, what, cycles)
    inputs = [Path(snap.checkpoint.path)] if snap.checkpoint.path else []
    write_outputs(wanted, inputs, announce=announce)
    return bool(wanted)


def _print_goodput(result: PassResult, as_json: bool) -> int:
    """`--goodput`: the chain's breakdown (exit 3 when the pass was blind, upstream's codes 1;
    else 0: a report judges nothing)."""
    from nvrx.watch.output import goodput_lines, print_lines
    from nvrx.watch.watcher import pass_exit_code

    chain = result.snapshot.chain
    good = result.goodput
    code = pass_exit_code(critical=False, blind=result.degraded, codes=result.exit_codes)
    if as_json:
        doc = {
            "chain": chain.label,
            "work_dir": chain.work_dir,
            "state": result.state,
            "degraded": result.degraded,
            "goodput": good.to_json() if good else None,
        }
        write_document(doc, code)
    else:
        print_lines(goodput_lines(chain.label, good), sys.stdout, color=sys.stdout.isatty())
    return code


def fleet_watch(
    request: WatchRequest, settings: WatchSettings, slurm: Slurm | None, no_restart_code: int
) -> int:
    """`--fleet PATH...` / `--mine`: every chain in one pass (or one every interval)."""
    from nvrx.watch.fleet import FleetError, build_fleet, discover, my_chains
    from nvrx.watch.fleetview import fleet_json, fleet_lines
    from nvrx.watch.output import print_lines

    dirs = discover([Path(p) for p in request.targets], settings.fleet_depth)
    if request.mine and slurm is None:
        raise FleetError("--mine asks Slurm for your chains: not with --platform none")
    jobs = my_chains(slurm) if request.mine and slurm is not None else []
    if not dirs and not jobs:
        # Nothing to watch is an answer, not bad input: a cron job of --mine must not fail
        # because the user has no chain running today.
        where = " ".join(request.targets) if request.targets else "Slurm (--mine)"
        message = f"no chain found in {where}"
        note(message)
        if request.as_json:
            doc = {"fleet": True, "state": "ok", "chains": [], "notes": [message]}
            write_document(doc, OK)
        return OK
    fleet = build_fleet(
        dirs,
        jobs,
        settings,
        slurm,
        host=socket.gethostname(),
        act=request.act,
        dry_run=request.dry_run,
        no_restart_exit_code=no_restart_code,
    )
    out = PassOutput(settings, request.as_json)

    def one_pass() -> tuple[int, bool]:
        result = fleet.run_pass()
        if request.goodput:
            from nvrx.watch.fleetview import fleet_goodput_report
            from nvrx.watch.watcher import pass_exit_code

            lines, doc = fleet_goodput_report(result)
            blind = any(c.blind for c in result.chains)
            code = pass_exit_code(critical=False, blind=blind, codes=result.exit_codes)
            if request.as_json:
                write_document(doc, code)
            else:
                print_lines(lines, sys.stdout, color=sys.stdout.isatty())
            return code, True
        out.show(
            fleet_json(result, settings),
            result.exit_code,
            partial(fleet_lines, result, settings),
            result.all_sink_errors(),
            result.all_notes(),
        )
        return result.exit_code, False

    return out.every_interval(one_pass)


def watch(
    request: WatchRequest,
    *,
    flags: Mapping[str, tuple[object, str]],
    source: ConfigSource,
) -> int:
    """Run the watcher; its exit code (nvrx.contract): 0 clean, 1 critical, 3 blind (upstream's
    codes with `watch.exit_codes: upstream`: 1 blind, 2 critical)."""
    request.check(flags)
    if request.list_detectors:
        list_detectors(request.as_json)
        return 0
    if request.goodput:  # a report: it reads the state, alerts nobody and writes nothing
        request = replace(request, dry_run=True)
    from nvrx.slurm import Slurm
    from nvrx.watch.detectors import DETECTORS
    from nvrx.watch.detectors.fleet import FLEET_DETECTORS
    from nvrx.watch.output import pass_json, pass_lines
    from nvrx.watch.resolve import Overrides, WatchBlind, resolve
    from nvrx.watch.watcher import Watcher

    loaded = source.load(flags)
    # What is loaded by now (modules, the settings) lives until exit: the collector need not
    # scan it again and again while a pass builds and drops its records, nor once more at
    # exit (a tenth of a warm fleet pass over 100 chains, measured).
    gc.freeze()
    settings = loaded.config.watch
    unknown = set(settings.disable) - set(DETECTORS) - set(FLEET_DETECTORS)
    if unknown:
        raise CommandError(
            f"unknown detector{'s' if len(unknown) > 1 else ''} in disable: "
            f"{', '.join(sorted(unknown))}"
        )
    slurm = Slurm(loaded.config.slurm) if settings.platform == "slurm" else None
    if request.fleet or request.mine:
        return fleet_watch(request, settings, slurm, loaded.config.chain.no_restart_exit_code)
    over = Overrides(
        job_id=request.job_id,
        work_dir=request.work_dir,
        job_name=request.job_name,
        user=request.user,
        cycle_info_glob=request.cycle_info_glob,
        checkpoint_file=request.checkpoint_iteration_file,
        platform=settings.platform,
        max_restarts=request.max_restarts,
        # For a chain without a manifest (whose own code wins): the site's launcher setting.
        no_restart_exit_code=loaded.config.chain.no_restart_exit_code,
    )
    watcher: Watcher | None = None
    detectors = [name for name in DETECTORS if name not in settings.disable]
    told: list[bool] = []
    # A loop on a terminal redraws its screen in place; cron, pipes and --json get every pass.
    out = PassOutput(settings, request.as_json)

    def one_pass() -> tuple[int, bool]:
        nonlocal watcher
        if watcher is None:
            try:
                target = resolve(over, slurm, settings, dry_run=request.dry_run)
            except WatchBlind as exc:
                # Slurm does not answer: blind (exit 3), not misconfigured; a loop retries.
                return _blind(str(exc), request.as_json, settings.exit_codes), False
            watcher = Watcher(
                target,
                settings,
                slurm,
                host=socket.gethostname(),
                act=request.act,
                dry_run=request.dry_run,
            )
        try:
            result = watcher.run_pass()
        except OSError as exc:
            # A pass that breaks (state dir unusable, ...) is a blind pass, and a cron or
            # --interval loop must keep going.
            return _blind(f"pass failed: {exc}", request.as_json, settings.exit_codes), False
        if request.goodput:
            return _print_goodput(result, request.as_json), True
        # A loop rewrites them every pass: where they went is said once.
        if _write_files(request, watcher, result, detectors, announce=not told):
            told.append(True)
        out.show(
            pass_json(result),
            result.exit_code,
            partial(pass_lines, result),
            result.sink_errors,
            result.notes,
        )
        return result.exit_code, False

    return out.every_interval(one_pass)

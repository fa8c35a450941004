"""One experiment's analysis, after its job has left Slurm: run validity, blinding, log and FR
analysis, then scoring. Everything lands in the experiment's own `analysis/` directory (never a
shared temp file), so any step can be re-run alone:

    analysis/run_valid.txt          `true`/`false`, then `<kind>: <reason>` (what score reads)
    analysis/stripped.log           the blinded log every analyser reads
    analysis/log_attribution.txt    logsage's 5-field text   (+ .json)
    analysis/fr_analysis.txt        upstream's FR table, or `no_dumps`   (+ .json)
    analysis/verdict.json           the judge's verdict

Analyzers are chosen by config (`inject.log_analyzer`, `inject.fr_analyzer`): the built-in ones
need no torch, GPU or network; upstream's run as subprocesses where they are installed.

One module for one experiment's analysis, from blinding to verdict: the steps share the
experiment's `analysis/` directory and the secrets masked in everything they write.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from nvrx.campaign.errors import CampaignError
from nvrx.campaign.session import Record, Session
from nvrx.config import NvrxConfig, known_secrets, redact_text, redact_urls, secret_env_values
from nvrx.files import (
    InputError,
    decode_text,
    read_bounded,
    read_key_file,
    read_text,
    write_atomic,
)
from nvrx.logtext import blind
from nvrx.score.evidence import Attribution, fr_ranks, run_validity
from nvrx.score.inputs import (
    ANALYSIS_DIR,
    FR_ANALYSIS,
    LOG_ATTRIBUTION,
    RUN_VALID,
    STRIPPED,
    STRIPPED_LOG,
    input_digest,
    job_log,
)
from nvrx.score.load import Shape, experiment_case, record_truth
from nvrx.score.model import Verdict


class AnalyserSetupError(CampaignError):
    """An analyser that cannot run as configured (a missing script or interpreter, no key)."""


VERDICT = "verdict.json"
NO_DUMPS = "no_dumps"
LOGSAGE_SCRIPT_ENV = "NVRX_LOGSAGE_SCRIPT"  # upstream's nvrx_logsage.py (a script, not a module)
UPSTREAM_FR_MODULE = "nvidia_resiliency_ext.attribution.trace_analyzer.fr_attribution"

# (analysis/ dir, blinded log path, blinded log text) -> (5-field text, JSON form)
LogAnalyzer = Callable[[Path, str], tuple[str, dict[str, Any]]]
# (checkpoints dir, pattern) -> (table text or `no_dumps`, JSON form)
FrAnalyzer = Callable[[Path, str], tuple[str, dict[str, Any]]]
# cases -> verdicts (the configured judges)
Judge = Callable[[list[Any]], list[Verdict]]


def _json(doc: Any) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# --- analyzers ----------------------------------------------------------------------------------


def builtin_log_analyzer(_: Path, text: str) -> tuple[str, dict[str, Any]]:
    from nvrx.analyze.logattr import attribute_log

    result = attribute_log(text)
    return result.text(), result.to_json()


def builtin_fr_analyzer(checkpoints: Path, pattern: str) -> tuple[str, dict[str, Any]]:
    from nvrx.analyze import fr

    if not checkpoints.is_dir():  # the workload never made it: nothing dumped
        return NO_DUMPS, {"groups": [], "ranks": []}
    result = fr.analyze_path(checkpoints, pattern)
    if result.no_dumps:
        return NO_DUMPS, fr.to_json(result)
    return fr.table(result), fr.to_json(result)


def _run(
    argv: list[str],
    cwd: Path,
    timeout: float,
    what: str,
    secrets: Sequence[str],
    env: dict[str, str] | None = None,
) -> str:
    """An external analyser's output, its secrets masked (it may echo the key it read): the
    run's `secrets` and, always, the credential variables of the environment it gets."""
    secrets = [*secrets, *secret_env_values(env if env is not None else os.environ)]
    # Its output goes to files read back through the bounded reader: an analyser that prints
    # without end must not take the driver's memory with it.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.run(
                argv, cwd=cwd, stdout=out, stderr=err, timeout=timeout, check=False, env=env
            )
        except subprocess.TimeoutExpired:
            raise AnalysisError(f"{what} did not finish within {timeout:g} s") from None
        except OSError as exc:
            raise AnalysisError(f"{what} could not start: {exc.strerror}") from None
        try:
            stdout = _read_output(out, f"{what} output")
            stderr = _read_output(err, f"{what} error output")
        except InputError as exc:
            raise AnalysisError(str(exc)) from None
    if proc.returncode != 0:
        # The tail goes into the verdict's reason and the reports: an analyser that echoes the
        # key it read from the environment must not publish it there. Masked before it is cut,
        # so a key across the cut cannot leave its first part behind.
        last = " ".join(stderr.strip().splitlines()[-1:])
        tail = redact_text(last, secrets)[:200]
        raise AnalysisError(f"{what} exited {proc.returncode}: {tail}")
    return redact_text(stdout, secrets)


def _read_output(handle: IO[bytes], what: str) -> str:
    return decode_text(read_bounded(f"/proc/self/fd/{handle.fileno()}", what)[0])


def logsage_analyzer(
    script: Path, model: str, base_url: str, timeout: float, secrets: Sequence[str] = ()
) -> LogAnalyzer:
    """Upstream's log analyser, read by substring (its stdout is a repr: docs/file-contracts.md).
    It runs in the experiment's analysis/ dir: its side-effect file lands there, not in a
    shared temp dir where concurrent runs clobber each other."""

    def analyze(analysis_dir: Path, _: str) -> tuple[str, dict[str, Any]]:
        argv = [
            sys.executable, str(script), "--log-path", str(analysis_dir / STRIPPED_LOG),
            "--model", model, "--base_url", base_url, "--emit-stdout", "--exclude_nvrx_logs",
        ]  # fmt: skip
        text = _run(argv, analysis_dir, timeout, "logsage", secrets)
        return text, attribution_json(text)

    return analyze


LOGSAGE_MODULE = "logsage.auto_resume_policy.main"  # the PyPI package's command line
LOGSAGE_OUTPUT = "logsage.json"
# logsage's answer when its model could not be reached, and ours for it (the judge's sentinel).
_LOGSAGE_LLM_FAILED = "LLM ENDPOINT FAILED"


def logsage_package_analyzer(
    python: Path,
    model: str,
    base_url: str,
    api_key: str,
    timeout: float,
    secrets: Sequence[str] = (),
) -> LogAnalyzer:
    """The `logsage` package from PyPI, run as its own command line (`python -m
    logsage.auto_resume_policy.main -a LOG -o OUT`) by `python`, which has it installed (it
    brings langchain and pandas, which nvrx does not want in its own environment).

    The package talks to NVIDIA's endpoints through langchain's ChatNVIDIA; it is pointed at
    `base_url` (any OpenAI-compatible server) by the variables ChatNVIDIA and logsage read. Its
    JSON answer is written in the experiment's analysis/ dir, read back through the bounded
    reader and turned into logsage's 5-field text (`logsage_text`)."""

    def analyze(analysis_dir: Path, _: str) -> tuple[str, dict[str, Any]]:
        out = analysis_dir / LOGSAGE_OUTPUT
        out.unlink(missing_ok=True)  # an answer from an earlier run must not be read as this one
        argv = [
            str(python), "-m", LOGSAGE_MODULE, "-a", str(analysis_dir / STRIPPED_LOG),
            "-o", str(out),
        ]  # fmt: skip
        env = {
            **os.environ,
            "NVIDIA_BASE_URL": base_url,
            "MODEL_NAME": model,
            # logsage registers the model at this inference URL ("personal endpoint").
            "MODEL_FUNCTION_ID": base_url.rstrip("/") + "/chat/completions",
            "PERSONAL_ENDPOINT": "true",
            "NVIDIA_API_KEY": api_key,
        }
        _run(argv, analysis_dir, timeout, "logsage", [*secrets, api_key], env=env)
        try:
            raw = read_text(out, "logsage output")
            # Kept only masked: logsage writes what its model answered, echoed keys and all.
            masked = redact_text(raw, [*secrets, api_key])
            if masked != raw:
                write_atomic(out, masked)
            doc = json.loads(raw)
        except InputError as exc:
            raise AnalysisError(f"logsage wrote no answer: {exc}") from None
        except json.JSONDecodeError as exc:
            raise AnalysisError(f"logsage output {out}: not JSON ({exc.msg})") from None
        text = redact_text(logsage_text(doc), [*secrets, api_key])
        return text, {**attribution_json(text), "source": "logsage"}

    return analyze


def logsage_text(doc: Any) -> str:
    """The 5-field text (decision, explanation, attribution, detail, checkpoint saved) of the
    logsage package's JSON answer; AnalysisError when it is not one."""
    if not isinstance(doc, dict) or not isinstance(doc.get("error_count"), int):
        raise AnalysisError("logsage output is not its analysis (no error_count)")
    found = doc.get("error_analysis")
    if found is None:  # it found no error in the log
        return "ERRORS NOT FOUND\n\n\n\nFalse\n"
    if not isinstance(found, dict):
        raise AnalysisError("logsage output: error_analysis is not an object")
    fields = {k: str(found.get(k) or "") for k in ("auto_resume", "explanation", "attribution")}
    decision = fields["auto_resume"]
    if _LOGSAGE_LLM_FAILED in decision:
        decision = "LLM FAILURE"
    attribution = fields["attribution"].strip()
    if attribution and not attribution.startswith("Attribution:"):
        attribution = f"Attribution: {attribution}"
    detail = " ".join(str(found.get("auto_resume_verbose") or "").split())
    saved = str(bool(found.get("checkpoint_saved")))
    return "\n".join((decision, fields["explanation"], attribution, detail, saved)) + "\n"


def upstream_fr_analyzer(timeout: float, secrets: Sequence[str] = ()) -> FrAnalyzer:
    def analyze(checkpoints: Path, pattern: str) -> tuple[str, dict[str, Any]]:
        if not checkpoints.is_dir():  # no dump directory: nothing to analyse (not a failure)
            return NO_DUMPS, {"ranks": [], "source": "nvrx-fr"}
        argv = [
            sys.executable, "-m", UPSTREAM_FR_MODULE, "--fr-path", str(checkpoints),
            "--emit-stdout", "-p", pattern,
        ]  # fmt: skip
        # Unlike upstream, which reads a crash as `no_dumps`: a failed analyser makes the
        # experiment unscored (AnalysisError). Only an empty answer means no dumps.
        text = _run(argv, checkpoints, timeout, "nvrx-fr", secrets).strip()
        ranks = sorted(fr_ranks(text))
        return (text or NO_DUMPS), {"ranks": ranks, "source": "nvrx-fr"}

    return analyze


def attribution_json(text: str) -> dict[str, Any]:
    a = Attribution.parse(text)
    return {
        "decision": a.decision,
        "primary": a.primary,
        "secondary": a.secondary,
        "primary_ranks": sorted(a.primary_ranks),
        "secondary_ranks": sorted(a.secondary_ranks),
    }


def _logsage(config: NvrxConfig, secrets: Sequence[str]) -> LogAnalyzer:
    """The configured logsage: upstream's script when NVRX_LOGSAGE_SCRIPT names one, else the
    PyPI package run by `inject.logsage_python` (or nvrx's own Python when it has it)."""
    inj = config.inject
    model = inj.log_analysis_model or inj.llm_model
    base_url = inj.log_analysis_base_url or inj.llm_base_url
    script = os.environ.get(LOGSAGE_SCRIPT_ENV, "")
    if script:
        if not Path(script).is_file():
            raise AnalyserSetupError(f"{LOGSAGE_SCRIPT_ENV} names no file: {script!r}")
        return logsage_analyzer(Path(script), model, base_url, inj.analysis_timeout, secrets)
    if inj.logsage_python is not None:
        python = Path(inj.logsage_python)
        if not (python.is_file() and os.access(python, os.X_OK)):
            raise AnalyserSetupError(f"inject.logsage_python is not an executable file: {python}")
    elif importlib.util.find_spec("logsage") is not None:
        python = Path(sys.executable)
    else:
        raise AnalyserSetupError(
            "inject.log_analyzer=logsage needs the logsage package (pip install logsage, here "
            "or in the Python that inject.logsage_python names), or NVRX_LOGSAGE_SCRIPT set to "
            "upstream's nvrx_logsage.py"
        )
    key = _logsage_key(config, base_url)
    return logsage_package_analyzer(python, model, base_url, key, inj.analysis_timeout, secrets)


def _logsage_key(config: NvrxConfig, base_url: str) -> str:
    """The key logsage sends: inject.llm_api_key, its key file, or NVIDIA_API_KEY; a loopback
    endpoint may have none (ChatNVIDIA still wants a value)."""
    from nvrx.score.judges import is_loopback  # the one loopback test

    inj = config.inject
    if inj.llm_api_key is not None:
        return inj.llm_api_key.get_secret_value()
    if inj.llm_api_key_file is not None:
        try:
            return read_key_file(inj.llm_api_key_file, "API key file")[0]
        except InputError as exc:
            raise AnalyserSetupError(str(exc)) from None
    if key := os.environ.get("NVIDIA_API_KEY", ""):
        return key
    if is_loopback(base_url):
        return "nvrx-no-key"
    raise AnalyserSetupError(
        f"inject.log_analyzer=logsage at {redact_urls(base_url)} needs an API key: set "
        "LLM_API_KEY, LLM_API_KEY_FILE or NVIDIA_API_KEY"
    )


class AnalysisError(Exception):
    """One analyser failed on one experiment; the message says which and why."""


@dataclass(frozen=True)
class Analyzers:
    log: LogAnalyzer
    fr: FrAnalyzer
    log_name: str
    fr_name: str
    fr_pattern: str
    shape: Shape

    @classmethod
    def from_config(cls, config: NvrxConfig, gpus_per_node: int) -> Analyzers:
        """The configured analyzers; an external one that is not installed is an error now,
        not at the first experiment's end."""
        inj = config.inject
        secrets = tuple(known_secrets(config, os.environ))
        log: LogAnalyzer = builtin_log_analyzer
        fr: FrAnalyzer = builtin_fr_analyzer
        if inj.log_analyzer == "logsage":
            log = _logsage(config, secrets)
        if inj.fr_analyzer == "nvrx-fr":
            if importlib.util.find_spec("nvidia_resiliency_ext") is None:
                raise AnalyserSetupError(
                    "inject.fr_analyzer=nvrx-fr needs the nvidia-resiliency-ext package installed"
                )
            fr = upstream_fr_analyzer(inj.analysis_timeout, secrets)
        return cls(
            log,
            fr,
            inj.log_analyzer,
            inj.fr_analyzer,
            inj.fr_pattern,
            Shape(gpus_per_node, config.score.segment_size),
        )


# --- one experiment -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ExperimentAnalysis:
    """What the journal keeps of one experiment's analysis (the files keep the rest)."""

    index: int
    validity: str
    reason: str
    decision: str | None = None
    fr_ranks: tuple[int, ...] = ()
    errors: tuple[str, ...] = ()
    verdict: Verdict | None = None
    # The sha256 of every file the verdict is made from, by its path in the experiment dir.
    judged: dict[str, str | None] | None = None

    def event(self) -> dict[str, Any]:
        event = {
            "index": self.index,
            "validity": self.validity,
            "reason": self.reason,
            "decision": self.decision,
            "fr_ranks": list(self.fr_ranks),
            "errors": list(self.errors),
        }
        if self.judged is not None:
            event["judged"] = self.judged
        return event


def analyse(record: Record, analyzers: Analyzers, judge: Judge) -> ExperimentAnalysis:
    """Analyse and score one ended experiment, writing its analysis/ files. Never raises for
    what one experiment's artifacts hold: failures are recorded and make the verdict unscored."""
    out = record.dir / ANALYSIS_DIR
    out.mkdir(parents=True, exist_ok=True)
    # Read on the session's behalf, as scoring reads it (a link out of it, a FIFO: refused).
    log = job_log(record.dir, record.job_id)
    raw = log.text if log is not None else None
    validity = run_validity(raw)
    if raw is not None:
        write_atomic(
            out / RUN_VALID,
            f"{'true' if validity.run_valid else 'false'}\n{validity.kind}: {validity.reason}\n",
        )
    else:
        # No log at all says nothing about validity: no run_valid.txt, so the experiment is
        # unscored ("no job log"), as `nvrx score` has it, never a quietly skipped `invalid`.
        (out / RUN_VALID).unlink(missing_ok=True)
    stripped = blind(raw or "")
    write_atomic(out / STRIPPED_LOG, stripped)
    errors: list[str] = []
    decision: str | None = None
    ranks: tuple[int, ...] = ()
    if validity.run_valid:
        try:
            text, doc = analyzers.log(out, stripped)
            write_atomic(out / LOG_ATTRIBUTION, text if text.endswith("\n") else text + "\n")
            write_atomic(out / (LOG_ATTRIBUTION.removesuffix(".txt") + ".json"), _json(doc))
            decision = Attribution.parse(text).decision
        except Exception as exc:  # one analyser's failure is this experiment's, not the run's
            (out / LOG_ATTRIBUTION).unlink(missing_ok=True)
            errors.append(f"log analysis ({analyzers.log_name}): {exc}")
        try:
            table, doc = analyzers.fr(record.dir / "checkpoints", analyzers.fr_pattern)
            write_atomic(out / FR_ANALYSIS, table if table.endswith("\n") else table + "\n")
            write_atomic(out / (FR_ANALYSIS.removesuffix(".txt") + ".json"), _json(doc))
            ranks = tuple(sorted(fr_ranks(table)))
        except Exception as exc:
            (out / FR_ANALYSIS).unlink(missing_ok=True)
            errors.append(f"FR analysis ({analyzers.fr_name}): {exc}")
    case = experiment_case(
        record.case_id,
        record.dir,
        record_truth(record, analyzers.shape),
        job_id=record.job_id,
        job_state=record.state,
        problem="; ".join(errors) or None,
        log=log,
    )
    # What the verdict is made of: every file the case read (`Case.inputs`), and the blinded
    # log the log analyser read, whose answer the judge reads (and the page shows as the log
    # the judge saw).
    judged = {**dict(case.inputs), STRIPPED: input_digest(record.dir, STRIPPED)}
    [verdict] = judge([case])
    write_atomic(out / VERDICT, verdict.model_dump_json(indent=2, exclude_none=True) + "\n")
    return ExperimentAnalysis(
        record.index,
        validity.kind,
        validity.reason,
        decision,
        ranks,
        tuple(errors),
        verdict,
        judged,
    )


# --- the worker pool beside the scheduler --------------------------------------------------------


class Analyst:
    """Analyses experiments in worker threads while the campaign keeps scheduling. Results are
    journalled by the caller's thread (`collect`), so the journal has one writer."""

    def __init__(
        self, session: Session, analyzers: Analyzers, judge: Judge, workers: int = 2
    ) -> None:
        self.session = session
        self.analyzers = analyzers
        self.judge = judge
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nvrx-analysis")
        self.pending: dict[int, tuple[Record, Future[ExperimentAnalysis]]] = {}

    def submit(self, record: Record) -> None:
        if record.index not in self.pending:
            future = self.pool.submit(analyse, record, self.analyzers, self.judge)
            self.pending[record.index] = (record, future)

    @property
    def busy(self) -> int:
        return len(self.pending)

    def collect(self, *, block: bool = False) -> list[tuple[Record, ExperimentAnalysis]]:
        """Journal the analyses that finished (all of them, when `block`)."""
        if block and self.pending:
            wait([f for _, f in self.pending.values()])
        finished = []
        for index, (record, future) in list(self.pending.items()):
            if not future.done():
                continue
            del self.pending[index]
            try:
                result = future.result()
            except Exception as exc:  # a bug or a full disk: an unscored row saying so
                error = f"analysis failed: {type(exc).__name__}: {exc}"
                failed = Verdict(
                    case=record.case_id,
                    status="unscored",
                    judge="none",
                    reason=error,
                )
                result = ExperimentAnalysis(index, "error", error, errors=(error,), verdict=failed)
            dumped = (
                result.verdict.model_dump(mode="json", exclude_none=True)
                if result.verdict
                else None
            )
            self.session.record("analysed", **result.event(), verdict=dumped)
            finished.append((record, result))
        return finished

    def close(self, *, cancel: bool = False) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)

"""Cases from disk: a whole inject-loop session, one experiment directory, or upstream-style flags.

Per experiment directory (written by the campaign's analysis; docs/file-contracts.md; the
files are read, with their digests, through `score.inputs`):
  logs/slurm/<JOB>.<RESTART>.1.main_workload.log   the job log (first restart's, as upstream)
  analysis/run_valid.txt                          `true`/`false`; absent → the log's marker decides
  analysis/log_attribution.txt                    the log analyser's text (required to judge)
  analysis/fr_analysis.txt                        the FR missing-rank table; absent → `no_dumps`
Ground truth comes from the session's journal (else its experiments.tsv), never from the
directory's name or text the analysers saw.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from nvrx import files
from nvrx.campaign.session import JOURNAL_NAME, TSV_HEADER, TSV_NAME, Record, Session
from nvrx.logtext import blind
from nvrx.score.evidence import analyser_failure, fr_table_problem, judge_excerpt, run_validity
from nvrx.score.inputs import (
    ANALYSIS_DIR,
    FR_ANALYSIS,
    LOG_ATTRIBUTION,
    RUN_VALID,
    InputFile,
    changed_since_judged,
    job_log,
    read_input,
)
from nvrx.score.model import Case, GroundTruth, ScoreError


@dataclass(frozen=True, slots=True)
class Shape:
    gpus_per_node: int
    segment_size: int


def parse_bool(text: str, what: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ScoreError(f"{what} {text.strip()!r}: expected true or false")


def read_text(path: Path, what: str) -> str:
    """A text input through the one bounded reader; its problems are ScoreErrors (bad input to
    `nvrx score`). A session's files are read by `read_input`."""
    try:
        return files.read_text(path, what)
    except files.InputError as exc:
        raise ScoreError(str(exc)) from None


def text_or_file(value: str, what: str) -> str:
    """A flag's text, or `@PATH` for the contents of PATH (upstream passes the text itself). A
    file that holds nothing (a pipe whose writer never came) is a mistake, said as one."""
    if not value.startswith("@"):
        return value
    text = read_text(Path(value[1:]), what)
    if not text.strip():
        raise ScoreError(f"{what} {value[1:]}: is empty")
    return text


def experiment_case(
    case_id: str,
    experiment_dir: Path,
    truth: GroundTruth,
    *,
    job_id: str | None = None,
    job_state: str | None = None,
    problem: str | None = None,
    log: InputFile | None = None,
) -> Case:
    """One experiment's case from its directory (see the module's layout). What is missing makes
    the case unscored with the reason, never silently `invalid`. `log` is the job log when the
    caller has read it already (`job_log`). The case names every file it read, with its digest,
    and every one it looked for and did not find (`Case.inputs`): what the verdict is made of."""
    make = partial(
        Case, id=case_id, job_id=job_id, job_state=job_state, experiment_dir=str(experiment_dir)
    )
    if not experiment_dir.is_dir():
        return make(truth=truth, problem=f"no experiment directory {experiment_dir}")
    inputs: dict[str, str | None] = {}

    def read(path: Path, what: str) -> str | None:
        """The file's text (None: absent), recorded in `inputs` either way. Every file is read
        on the session's behalf: none may lead out of it (files.within_root)."""
        if not path.is_file():
            inputs[path.relative_to(experiment_dir).as_posix()] = None
            return None
        got = read_input(experiment_dir, path, what)
        inputs[got.name] = got.sha256
        return got.text

    analysis = experiment_dir / ANALYSIS_DIR
    if log is None:
        log = job_log(experiment_dir, job_id)
    if log is not None:
        inputs[log.name] = log.sha256
    raw_log = log.text if log is not None else ""
    valid_file = analysis / RUN_VALID
    validity = read(valid_file, "run validity")
    if validity is not None:
        first = (validity.split() or [""])[0]
        run_valid = parse_bool(first, f"run validity in {valid_file}:")
    elif log is None:
        pattern = f"{job_id or '<JOB>'}.*.1.main_workload.log"
        problem = problem or f"no job log {experiment_dir}/logs/slurm/{pattern} to judge validity"
        run_valid = True
    else:
        run_valid = run_validity(raw_log).run_valid
    truth = replace(truth, run_valid=run_valid)
    attribution_file = analysis / LOG_ATTRIBUTION
    fr_file = analysis / FR_ANALYSIS
    attribution_text = read(attribution_file, "log attribution")
    if problem is None and run_valid and attribution_text is None:
        problem = f"no log attribution: {attribution_file} is missing (analyse the run first)"
    attribution = blind(attribution_text) if attribution_text is not None else ""
    if problem is None and run_valid:
        problem = analyser_failure(attribution)
    fr_text = read(fr_file, "FR analysis")
    return make(
        truth=truth,
        log_excerpt=judge_excerpt(raw_log),
        log_attribution=attribution,
        fr_output=_fr_table(fr_text, str(fr_file)) if fr_text is not None else "no_dumps",
        problem=problem,
        inputs=tuple(inputs.items()),
    )


def _fr_table(text: str, where: str) -> str:
    """An FR analysis table, blinded; a damaged row is an error naming `where` and the line."""
    if (problem := fr_table_problem(text)) is not None:
        raise ScoreError(f"FR analysis {where} {problem}")
    return blind(text)


def record_truth(record: Record, shape: Shape) -> GroundTruth:
    """The ground truth of a journalled experiment."""
    e = record.experiment
    return GroundTruth.build(
        e.fault.value, e.rank, e.iteration, e.nodes, shape.gpus_per_node, shape.segment_size
    )


def is_session(path: Path) -> bool:
    """A session directory: nvrx's journal or upstream's tracking file in it."""
    return _session_dir(path) is not None


def _session_dir(path: Path) -> Path | None:
    if (path / JOURNAL_NAME).is_file() or (path / TSV_NAME).is_file():
        return path
    return None


def session_cases(session_dir: Path, shape: Shape, only: Path | None = None) -> list[Case]:
    """Every experiment of a session (or only the one in `only`), from its journal or, for a
    session written by the upstream scripts, its tracking file."""
    if (session_dir / JOURNAL_NAME).is_file():
        session = Session.open(session_dir)
        state = session.state()
        shape = Shape(state.gpus_per_node(shape.gpus_per_node), shape.segment_size)
        cases = []
        for record in state.records:
            if only is not None and record.dir.resolve() != only.resolve():
                continue
            problem = None
            if record.status != "ended":
                problem = f"the job has not ended (journal status: {record.status})"
            case = experiment_case(
                record.case_id,
                record.dir,
                record_truth(record, shape),
                job_id=record.job_id,
                job_state=record.state,
                problem=problem,
            )
            changed = changed_since_judged(record, known=case.inputs)
            cases.append(replace(case, changed=changed))
        return cases
    return _tsv_cases(session_dir, shape, only)


_ROW_INTS = ("RANK", "ITER", "NODES")


def _tsv_cases(session_dir: Path, shape: Shape, only: Path | None) -> list[Case]:
    tsv = session_dir / TSV_NAME
    # Upstream writes plain tab-separated fields: a quote is a character, not the start of a
    # quoted field (one unbalanced `"` would swallow the rest of the file into one field).
    rows = csv.DictReader(
        io.StringIO(read_text(tsv, "tracking file")), delimiter="\t", quoting=csv.QUOTE_NONE
    )
    header = rows.fieldnames or []
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise ScoreError(f"{tsv} line 1: column {', '.join(twice)} is given twice")
    missing = [c for c in TSV_HEADER.split() if c not in header]
    if missing:
        raise ScoreError(f"{tsv}: not a tracking file (no column {', '.join(missing)})")
    cases = []
    numbered: list[tuple[int, dict[str, str]]] = []
    while True:
        n = len(numbered) + 2  # the header is line 1; one row per line, unquoted
        try:
            numbered.append((n, next(rows)))
        except StopIteration:
            break
        except csv.Error as exc:
            raise ScoreError(f"{tsv} line {n}: not a tracking row ({exc})") from None
    for n, row in numbered:
        bad = [k for k in _ROW_INTS if not (row.get(k) or "").isascii() or not row[k].isdigit()]
        if bad or not row.get("EXPERIMENT_DIR") or not row.get("FAULT_TYPE"):
            what = f"{', '.join(bad)} not a number" if bad else "a column is missing"
            raise ScoreError(f"{tsv} line {n}: not a tracking row ({what})")
        values = [int(row[k]) for k in _ROW_INTS]
        # A directory of this session, by its name: upstream writes absolute paths, which a
        # session moved or copied no longer matches, and a row must not send nvrx elsewhere.
        name = Path(row["EXPERIMENT_DIR"]).name
        if name in ("", ".", ".."):
            raise ScoreError(f"{tsv} line {n}: EXPERIMENT_DIR names no experiment directory")
        exp_dir = session_dir / name
        if only is not None and exp_dir.resolve() != only.resolve():
            continue
        truth = GroundTruth.build(
            row["FAULT_TYPE"],
            values[0],
            values[1],
            values[2],
            shape.gpus_per_node,
            shape.segment_size,
        )
        cases.append(
            experiment_case(
                f"{session_dir.name}/{exp_dir.name}", exp_dir, truth, job_id=row["JOB_ID"]
            )
        )
    return cases


def input_paths(targets: list[Path], cases: list[Case], files_given: list[Path]) -> list[Path]:
    """What a scoring run read, or may be asked to read again: each session's journal and
    tracking file, every experiment directory, and the files given by flags. Its outputs
    (`--junit`, `--markdown`) may not replace any of them (`refuse_overwriting`)."""
    out = list(files_given)
    for target in targets:
        for session in (target, target.parent):
            out += [session / JOURNAL_NAME, session / f"{JOURNAL_NAME}.torn", session / TSV_NAME]
    out += [Path(c.experiment_dir) for c in cases if c.experiment_dir]
    return out


def cases_from_path(path: Path, shape: Shape) -> list[Case]:
    """A session directory → all its experiments; an experiment directory → that one."""
    if not path.is_dir():
        raise ScoreError(f"{path}: not a directory (expected a session or an experiment dir)")
    if (session := _session_dir(path)) is not None:
        cases = session_cases(session, shape)
        if not cases:
            raise ScoreError(f"{path}: the session has no experiments")
        return cases
    if (session := _session_dir(path.parent)) is not None:
        cases = session_cases(session, shape, only=path)
        if not cases:
            raise ScoreError(f"{path}: not an experiment of the session {session}")
        return cases
    raise ScoreError(
        f"{path}: neither a session ({JOURNAL_NAME} or {TSV_NAME}) nor an experiment dir of one"
    )


_ENTRY = re.compile(r"^[A-Za-z_]+$")


def flags_case(
    *,
    fault_type: str,
    rank: int,
    iteration: int,
    nodes: int,
    run_valid: bool,
    shape: Shape,
    log_path: Path | None,
    log_output: str,
    fr_output: str,
) -> Case:
    """One case from upstream-style flags (`score_attribution.py`'s interface)."""
    if not _ENTRY.match(fault_type.strip()):
        raise ScoreError(f"fault type {fault_type!r}: expected a name such as SEGFAULT")
    truth = GroundTruth.build(
        fault_type, rank, iteration, nodes, shape.gpus_per_node, shape.segment_size, run_valid
    )
    raw_log = read_text(log_path, "log") if log_path is not None else ""
    attribution = blind(text_or_file(log_output, "log output"))
    problem = None
    if run_valid:  # an invalid run is N/A whatever the analyser said
        problem = (
            analyser_failure(attribution)
            if attribution.strip()
            else "no log attribution given (--log-output is empty)"
        )
    return Case(
        id=f"{truth.fault.value}:{rank}:{iteration}:{nodes}",
        truth=truth,
        log_excerpt=judge_excerpt(raw_log),
        log_attribution=attribution,
        fr_output=_fr_table(
            text_or_file(fr_output, "FR output"),
            fr_output[1:] if fr_output.startswith("@") else "(--fr-output)",
        )
        or "no_dumps",
        problem=problem,
    )

"""The files a verdict is made of: where they are in an experiment's directory, reading them
with the sha256 of the bytes read (what the campaign journals with its verdict, `judged`), and
which of them changed since (docs/file-contracts.md, `analysed`).

    logs/slurm/<JOB>.<RESTART>.1.main_workload.log   the job log the judge reads
    analysis/stripped.log                           the blinded log the log analyser read
    analysis/run_valid.txt, log_attribution.txt, fr_analysis.txt   what the judge reads

Which files a verdict is made of is never listed twice: a case records every file it read
(`score.load.experiment_case`), the campaign journals that record, and the check hashes again
the files the record names.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from nvrx import files
from nvrx.campaign.session import Record
from nvrx.score.model import ScoreError

ANALYSIS_DIR = "analysis"
RUN_VALID = "run_valid.txt"
LOG_ATTRIBUTION = "log_attribution.txt"
FR_ANALYSIS = "fr_analysis.txt"
STRIPPED_LOG = "stripped.log"  # the blinded log every analyser reads (inject.analyst writes it)
STRIPPED = f"{ANALYSIS_DIR}/{STRIPPED_LOG}"  # its path in the experiment directory
# Until the job log and stripped.log had digests, `judged` named the analysis files alone, by
# their bare names: such a record cannot tell whether the logs changed since.
_OLDER_JUDGED = "not recorded when judged"


@dataclass(frozen=True, slots=True)
class InputFile:
    """A file of an experiment as a case reads it: its path in the experiment directory, its
    text, and the sha256 of the bytes read (what the campaign journals with the verdict)."""

    name: str
    text: str
    sha256: str


def read_input(experiment_dir: Path, path: Path, what: str) -> InputFile:
    """A file of the experiment, read on the session's behalf: one that leads out of the session
    is refused (`files.within_root`), and so is anything but a regular file (a FIFO there would
    read as empty). Its problems are ScoreErrors (a case that cannot be built)."""
    try:
        real = files.within_root(path, experiment_dir.parent, what)
        data = files.read_bounded(real, what, regular_only=True)[0]
    except files.InputError as exc:
        raise ScoreError(str(exc)) from None
    name = path.relative_to(experiment_dir).as_posix()
    return InputFile(name, files.decode_text(data), hashlib.sha256(data).hexdigest())


def job_log(experiment_dir: Path, job_id: str | None) -> InputFile | None:
    """The job log the judge reads (`main_log`), read; None when there is none."""
    path = main_log(experiment_dir, job_id)
    return read_input(experiment_dir, path, "job log") if path is not None else None


def input_digest(experiment_dir: Path, name: str) -> str | None:
    """The sha256 of the experiment's file `name` as it is now (None: absent), read in blocks
    (a job log may be gigabytes); InputError when it cannot be read or leads out of the
    session."""
    path = experiment_dir / name
    if not path.exists():
        return None
    what = "judged file"
    return files.file_sha256(files.within_root(path, experiment_dir.parent, what), what)


def changed_since_judged(
    record: Record, known: tuple[tuple[str, str | None], ...] = ()
) -> tuple[str, ...]:
    """Each file a journalled verdict was made from that differs now (added, removed or
    edited), by its path in the experiment directory; () when the journal predates the
    digests. The files are the ones the record names, and the job log the judge would read now
    (another one, or one that appeared); `known` are digests read already (the case just
    built), the rest are hashed now. A record of an older nvrx, with the analysis files'
    digests alone, says of the logs that it did not record them."""
    journalled = (record.analysis or {}).get("judged")
    if journalled is None:
        return ()
    # The session checked the record's shape when it read the journal (`campaign.session`).
    older = all("/" not in name for name in journalled)
    then = {name if "/" in name else f"{ANALYSIS_DIR}/{name}": d for name, d in journalled.items()}
    names = list(then)
    log = main_log(record.dir, record.job_id)
    for path in (log, record.dir / STRIPPED if older else None):
        if path is not None and path.exists():
            name = path.relative_to(record.dir).as_posix()
            if name not in then:
                names.append(name)
    now = dict(known)
    out = []
    for name in names:
        if name not in then:
            out.append(f"{name} ({_OLDER_JUDGED})" if older else name)
            continue
        try:
            digest = now[name] if name in now else input_digest(record.dir, name)
        except files.InputError as exc:  # unreadable now: that is a change, and says why
            out.append(f"{name} ({exc.reason})")
            continue
        if digest != then[name]:
            out.append(name)
    return tuple(out)


def _restart_key(path: Path) -> tuple[int, str]:
    # <JOB>.<RESTART>.1.main_workload.log: order by the restart count, numerically.
    parts = path.name.split(".")
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 1 << 30, path.name)


def main_log(experiment_dir: Path, job_id: str | None) -> Path | None:
    """The job log the judge reads: the first restart's, as upstream; None when there is none."""
    logs = experiment_dir / "logs" / "slurm"
    pattern = f"{job_id}.*.1.main_workload.log" if job_id else "*.1.main_workload.log"
    found = sorted(logs.glob(pattern), key=_restart_key)
    return found[0] if found else None

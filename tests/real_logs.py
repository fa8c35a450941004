"""The real-log corpus (`tests/data/real_logs/`, format in its README): loading its cases and
telling whether the built-in analyser agrees with a case's label. Shared by the corpus tests and
`bench/log_attribution.py`."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import yaml

from nvrx.analyze.logattr import ERRORS_NOT_FOUND, Category, LogAttribution
from nvrx.logtext import RESTART, STOP

CORPUS = Path(__file__).resolve().parent / "data" / "real_logs"

KEYS = (
    "source",
    "title",
    "where",
    "formats",
    "fault",
    "category",
    "decision",
    "root_ranks",
    "notes",
)
FORMATS = frozenset(
    {
        "no_prefix", "srun_label", "torchrun_rank", "torchrun_default", "logging_prefix",
        "loguru", "timestamp", "interleaved", "kernel_log", "slurm",
    }
)  # fmt: skip
# Each fault's category (docs/log-attribution-policy.md); a fault listed under two may be either,
# by what the text says (a checkpoint that fails on an I/O error is infrastructure).
FAULT_CATEGORIES: dict[str, frozenset[str]] = {
    "exception": frozenset({"software"}),
    "device_assert": frozenset({"software"}),
    "nan_loss": frozenset({"software"}),
    "segfault": frozenset({"software"}),
    "abort": frozenset({"software"}),
    "dataloader_error": frozenset({"software", "resource"}),
    "checkpoint_error": frozenset({"software", "infrastructure"}),
    "cuda_oom": frozenset({"resource"}),
    "host_oom": frozenset({"resource"}),
    "oom_kill": frozenset({"resource"}),
    "sigkill": frozenset({"resource"}),
    "illegal_memory_access": frozenset({"hardware"}),
    "ecc_error": frozenset({"hardware"}),
    "fallen_off_bus": frozenset({"hardware"}),
    "xid": frozenset({"hardware"}),
    "cuda_error": frozenset({"hardware"}),
    "node_failure": frozenset({"infrastructure"}),
    "store_lost": frozenset({"infrastructure"}),
    "sigterm": frozenset({"infrastructure"}),
    "nccl_error": frozenset({"infrastructure"}),
    "nccl_timeout": frozenset({"hang"}),
    "none": frozenset({"none"}),
}
# The restart policy: category -> the decision the analyser prints.
DECISIONS: dict[str, str] = {
    "software": STOP,
    "resource": STOP,
    "hardware": STOP,
    "infrastructure": RESTART,
    "hang": RESTART,
    "none": ERRORS_NOT_FOUND,
}
LABEL_DECISIONS = {"STOP": STOP, "RESTART": RESTART, "NONE": ERRORS_NOT_FOUND}
# The analyser's classes that name each labelled fault (the `failure` dimension): a fault its
# text can show in several ways (a host OOM as the kernel's kill, a bus error as a memory signal)
# has each of them.
FAULT_CLASSES: dict[str, frozenset[str | None]] = {
    "exception": frozenset({"WORKLOAD_EXC", "ASYNC_EXC", "SIGNAL_EXC", "CRASH", "JOB_REJECTED"}),
    "device_assert": frozenset({"DEVICE_ASSERT"}),
    "nan_loss": frozenset({"NAN_LOSS"}),
    "segfault": frozenset({"SEGFAULT", "BUS_ERROR"}),
    "abort": frozenset({"OS_ABORT"}),
    "dataloader_error": frozenset(
        {"WORKLOAD_EXC", "HOST_OOM", "SIGKILL", "BUS_ERROR", "SEGFAULT", "CRASH", "SHM_FULL"}
    ),
    "checkpoint_error": frozenset({"WORKLOAD_EXC", "IO_ERROR", "CRASH"}),
    "cuda_oom": frozenset({"CUDA_OOM"}),
    "host_oom": frozenset({"HOST_OOM", "SIGKILL", "SHM_FULL"}),
    "oom_kill": frozenset({"HOST_OOM", "SIGKILL"}),
    "sigkill": frozenset({"SIGKILL", "HOST_OOM"}),
    "illegal_memory_access": frozenset({"GPU_ERROR"}),
    "ecc_error": frozenset({"GPU_ERROR"}),
    "fallen_off_bus": frozenset({"GPU_ERROR"}),
    "xid": frozenset({"GPU_ERROR"}),
    "cuda_error": frozenset({"GPU_ERROR"}),
    "node_failure": frozenset({"NODE_LOST", "LAUNCH_FAILED", "SLURM_UNREACHABLE"}),
    "store_lost": frozenset({"STORE_LOST"}),
    "sigterm": frozenset({"SIGTERM", "SIGINT", "SIGNAL_EXC"}),
    "nccl_error": frozenset({"NCCL_ERROR"}),
    "nccl_timeout": frozenset({"HANG", "GPU_SLEEP"}),
    "none": frozenset({None}),
}
DIMENSIONS = ("decision", "class", "rank", "failure")


@dataclass(frozen=True)
class LabelledLog:
    """One corpus case: its text and what it means."""

    name: str
    text: str
    source: str
    formats: tuple[str, ...]
    part: str  # "tune" or "check" (part_of): never chosen by hand
    fault: str
    category: str
    decision: str  # as the analyser prints it
    root_ranks: tuple[int, ...] | None

    def dimensions(self, result: LogAttribution) -> dict[str, bool | None]:
        """Each dimension (DIMENSIONS): whether the analyser got it right; None for the rank
        when the text does not determine it."""
        return {
            "decision": result.decision == self.decision,
            "class": result.category == self.category,
            "rank": None if self.root_ranks is None else result.root_rank in self.root_ranks,
            "failure": result.fault_class in FAULT_CLASSES[self.fault],
        }

    def disagreements(self, result: LogAttribution) -> list[str]:
        """What the analyser got wrong on this case (empty: it agrees): the decision, the
        category and, where the text determines it, the root rank."""
        out = []
        if result.decision != self.decision:
            out.append(f"decision {result.decision!r}, expected {self.decision!r}")
        if result.category != self.category:
            out.append(f"category {result.category!r}, expected {self.category!r}")
        if self.root_ranks is not None and result.root_rank not in self.root_ranks:
            out.append(f"root rank {result.root_rank}, expected one of {list(self.root_ranks)}")
        return out


class CorpusError(ValueError):
    pass


# The split (tune / check). Rules are written against `tune` only; `check` is held out, so its
# figure says how the analyser does on logs it was never fitted to. A thread's part is fixed:
# the threads the rules were tuned on before the split are `tune` (tuned_threads.txt, frozen);
# any other thread is `check` when a seeded hash of its URL falls under CHECK_SHARE, so the part
# is decided before anyone has read the case, and a case can never move from check to tune.
SPLIT_SEED = "nvrx-real-logs-split-1"
CHECK_SHARE = 0.40  # of the new threads; overall at least 30 % once the corpus has grown
TUNED_THREADS = CORPUS / "tuned_threads.txt"


def thread_of(source: str) -> str:
    """The thread a source URL belongs to: anchors (`#issuecomment-...`) and a trailing slash
    dropped, scheme and host lower-cased."""
    head, _, _ = source.partition("#")
    scheme, _, rest = head.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}://{host.lower()}{slash}{path}".rstrip("/")


def _tuned_threads() -> frozenset[str]:
    lines = TUNED_THREADS.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def part_of(source: str, tuned: frozenset[str] | None = None) -> str:
    """`tune` or `check` for a case from `source` (see SPLIT_SEED)."""
    import hashlib

    thread = thread_of(source)
    if thread in (_tuned_threads() if tuned is None else tuned):
        return "tune"
    digest = hashlib.sha256(f"{SPLIT_SEED}\n{thread}".encode()).digest()
    return "check" if int.from_bytes(digest[:8], "big") / 2**64 < CHECK_SHARE else "tune"


def _case(meta_path: Path) -> LabelledLog:
    log = meta_path.with_suffix(".log")
    meta: Any = yaml.load(meta_path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
    where = meta_path.name
    if not isinstance(meta, dict) or tuple(sorted(meta)) != tuple(sorted(KEYS)):
        raise CorpusError(f"{where}: keys must be exactly {', '.join(KEYS)}")
    if not str(meta["source"]).startswith("https://"):
        raise CorpusError(f"{where}: source must be the https URL the text comes from")
    if not log.is_file() or not log.read_text(encoding="utf-8").strip():
        raise CorpusError(f"{where}: no text in {log.name}")
    formats = tuple(meta["formats"] or ())
    if not formats or not set(formats) <= FORMATS:
        raise CorpusError(f"{where}: formats {formats} not all in {sorted(FORMATS)}")
    fault, category = meta["fault"], meta["category"]
    if category not in get_args(Category) or category not in FAULT_CATEGORIES.get(fault, ()):
        raise CorpusError(f"{where}: fault {fault!r} cannot be category {category!r}")
    if LABEL_DECISIONS.get(meta["decision"]) != DECISIONS[category]:
        raise CorpusError(
            f"{where}: decision {meta['decision']!r} is not the policy's for {category}"
        )
    ranks = meta["root_ranks"]
    if ranks is not None and not (
        isinstance(ranks, list) and ranks and all(type(r) is int and r >= 0 for r in ranks)
    ):
        raise CorpusError(f"{where}: root_ranks must be null or a list of ranks")
    return LabelledLog(
        name=meta_path.stem,
        text=log.read_text(encoding="utf-8"),
        source=meta["source"],
        formats=formats,
        part=part_of(meta["source"]),
        fault=fault,
        category=category,
        decision=DECISIONS[category],
        root_ranks=tuple(ranks) if ranks is not None else None,
    )


# libyaml's safe loader when PyYAML has it (its wheels do): 1,700 labels load in a tenth of the
# time, and two test modules load the corpus at collection, in every test worker.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def load_corpus(root: Path = CORPUS) -> list[LabelledLog]:
    """Every case, by name. A case whose files or label break the format is a CorpusError.
    Read once per process (callers must not change the list)."""
    metas = sorted(root.glob("*.yaml"))
    orphans = {p.stem for p in root.glob("*.log")} - {p.stem for p in metas}
    if orphans:
        raise CorpusError(f"logs without a label: {', '.join(sorted(orphans))}")
    return [_case(p) for p in metas]

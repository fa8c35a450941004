"""Hostile inputs and the small builders the suite shares (the sessions, cycle files and fake
judge servers themselves come from the existing tests' helpers)."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

from ..fake_openai import GOOD_ANSWER, FakeOpenAI, Reply
from ..test_score_cli import fr, good, make_session

__all__ = ["FakeOpenAI", "Reply", "fr", "good", "make_session"]

# A number past Python's integer-string conversion limit (4300 digits).
HUGE = "9" * 5000

# Letters that are no hex digit: a canary's 8-character pieces cannot turn up in a sha256 name.
_CANARY_LETTERS = "ghjkmnpqrstuvwxyzGHJKMNPQRSTUVWXYZ"


def canary(tag: str) -> str:
    """A unique secret, easy to grep for and unlike anything nvrx writes on its own."""
    rng = random.SystemRandom()
    return f"Cnry{tag}" + "".join(rng.choice(_CANARY_LETTERS) for _ in range(28))


class EchoJudge(FakeOpenAI):
    """A judge that answers well, and whose `notes` echo the credentials the request carried:
    the Authorization header, and a Basic header decoded (a password from the URL)."""

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            headers = {k.lower(): v for k, v in self.seen[-1].headers.items()}
        auth = headers.get("authorization", "")
        if auth.lower().startswith("basic "):
            auth += " = " + base64.b64decode(auth[6:]).decode("utf-8", errors="replace")
        return Reply(content={**GOOD_ANSWER, "notes": f"I was sent {auth}; all fine."})


def yaml_bomb() -> str:
    """A 456-byte config whose nested aliases expand to 9**9 strings (billion laughs), with the
    bomb under a real setting so the loader's result is validated."""
    names = [
        "model", "base_url", "api_key_file", "segment_size", "max_tokens", "temperature",
        "concurrency", "request_timeout", "max_retries",
    ]  # fmt: skip
    text = "score:\n" + f"  {names[0]}: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n"
    for name, (prev, cur) in zip(names[1:], zip("abcdefgh", "bcdefghi", strict=True), strict=True):
        text += f"  {name}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    return text + "slurm:\n  account: *i\n"


def srun_task_range_log(lines: int = 100) -> str:
    """About 5.7 KB of srun lines naming a million tasks each."""
    return "".join(
        f"{i}: srun: error: n{i}: task 0-1048000: Segmentation fault\n" for i in range(lines)
    )


def nested_default(depth: int) -> str:
    return "${A:-" * depth + "x" + "}" * depth


def session_with_two(base: Path) -> Path:
    """A two-experiment session as inject-loop leaves it (journal, TSV, logs, analysis)."""
    session = make_session(
        base,
        [
            ("SEGFAULT", 3, good(3, "Segmentation fault"), fr(3)),
            ("GPU_SLEEP", 6, good(6, "GPU hang", "RESTART IMMEDIATE"), fr(6)),
        ],
    )
    return session.dir


def damage_journal_line(session_dir: Path, lineno: int, text: bytes = b'{"event": "pla') -> None:
    """Replace one line of the session's journal (1-based) with `text`, newline kept."""
    journal = session_dir / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[lineno - 1] = text + b"\n"
    journal.write_bytes(b"".join(lines))


def stub_slurm(bin_dir: Path) -> dict[str, str]:
    """Slurm commands that record their argv and refuse everything, and the environment that
    makes nvrx use them: no test of this suite can reach the real cluster or leave a job."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    calls = bin_dir / "calls.log"
    for name in ("sbatch", "squeue", "sacct", "scontrol", "scancel", "sinfo"):
        tool = bin_dir / name
        tool.write_text(
            "#!/bin/sh\n"
            f'printf "%s\\n" "{name} $*" >> {json.dumps(str(calls))}\n'
            f"echo '{name}: error: Invalid account or account/partition combination specified' >&2\n"
            "exit 1\n"
        )
        tool.chmod(0o755)
    return {"NVRX_SLURM_BIN_DIR": str(bin_dir), "NVRX_SLURM_RETRY_DEADLINE": "0"}


def slurm_calls(bin_dir: Path) -> list[str]:
    calls = bin_dir / "calls.log"
    return calls.read_text().splitlines() if calls.exists() else []


def answering_slurm(bin_dir: Path, nodes: tuple[str, ...], queue_row: str) -> dict[str, str]:
    """Slurm commands that record their argv and answer as a quiet cluster would: sinfo lists
    `nodes` (and none drained), squeue one row, sacct nothing, scontrol and scancel succeed."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    calls = json.dumps(str(bin_dir / "calls.log"))
    listing = "".join(f"{n}\\n" for n in nodes)
    answers = {
        "sinfo": f'case " $* " in *" -t "*) ;; *) printf \'{listing}\' ;; esac',
        "squeue": f"printf '%s\\n' {json.dumps(queue_row)}",
        "sacct": ":",
        "scontrol": ":",
        "scancel": ":",
    }
    for name, answer in answers.items():
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\nprintf "%s\\n" "{name} $*" >> {calls}\n{answer}\n')
        tool.chmod(0o755)
    return {"NVRX_SLURM_BIN_DIR": str(bin_dir), "NVRX_SLURM_RETRY_DEADLINE": "0"}


def many_cycle_log(path: Path, cycles: int, tasks: int = 1 << 17) -> None:
    """`cycles` restart cycles of a `tasks`-task job (131,072: every srun range of it is at the
    task-id cap): rank 0 segfaults in each, and srun reports every other task's exit in one
    60-byte line."""
    with path.open("w") as out:
        for c in range(cycles):
            out.write(f"[ft_launcher] Cycle: {c} Event: rendezvous Node: n1 Rank: 0\n")
            out.write("0: iteration 5 / 100\n0: Fatal Python error: Segmentation fault\n")
            out.write("srun: error: n1: task 0: Segmentation fault (core dumped)\n")
            out.write(f"srun: error: n2: tasks 1-{tasks - 1}: Exited with exit code 1\n")

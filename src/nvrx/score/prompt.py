"""The LLM judge's prompt (upstream's structure) and the reading of its answer.

Ground truth reaches the model only as the structured section below; the log excerpt, the
attribution and the FR table are blinded before they get here (evidence.judge_excerpt).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from nvrx.score.evidence import RESTART_TABLE, Attribution
from nvrx.score.model import DIMENSIONS, Answer, Case, answer_values

SYSTEM = (
    "You are evaluating an AI fault-attribution system for distributed training. "
    "You answer with one JSON object and nothing else."
)


def _range(block: tuple[int, int]) -> str:
    return f"ranks {block[0]}-{block[1]}" if block[0] != block[1] else f"rank {block[0]}"


def build_messages(case: Case) -> list[dict[str, str]]:
    t = case.truth
    expected, why = RESTART_TABLE[t.fault]
    node_block, segment_block = _range(t.node_block), _range(t.segment_block)
    sections = [
        "## Ground truth",
        f"- Fault type: {t.fault.value}",
        f"- Injected rank: {t.rank} (0-based global index; {t.total_ranks} ranks in total)",
        f"- Injected node: {t.node} ({t.gpus_per_node} GPUs per node: {node_block})",
        f"- Injected segment: {segment_block} (segment size {t.segment_size})",
        f"- Injected after iteration: {t.iteration}",
        f"- Cluster: {t.nodes} nodes × {t.gpus_per_node} GPUs = {t.total_ranks} ranks",
        "",
        "## Expected correct behaviour",
        f"- Restart decision: {expected} ({why}).",
        f"- Rank {t.rank} should appear in the primary issues as the root cause.",
        "- FR scope labels: `rank` = the FR missing ranks are exactly "
        f"rank {t.rank}; `node` = they all lie in node {t.node} ({node_block}); "
        f"`segment` = they all lie in {segment_block}; `false` = they include ranks outside "
        "that segment; `no_dumps` = the FR output names no rank.",
        "",
        "## Raw job log (filtered, last lines)",
        "```",
        case.log_excerpt or "(no log)",
        "```",
        "",
        "## Log attribution output",
        "```",
        case.log_attribution.strip() or "(empty)",
        "```",
        "",
        "## FR analysis output",
        "```",
        case.fr_output.strip() or "no_dumps",
        "```",
        "",
        "## Scoring instructions",
        *(
            [
                f"- The attribution answers {cycles} restart cycles, one `Cycle N (lines A-B):` "
                "block each: score the first cycle that names a failure (the injected fault's)."
            ]
            if (cycles := len(Attribution.parse(case.log_attribution).cycles)) > 1
            else []
        ),
        '- restart_correct: "true" if the attribution\'s restart decision equals the expected '
        'one, "false" if not, "N/A" if it gives no decision.',
        '- rank_primary: "true" if the primary issues name the injected rank as the root cause, '
        '"partial" if they name it among other ranks, "false" otherwise.',
        '- rank_any: "true" if the injected rank is mentioned anywhere in the attribution, '
        'else "false".',
        '- fault_described: "true" if the nature of the fault (hang, crash, signal, exception) '
        'is correctly described, "partial" if only partly, "false" if not.',
        '- fr_rank_correct: one of "rank", "node", "segment", "false", "no_dumps" as defined '
        "above.",
        "- notes: one sentence naming the main gap, or confirming the attribution.",
        "",
        "Answer with a bare JSON object only, exactly these keys:",
        json.dumps({**{d: "|".join(answer_values(d)) for d in DIMENSIONS}, "notes": "..."}),
    ]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(sections)}]


def corrective_message(error: str) -> dict[str, str]:
    return {
        "role": "user",
        "content": (
            f"That answer was not valid: {error}. Answer again with only the JSON object, "
            "every key present and every value one of the allowed strings."
        ),
    }


class AnswerError(ValueError):
    """The judge's text is not a valid answer; the message says why, briefly."""


def _unfence(text: str) -> str:
    r"""The text inside a ```json ... ``` fence (string operations: a regex with `\s*` at both
    ends is quadratic on a long run of spaces)."""
    text = text.strip()
    if text[:3] == "```":
        text = text[3:]
        if text[:4].lower() == "json":
            text = text[4:]
    return text.removesuffix("```").strip()


_BRACES = re.compile(r'[{}"\\\n]')
# Balanced {...} spans parsed at most: a real answer has a few; junk must not cost more.
MAX_CANDIDATES = 64


def _json_objects(text: str) -> list[Any]:
    """Every top-level JSON object embedded in free text, in order.

    One scan pairs the braces (outside JSON strings); the balanced spans are then parsed in
    order, outermost first: one that parses hides the spans inside it, one that does not lets
    them be tried. At most MAX_CANDIDATES parses: linear in the text, whatever it holds."""
    found: list[Any] = []
    covered = -1
    attempts = 0
    for start, end in _brace_pairs(text):
        if start < covered:
            continue
        if attempts == MAX_CANDIDATES:
            break
        attempts += 1
        try:
            found.append(json.loads(text[start:end]))
        except (ValueError, RecursionError):
            continue
        covered = end
    return found


def _brace_pairs(text: str) -> list[tuple[int, int]]:
    """(start, end) of every matched `{...}`, by start. Quotes count only inside braces (prose
    has apostrophes and quotes of its own), and a newline ends a string (JSON strings hold
    none): a stray quote cannot hide the rest of the answer."""
    stack: list[int] = []
    pairs: list[tuple[int, int]] = []
    in_string = False
    escaped = -1  # the index a backslash in a string escapes
    for m in _BRACES.finditer(text):
        ch, at = m.group(), m.start()
        if at == escaped:
            continue
        if ch == "\n":
            in_string = False
        elif in_string:
            if ch == "\\":
                escaped = at + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = bool(stack)
        elif ch == "{":
            stack.append(at)
        elif ch == "}" and stack:
            pairs.append((stack.pop(), m.end()))
    pairs.sort()
    return pairs


_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)


def parse_answer(text: str) -> Answer:
    """The answer from a model's text: bare JSON, fenced JSON, or JSON in prose. Reasoning
    (`<think>...</think>`) is dropped, and of several objects the last valid one wins: drafts
    come first, the final answer last. Raises AnswerError naming the problem."""
    text = _THINK.sub("", text)
    stripped = _unfence(text)
    candidates: list[Any]
    try:
        candidates = [json.loads(stripped)]
    except (ValueError, RecursionError):
        candidates = _json_objects(text)
    if not candidates:
        snippet = " ".join(text.split())[:80]
        raise AnswerError(f"no JSON object in the answer ({snippet!r})")
    last_error = ""
    for candidate in reversed(candidates):
        if not isinstance(candidate, dict):
            last_error = last_error or f"expected a JSON object, got {type(candidate).__name__}"
            continue
        try:
            return Answer.model_validate(candidate)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "answer"
            last_error = last_error or f"{where}: {err['msg']}"
    raise AnswerError(last_error)

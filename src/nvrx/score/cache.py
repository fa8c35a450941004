"""The on-disk verdict cache: an identical question to the same judge costs no call.

The key covers everything that can change an answer — base URL, model, prompt version, answer
schema, temperature, token limit and the full prompt — and nothing secret: the API key is neither
in the key nor in the file. Only validated answers are stored; a failure is never cached.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nvrx.files import InputError, read_bounded, write_atomic
from nvrx.score.model import PROMPT_VERSION, Answer, Usage, answer_schema

SCHEMA_VERSION = hashlib.sha256(json.dumps(answer_schema(), sort_keys=True).encode()).hexdigest()[
    :12
]


def cache_key(
    *,
    base_url: str,
    model: str,
    temperature: float,
    max_tokens: int,
    messages: list[dict[str, str]],
) -> str:
    doc = {
        "base_url": base_url.rstrip("/"),
        "model": model,
        "prompt_version": PROMPT_VERSION,
        "schema": SCHEMA_VERSION,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "messages": messages,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    answer: Answer
    usage: Usage  # what the original call cost


class VerdictCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> CachedAnswer | None:
        try:
            doc = json.loads(read_bounded(self._path(key), "cached verdict", limit=1 << 20)[0])
            if doc.get("masked") is not True:
                return None  # written before answers were masked: may hold a secret in clear
            return CachedAnswer(Answer.model_validate(doc["answer"]), Usage(**doc["usage"]))
        except (InputError, ValueError, KeyError, TypeError, RecursionError, ValidationError):
            return None  # absent or damaged: ask again (and overwrite)

    def put(self, key: str, answer: Answer, usage: Usage, identity: dict[str, Any]) -> None:
        doc = {
            "key": key,
            **identity,
            "prompt_version": PROMPT_VERSION,
            "answer": answer.model_dump(),
            "masked": True,  # the caller masked the answer's secrets (LlmJudge does)
            "usage": usage.model_dump(),
        }
        # Atomic: concurrent runs sharing a cache never read half a file.
        write_atomic(self._path(key), json.dumps(doc, sort_keys=True), mode=0o600)

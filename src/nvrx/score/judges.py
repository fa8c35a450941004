"""Which judges, with which endpoint and key; then every case through every judge.

Endpoint: `score.base_url` (flag `--base-url`, `JUDGE_BASE_URL`, `NVRX_SCORE_BASE_URL`, file),
else `inject.llm_base_url` (`NVRX_LLM_BASE_URL`, default NVIDIA's API). Unlike upstream, a flag
beats `JUDGE_BASE_URL` (the same precedence as every other setting).

API key, first found: `JUDGE_API_KEY`, `JUDGE_API_KEY_FILE`, `LLM_API_KEY`,
`LLM_API_KEY_FILE` (or their NVRX_ names and config keys), `~/.llm_api_key`,
`~/.config/nvrx/llm_api_key`. A loopback endpoint may have none.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import SecretStr

from nvrx.config import NvrxConfig, known_secrets, redact_urls
from nvrx.files import InputError, read_key_file
from nvrx.retry import RetryPolicy
from nvrx.score.cache import VerdictCache
from nvrx.score.llm import Endpoint, LlmJudge
from nvrx.score.model import Case, ScoreError, Verdict
from nvrx.score.rules import judge_rules
from nvrx.score.vote import vote

Warn = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class JudgeSpec:
    kind: Literal["rules", "llm"]
    model: str | None = None

    @classmethod
    def parse(cls, text: str) -> JudgeSpec:
        kind, _, model = text.strip().partition(":")
        if kind == "rules" and not model:
            return cls("rules")
        if kind == "llm":
            if _ and not model.strip():
                raise ScoreError(f"--judge {text!r}: the model after 'llm:' is empty")
            return cls("llm", model.strip() or None)
        raise ScoreError(f"--judge {text!r}: expected rules, llm or llm:MODEL")


def default_judges(config: NvrxConfig) -> list[JudgeSpec]:
    choice = config.score.judge
    if choice == "auto":
        choice = "llm" if config.score.base_url else "rules"
    return [JudgeSpec(choice)]


def base_url(config: NvrxConfig) -> str:
    return config.score.base_url or config.inject.llm_base_url


def is_loopback(url: str) -> bool:
    """The URL's host is this machine: `localhost` or a loopback address (127.0.0.0/8, ::1).
    A name such as `127.example.com` is not: it may resolve anywhere."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


KEY_SOURCES = (
    "JUDGE_API_KEY, JUDGE_API_KEY_FILE, LLM_API_KEY, LLM_API_KEY_FILE, ~/.llm_api_key "
    "or ~/.config/nvrx/llm_api_key"
)


def _checked(key: SecretStr, where: str) -> SecretStr:
    """A key that can go in an HTTP header (a pasted key may carry a `…` or a newline)."""
    value = key.get_secret_value()
    if not value.isascii() or not value.isprintable():
        raise ScoreError(f"the API key from {where} has non-ASCII or control characters")
    return key


def _key_file(path: Path, warn: Warn) -> SecretStr:
    try:
        text, mode = read_key_file(path, "API key file")
    except InputError as exc:
        raise ScoreError(str(exc)) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warn(
            f"API key file {path} is readable by others (mode {stat.filemode(mode)}); chmod 600 it"
        )
    return _checked(SecretStr(text), f"file {path}")


def resolve_api_key(config: NvrxConfig, home: Path, warn: Warn) -> SecretStr | None:
    s, inj = config.score, config.inject
    if s.api_key is not None:
        return _checked(s.api_key, "score.api_key (JUDGE_API_KEY)")
    if s.api_key_file is not None:
        return _key_file(Path(s.api_key_file), warn)
    if inj.llm_api_key is not None:
        return _checked(inj.llm_api_key, "inject.llm_api_key (LLM_API_KEY)")
    if inj.llm_api_key_file is not None:
        return _key_file(Path(inj.llm_api_key_file), warn)
    for candidate in (home / ".llm_api_key", home / ".config" / "nvrx" / "llm_api_key"):
        if candidate.is_file():
            return _key_file(candidate, warn)
    return None


def build_judges(
    specs: Sequence[JudgeSpec],
    config: NvrxConfig,
    *,
    warn: Warn,
    home: Path | None = None,
) -> list[LlmJudge | None]:
    """One entry per spec: an LlmJudge, or None for the rules judge."""
    judges: list[LlmJudge | None] = []
    url, key = base_url(config), None
    if any(spec.kind == "llm" for spec in specs):
        key = resolve_api_key(config, home or Path(os.path.expanduser("~")), warn)
        if key is None and not is_loopback(url):
            shown = redact_urls(url)
            raise ScoreError(f"no API key for the judge at {shown}: set {KEY_SOURCES}")
    s = config.score
    cache = VerdictCache(Path(s.cache_dir)) if s.cache else None
    for spec in specs:
        if spec.kind == "rules":
            judges.append(None)
            continue
        judges.append(
            LlmJudge(
                Endpoint(url, spec.model or s.model, key, tuple(known_secrets(config, os.environ))),
                max_tokens=s.max_tokens,
                max_reply_bytes=s.max_reply_bytes,
                temperature=s.temperature,
                timeout=s.request_timeout,
                retry=RetryPolicy(
                    max_retries=s.max_retries,
                    deadline=s.retry_deadline,
                    initial_backoff=s.retry_initial_backoff,
                    max_backoff=s.retry_max_backoff,
                ),
                concurrency=s.concurrency,
                cache=cache,
            )
        )
    return judges


async def _judge_everything(
    judges: Sequence[LlmJudge | None],
    cases: Sequence[Case],
    done: Callable[[int], None] | None,
) -> list[list[Verdict]]:
    async def one(judge: LlmJudge | None) -> list[Verdict]:
        if judge is None:
            verdicts = []
            for i, case in enumerate(cases):
                verdicts.append(judge_rules(case))
                if done is not None:
                    done(i)
            return verdicts
        return await judge.judge_all(cases, done)

    return list(await asyncio.gather(*(one(j) for j in judges)))


def score(
    judges: Sequence[LlmJudge | None],
    cases: Sequence[Case],
    done: Callable[[], None] | None = None,
) -> list[Verdict]:
    """Every case's verdict: the single judge's, or the per-dimension vote of several. `done`
    is called once per case, when every judge has given its verdict (a progress bar counts
    cases, whatever the number of judges)."""
    answered = [0] * len(cases)

    def one_verdict(i: int) -> None:
        answered[i] += 1
        if answered[i] == len(judges) and done is not None:
            done()

    per_judge = asyncio.run(_judge_everything(judges, cases, one_verdict))
    if len(per_judge) == 1:
        return per_judge[0]
    return [vote(case, [verdicts[i] for verdicts in per_judge]) for i, case in enumerate(cases)]


def judge_label(judges: Sequence[LlmJudge | None]) -> str:
    names = [j.name if j is not None else "rules" for j in judges]
    return names[0] if len(names) == 1 else "vote(" + ", ".join(names) + ")"


def campaign_judge(config: NvrxConfig, warn: Warn) -> Callable[[list[Case]], list[Verdict]]:
    """The configured judge as a function of cases, for a campaign's analysis workers."""
    judges = build_judges(default_judges(config), config, warn=warn)
    return lambda cases: score(judges, cases)

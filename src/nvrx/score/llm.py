"""The LLM judge: `POST {base_url}/chat/completions` on any OpenAI-compatible server.

What upstream lacked, in order of a request's life:
- a cache hit costs no call;
- `response_format` json_schema, stepping down to json_object and then to plain text (with
  tolerant JSON extraction) when the server rejects it with a 400/422 that names the format —
  remembered for the run; any other 400 (e.g. context length) fails with the server's message;
- 429, 5xx, timeouts and connection errors retried with jittered exponential backoff that honours
  `Retry-After`, up to `max_retries` and a deadline (a Retry-After past the deadline — a daily
  quota — gives up at once); each retry after a timeout waits twice as long for its answer;
  auth errors and other 4xx fail at once;
- a judge that has never answered and cannot be connected to (refused, a name that does not
  resolve, nothing accepting) is retried by one request for CONNECT_GRACE, then given up for the
  whole run: every other case is unscored with the same reason and no request starts after;
- an answer that is not valid is retried once with a corrective message;
- whatever cannot be recovered is an `unscored` verdict with the reason: never a default score.
The API key goes in the Authorization header only; it is never in a message, reason or file.

One module for one request's life, from the cache to the verdict: each step above decides what
the next one sees.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import SecretStr

from nvrx.config import redact_text, redact_urls
from nvrx.display import counted
from nvrx.retry import RetryPolicy
from nvrx.score.cache import VerdictCache, cache_key
from nvrx.score.evidence import normalise_fr_label
from nvrx.score.model import Case, Usage, Verdict, answer_schema, invalid_verdict, unscored_verdict
from nvrx.score.prompt import AnswerError, build_messages, corrective_message, parse_answer

FORMATS = ("json_schema", "json_object", "text")


@dataclass(frozen=True, slots=True)
class Endpoint:
    base_url: str
    model: str
    api_key: SecretStr | None = field(default=None, repr=False)
    # Every other secret the run knows (other keys, credential variables): a model may echo
    # what a log excerpt showed it.
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    @property
    def display(self) -> str:
        """The base URL as printed: without any user:password part, credential query
        parameters masked, the port kept (two servers on one host differ only by it)."""
        parts = urlsplit(self.base_url)
        shown = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        return redact_urls(shown)

    def redact(self, text: str) -> str:
        """Text with every secret the endpoint holds masked: a server or model may echo them."""
        secrets = [self.api_key.get_secret_value()] if self.api_key is not None else []
        parts = urlsplit(self.base_url)
        secrets += [p for p in (parts.password, parts.username) if p]
        return redact_text(text, [*secrets, *self.secrets])


class JudgeFailure(Exception):
    """The judge could not answer this case; the message is the `unscored` reason."""

    def __init__(self, reason: str, usage: Usage | None = None) -> None:
        super().__init__(reason)
        self.usage = usage or Usage()


@dataclass(slots=True)
class _Completion:
    content: str
    finish_reason: str | None
    usage: Usage


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """`Retry-After` as seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True, slots=True)
class _Reply:
    """One HTTP answer, its body read in full (within the reply cap)."""

    status: int
    headers: httpx.Headers
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class _ReplyTooLarge(Exception):
    pass


def _error_text(reply: _Reply, redact: Callable[[str], str]) -> str:
    """The server's error message, one line, its secrets masked before it is cut (a key across
    the cut would otherwise leave its first characters behind)."""
    try:
        doc = reply.json()
    except (ValueError, RecursionError):
        text = reply.body.decode("utf-8", errors="replace")
    else:
        message = doc.get("error", doc) if isinstance(doc, dict) else doc
        if isinstance(message, dict):
            message = message.get("message", message)
        try:
            text = str(message)
        except ValueError:  # holds an integer too long to print
            text = type(message).__name__
    return " ".join(redact(text).split())[:200]


_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "schema", "grammar", "format")


def _about_format(reply: _Reply) -> bool:
    """Whether a 400/422 rejects the response_format (step down) rather than the request
    itself, e.g. a prompt over the context length (fail with the server's message)."""
    text = _error_text(reply, lambda t: t).lower()
    return any(word in text for word in _FORMAT_WORDS)


# A judge that has never answered and cannot be connected to is most likely not there at all (a
# wrong URL, a server not started): it is retried for CONNECT_GRACE from the first failed connect,
# one request at a time, then given up for the run, not waited for the whole retry deadline by
# every case. Once it has answered, a refused connection is a restart: retried with the policy.
CONNECT_GRACE = 3.0  # seconds: no retry of a judge never reached starts later than this
CONNECT_TIMEOUT = 3.0  # seconds a connection is given to be accepted (a host dropping packets)


def _connect_cause(exc: httpx.TransportError, connect_timeout: float) -> str:
    """Why no connection was made, in a few words: refused, a host name that does not resolve,
    nothing accepting in time, else the system's message."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"no connection within {connect_timeout:g} s"
    seen: BaseException | None = exc
    for _ in range(8):  # httpx wraps the socket's error in a few layers
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return f"host name not resolved ({seen.strerror})"
        seen = seen.__cause__ or seen.__context__
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass(frozen=True, slots=True)
class Unreachable:
    """A judge given up on for a run: `reason` is the `unscored` reason of each of the `cases`
    it left without a verdict."""

    reason: str
    cases: int


@dataclass(eq=False)
class _Run:
    """What the requests of one `judge_all` share. Whether the judge can be reached is the
    run's: a campaign judges each experiment in a run of its own, and the server may have been
    started since the last one."""

    client: httpx.AsyncClient
    gate: asyncio.Semaphore
    # Held by the one request that retries a judge no request has reached yet: the others wait
    # for its outcome rather than each knocking at a dead port.
    probe: asyncio.Lock = field(default_factory=asyncio.Lock)
    # When the run's first attempt that made no connection began: CONNECT_GRACE counts from it.
    unconnected_since: float | None = None
    unreachable: str | None = None  # the reason, once given up


class LlmJudge:
    def __init__(
        self,
        endpoint: Endpoint,
        *,
        max_tokens: int = 1024,
        max_reply_bytes: int = 1 << 20,
        temperature: float = 0.0,
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        concurrency: int = 4,
        cache: VerdictCache | None = None,
        client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.endpoint = endpoint
        self.max_tokens = max_tokens
        self.max_reply_bytes = max_reply_bytes
        self.temperature = temperature
        self.timeout = timeout
        self.retry = retry or RetryPolicy(deadline=600.0, max_retries=6)
        self.concurrency = concurrency
        self.cache = cache
        self._client = client
        self._sleep = sleep
        self._jitter = jitter
        self._clock = clock
        self.connect_timeout = connect_timeout
        self._format = 0  # index into FORMATS; only ever steps down
        self.notes: list[str] = []  # things the run should tell the user (format fallbacks)
        self.usage = Usage()
        self._answered = False  # the server has answered a request (any HTTP status), ever
        self.unreachable: Unreachable | None = None  # the last run's, when it gave up

    @property
    def name(self) -> str:
        return f"llm:{self.endpoint.model}"

    @property
    def response_format(self) -> str:
        return FORMATS[self._format]

    async def judge_all(
        self, cases: Sequence[Case], done: Callable[[int], None] | None = None
    ) -> list[Verdict]:
        """Every case's verdict, at most `concurrency` in flight; `done` is called with the
        case's index as each arrives (a progress bar). A judge given up on as unreachable is
        `unreachable` afterwards, with the number of cases it left unscored."""
        self.unreachable = None
        own = self._client is None
        client = self._client or httpx.AsyncClient(
            limits=httpx.Limits(max_connections=self.concurrency)
        )
        run = _Run(client, asyncio.Semaphore(self.concurrency))
        try:

            async def one(i: int, case: Case) -> Verdict:
                verdict = await self.judge(case, run)
                if done is not None:
                    done(i)
                return verdict

            verdicts = list(await asyncio.gather(*(one(i, c) for i, c in enumerate(cases))))
            if run.unreachable is not None:
                reason = self.endpoint.redact(run.unreachable)
                left = sum(v.status == "unscored" and v.reason == reason for v in verdicts)
                self.unreachable = Unreachable(reason, left)
            return verdicts
        finally:
            if own:
                await client.aclose()

    async def judge(self, case: Case, run: _Run) -> Verdict:
        """The case's verdict; whatever goes wrong is this case's `unscored`, never the run's
        crash (the other cases' paid answers are kept)."""
        started = self._clock()
        try:
            return await self._judge(case, run)
        except Exception as exc:
            return self._unscored(
                case, f"judge error: {type(exc).__name__}: {exc}", started, Usage()
            )

    async def _judge(self, case: Case, run: _Run) -> Verdict:
        if case.problem is not None:
            return unscored_verdict(case, self.name, case.problem, model=self.endpoint.model)
        if not case.truth.run_valid:
            return invalid_verdict(case, self.name, self.endpoint.model)
        messages = build_messages(case)
        key = cache_key(
            base_url=self.endpoint.base_url,
            model=self.endpoint.model,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            messages=messages,
        )
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            return self._verdict(case, hit.answer, 0.0, Usage(), cache_hit=True)

        started = self._clock()
        usage = Usage()
        async with run.gate:
            conversation = list(messages)
            for attempt in (1, 2):
                try:
                    completion = await self._complete(run, conversation)
                except JudgeFailure as exc:
                    return self._unscored(case, str(exc), started, usage + exc.usage)
                usage += completion.usage
                try:
                    answer = parse_answer(completion.content)
                except AnswerError as exc:
                    error = str(exc)
                    if completion.finish_reason == "length":
                        error += f" (answer cut at max_tokens={self.max_tokens})"
                    if attempt == 2:
                        return self._unscored(
                            case, f"judge answer invalid twice: {error}", started, usage
                        )
                    conversation += [
                        {"role": "assistant", "content": completion.content},
                        corrective_message(error),
                    ]
                    continue
                break
        self.usage += usage
        # Masked before it is cached: a later run (another key, another user of a shared cache)
        # replays the cached notes as they are.
        answer = answer.model_copy(update={"notes": self.endpoint.redact(answer.notes)})
        if self.cache is not None:
            try:
                self.cache.put(
                    key,
                    answer,
                    usage,
                    {"base_url": self.endpoint.display, "model": self.endpoint.model},
                )
            except OSError as exc:  # the verdict is paid for: keep it, say the cache failed
                note = f"cannot write the verdict cache {self.cache.root}: {exc.strerror or exc}"
                if note not in self.notes:
                    self.notes.append(note)
        return self._verdict(case, answer, self._clock() - started, usage, cache_hit=False)

    def _unscored(self, case: Case, reason: str, started: float, usage: Usage) -> Verdict:
        self.usage += usage
        return unscored_verdict(
            case,
            self.name,
            self.endpoint.redact(reason),
            model=self.endpoint.model,
            latency_s=self._clock() - started,
            usage=usage,
        )

    def _verdict(
        self, case: Case, answer: Any, latency: float, usage: Usage, *, cache_hit: bool
    ) -> Verdict:
        dims = answer.dimensions()
        answered = dims["fr_rank_correct"]
        dims["fr_rank_correct"] = normalise_fr_label(answered, case.fr_output, case.truth)
        return Verdict(
            case=case.id,
            status="scored",
            judge=self.name,
            model=self.endpoint.model,
            notes=self.endpoint.redact(answer.notes),  # again: a cached answer from elsewhere
            fr_label_answered=answered,
            latency_s=latency,
            usage=usage,
            cache_hit=cache_hit,
            **dims,
        )

    def _body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.response_format == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": "attribution_verdict",
                    "strict": True,
                    "schema": answer_schema(),
                },
            }
        elif self.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.endpoint.api_key is not None:
            headers["Authorization"] = f"Bearer {self.endpoint.api_key.get_secret_value()}"
        return headers

    def _backoff(self, failures: int) -> float:
        return self.retry.backoff(failures, lambda low, high: low + (high - low) * self._jitter())

    async def _complete(self, run: _Run, messages: list[dict[str, str]]) -> _Completion:
        """One chat completion, through format fallback and transient retries."""
        policy = self.retry
        started = self._clock()
        deadline = started + policy.deadline
        failures = 0
        timeout = self.timeout
        usage = Usage()
        probing = False  # this request holds run.probe: it alone retries a judge not reached
        try:
            while True:
                if not probing and run.unconnected_since is not None and not self._answered:
                    await run.probe.acquire()
                    probing = True
                if probing:
                    if run.unreachable is not None:
                        raise JudgeFailure(run.unreachable, usage)
                    if self._answered:  # another request got through while this one waited
                        run.probe.release()
                        probing = False
                fmt = self.response_format
                retry_after: float | None = None
                unconnected: str | None = None  # why this attempt made no connection
                attempt_started = self._clock()
                usage += Usage(requests=1)
                try:
                    # A total deadline per request: httpx's timeouts are per read, and a server
                    # that sends a byte every few seconds would never trip them.
                    reply = await asyncio.wait_for(
                        self._post(run.client, messages, timeout), timeout
                    )
                except _ReplyTooLarge:
                    cap = self.max_reply_bytes
                    raise JudgeFailure(
                        f"the reply is larger than {cap} bytes (score.max_reply_bytes)", usage
                    ) from None
                except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                    unconnected = _connect_cause(exc, min(self.connect_timeout, timeout))
                    problem = f"cannot reach {self.endpoint.display}: {unconnected}"
                except (httpx.TimeoutException, TimeoutError):
                    problem = f"no answer within {timeout:g} s"
                    # A busy server (a local one with fewer slots than our requests in flight)
                    # queues work: resending it with the same timeout would only cancel and
                    # redo it. Each retry after a timeout waits twice as long, within the
                    # deadline.
                    timeout = max(self.timeout, min(2 * timeout, deadline - self._clock()))
                except httpx.TransportError as exc:
                    problem = f"cannot reach {self.endpoint.display} ({type(exc).__name__})"
                else:
                    self._answered = True
                    status = reply.status
                    if status == 200:
                        completion = self._read(reply)
                        if completion is not None:
                            completion.usage = completion.usage + usage
                            return completion
                        problem = "HTTP 200 with a body that is not a chat completion"
                    elif status in (401, 403):
                        raise JudgeFailure(
                            f"authentication failed (HTTP {status}) at {self.endpoint.display}",
                            usage,
                        )
                    elif status == 429 or status >= 500:
                        problem = f"HTTP {status}"
                        retry_after = retry_after_seconds(reply.headers.get("Retry-After"))
                    elif status in (400, 422) and fmt != "text" and _about_format(reply):
                        self._step_down(fmt, status)
                        continue
                    else:
                        text = _error_text(reply, self.endpoint.redact)
                        raise JudgeFailure(f"HTTP {status}: {text}", usage)
                failures += 1
                if unconnected is not None and not self._answered:
                    if run.unconnected_since is None:
                        run.unconnected_since = attempt_started
                    if not probing:
                        await run.probe.acquire()
                        probing = True
                    if run.unreachable is not None:
                        raise JudgeFailure(run.unreachable, usage)
                if probing and (unconnected is None or self._answered):
                    run.probe.release()  # the judge is there: every request retries on its own
                    probing = False
                if probing:
                    assert unconnected is not None and run.unconnected_since is not None
                    now = self._clock()
                    give_up_at = min(run.unconnected_since + CONNECT_GRACE, deadline)
                    if policy.exhausted(failures) or now >= give_up_at:
                        run.unreachable = (
                            f"nothing answers at {self.endpoint.display}: {unconnected} "
                            f"({counted(failures, 'attempt')} in "
                            f"{now - run.unconnected_since:.1f} s)"
                        )
                        raise JudgeFailure(run.unreachable, usage)
                    # The last retry lands at the grace's end rather than giving up before it.
                    await self._sleep(min(self._backoff(failures), give_up_at - now))
                    continue
                if policy.exhausted(failures):
                    raise JudgeFailure(
                        f"{problem}; gave up after {counted(failures, 'attempt')}", usage
                    )
                delay = self._backoff(failures)
                if retry_after is not None:
                    delay = max(delay, retry_after)
                if self._clock() + delay > deadline:
                    raise JudgeFailure(
                        f"{problem}; retry deadline of {policy.deadline:g} s reached "
                        f"after {counted(failures, 'attempt')}"
                        + (f" (Retry-After {retry_after:g} s)" if retry_after is not None else ""),
                        usage,
                    )
                await self._sleep(delay)
        finally:
            if probing:
                run.probe.release()

    def _step_down(self, fmt: str, status: int) -> None:
        if self.response_format == fmt:  # another request may have stepped already
            self._format += 1
            self.notes.append(
                f"{self.endpoint.display} rejected response_format {fmt} (HTTP {status}); "
                f"using {self.response_format}"
            )

    async def _post(
        self, client: httpx.AsyncClient, messages: list[dict[str, str]], timeout: float
    ) -> _Reply:
        """POST one request; the reply's body is read up to `max_reply_bytes` (decoded, so a
        compressed bomb stops there too)."""
        body = bytearray()
        async with client.stream(
            "POST",
            self.endpoint.url,
            json=self._body(messages),
            headers=self._headers(),
            # A connection is accepted in milliseconds or not at all: waiting the whole answer
            # timeout for one would only delay saying that nothing answers.
            timeout=httpx.Timeout(timeout, connect=min(self.connect_timeout, timeout)),
        ) as response:
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > self.max_reply_bytes:
                    raise _ReplyTooLarge
            return _Reply(response.status_code, response.headers, bytes(body))

    @staticmethod
    def _read(reply: _Reply) -> _Completion | None:
        try:
            doc = reply.json()
            choice = doc["choices"][0]
            content = choice["message"].get("content") or ""
            finish = choice.get("finish_reason")
            raw_usage = doc.get("usage") or {}
            usage = Usage(
                prompt_tokens=int(raw_usage.get("prompt_tokens") or 0),
                completion_tokens=int(raw_usage.get("completion_tokens") or 0),
            )
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError):
            return None
        if not isinstance(content, str):
            return None
        return _Completion(content, finish, usage)

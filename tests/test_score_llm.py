"""The LLM judge against a real (misbehaving on purpose) HTTP server on 127.0.0.1: retries,
Retry-After, deadlines, format fallbacks, corrective retries, the cache, honest `unscored`, and a
judge that is not there at all (a closed port, a port that accepts nothing)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from nvrx.retry import RetryPolicy
from nvrx.score.cache import VerdictCache
from nvrx.score.llm import Endpoint, LlmJudge, Unreachable, retry_after_seconds
from nvrx.score.model import (
    ALLOWED,
    DIMENSIONS,
    Case,
    GroundTruth,
    Verdict,
    answer_schema,
    answer_values,
)

from .fake_openai import GOOD_ANSWER, FakeOpenAI, Reply
from .loopback import NotAccepting, closed_port

KEY = "sk-test-THIS-MUST-NEVER-LEAK-1234"

FR_RANK_3 = "PGID | desc | op | size | dtype | Missing Ranks\n0 | default_pg,0 | nccl:all_reduce | 8 | Float | 3\n"


def case(n: int = 0, **kw: object) -> Case:
    truth = GroundTruth.build("SEGFAULT", 3, 5, 2, 4, 32)
    fields: dict[str, object] = {
        "id": f"case-{n}",
        "truth": truth,
        "log_excerpt": f"3: Segmentation fault (core dumped) #{n}",
        "log_attribution": "STOP - DONT RESTART IMMEDIATE\nAttribution: Primary issues: [rank 3 segfault]",
        "fr_output": FR_RANK_3,
    }
    fields.update(kw)
    return Case(**fields)  # type: ignore[arg-type]


class Sleeps:
    """Records backoff delays instead of sleeping them (the delays are what is under test)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class Clock:
    """Time that passes only when the judge sleeps: a budget of seconds is checked to the
    second without waiting it out."""

    def __init__(self) -> None:
        self.now = 0.0
        self.delays: list[float] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)  # as a real sleep does, let the other requests run


class CountingTransport(httpx.AsyncBaseTransport):
    """The real transport, counting the requests it was handed and how many were in flight at
    once (a refused connection leaves no trace on any listener)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.requests = 0
        self.active = 0
        self.peak = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            return await self.inner.handle_async_request(request)
        finally:
            self.active -= 1


def judge_for(
    server: FakeOpenAI,
    *,
    sleeps: Sleeps | None = None,
    retry: RetryPolicy | None = None,
    cache: VerdictCache | None = None,
    timeout: float = 5.0,
    concurrency: int = 4,
) -> LlmJudge:
    return LlmJudge(
        Endpoint(server.base_url, "judge-model", SecretStr(KEY)),
        timeout=timeout,
        retry=retry or RetryPolicy(max_retries=4, deadline=60, initial_backoff=0.5, max_backoff=4),
        cache=cache,
        concurrency=concurrency,
        sleep=sleeps or Sleeps(),
        jitter=lambda: 1.0,
    )


def run(judge: LlmJudge, cases: list[Case]) -> list[Verdict]:
    return asyncio.run(judge.judge_all(cases))


def test_a_good_answer_is_scored_with_usage_and_the_schema_requested() -> None:
    with FakeOpenAI() as server:
        [v] = run(judge_for(server), [case()])
    assert v.status == "scored"
    assert v.dimensions() == {k: GOOD_ANSWER[k] for k in v.dimensions()}
    assert v.usage.prompt_tokens == 100 and v.usage.completion_tokens == 20
    assert v.usage.requests == 1
    body = server.seen[0].body
    assert body["temperature"] == 0.0
    assert body["max_tokens"] == 1024
    assert body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]["schema"]
    assert set(schema["required"]) == {*GOOD_ANSWER}
    assert server.seen[0].headers["Authorization"] == f"Bearer {KEY}"


def test_429_is_retried_honouring_retry_after() -> None:
    sleeps = Sleeps()
    replies = [Reply(status=429, headers={"Retry-After": "3"}), Reply(content=GOOD_ANSWER)]
    with FakeOpenAI(replies) as server:
        [v] = run(judge_for(server, sleeps=sleeps), [case()])
    assert v.status == "scored"
    assert len(server.seen) == 2
    assert sleeps.delays == [3.0]  # backoff would have been 0.5 s: Retry-After wins
    assert v.usage.requests == 2


def test_5xx_and_garbage_bodies_are_retried_with_growing_backoff() -> None:
    sleeps = Sleeps()
    replies = [Reply(status=500), Reply(status=503), Reply(raw=b"<html>proxy error</html>")]
    with FakeOpenAI(replies) as server:
        [v] = run(judge_for(server, sleeps=sleeps), [case()])
    assert v.status == "scored"
    assert len(server.seen) == 4
    assert sleeps.delays == [0.5, 1.0, 2.0]


def test_retries_stop_at_max_retries_and_the_case_is_unscored() -> None:
    with FakeOpenAI(default=Reply(status=502)) as server:
        [v] = run(judge_for(server, retry=RetryPolicy(max_retries=2, deadline=60)), [case()])
    assert v.status == "unscored"
    assert v.reason == "HTTP 502; gave up after 3 attempts"
    assert v.restart_correct is None and v.notes is None  # never a default score
    assert len(server.seen) == 3


def test_max_retries_zero_is_honoured() -> None:
    with FakeOpenAI(default=Reply(status=429)) as server:
        [v] = run(judge_for(server, retry=RetryPolicy(max_retries=0)), [case()])
    assert v.status == "unscored"
    assert len(server.seen) == 1


def test_a_retry_after_beyond_the_deadline_gives_up_at_once() -> None:
    sleeps = Sleeps()
    quota = Reply(status=429, headers={"Retry-After": "86400"})
    with FakeOpenAI(default=quota) as server:
        [v] = run(
            judge_for(server, sleeps=sleeps, retry=RetryPolicy(max_retries=5, deadline=600)),
            [case()],
        )
    assert v.status == "unscored"
    assert "deadline" in (v.reason or "") and "Retry-After 86400" in (v.reason or "")
    assert sleeps.delays == []
    assert len(server.seen) == 1


def test_a_timeout_is_retried_then_reported() -> None:
    with FakeOpenAI(default=Reply(content=GOOD_ANSWER, delay=1.5)) as server:
        [v] = run(
            judge_for(server, timeout=0.3, retry=RetryPolicy(max_retries=1, deadline=60)),
            [case()],
        )
    assert v.status == "unscored"
    assert v.reason == "no answer within 0.6 s; gave up after 2 attempts"


def test_a_retry_after_a_timeout_waits_longer_so_a_busy_server_can_answer() -> None:
    # A local server with fewer slots than requests in flight answers late, not never:
    # resending with the same timeout would cancel and redo the same work forever.
    with FakeOpenAI(default=Reply(content=GOOD_ANSWER, delay=0.5)) as server:
        [v] = run(
            judge_for(server, timeout=0.3, retry=RetryPolicy(max_retries=1, deadline=60)),
            [case()],
        )
    assert v.status == "scored", v.reason
    assert v.rank_primary == "true"
    assert len(server.seen) == 2


def test_a_server_that_is_not_there_is_unscored_not_a_crash() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    judge = LlmJudge(Endpoint(url, "m", None), retry=RetryPolicy(max_retries=1), sleep=Sleeps())
    [v] = run(judge, [case()])
    assert v.status == "unscored"
    assert (v.reason or "").startswith(f"nothing answers at {url}: connection refused")


def dead_judge(
    url: str,
    clock: Clock,
    transport: CountingTransport,
    retry: RetryPolicy,
    *,
    concurrency: int = 1,
    connect_timeout: float = 3.0,
) -> LlmJudge:
    return LlmJudge(
        Endpoint(url, "judge-model", SecretStr(KEY)),
        retry=retry,
        concurrency=concurrency,
        client=httpx.AsyncClient(transport=transport),
        sleep=clock.sleep,
        clock=clock.time,
        jitter=lambda: 1.0,
        connect_timeout=connect_timeout,
    )


@pytest.mark.parametrize(
    ("retry", "delays", "attempts_said"),
    [
        # 3 s from the first refusal: the last backoff is cut to land there.
        (RetryPolicy(max_retries=6, initial_backoff=0.75), [0.75, 1.5, 0.75], "4 attempts"),
        (RetryPolicy(max_retries=1), [1.0], "2 attempts"),  # the retries run out first
        (RetryPolicy(max_retries=0), [], "1 attempt"),
    ],
)
def test_a_judge_nothing_listens_at_is_tried_for_one_case_then_given_up_for_all(
    retry: RetryPolicy, delays: list[float], attempts_said: str
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    clock, transport = Clock(), CountingTransport()
    judge = dead_judge(url, clock, transport, retry)
    verdicts = run(judge, [case(n) for n in range(8)])
    attempts = len(delays) + 1
    assert transport.requests == attempts  # the first case's attempts, then none
    assert clock.delays == delays
    reason = (
        f"nothing answers at {url}: connection refused ({attempts_said} in {sum(delays):.1f} s)"
    )
    assert [(v.status, v.reason) for v in verdicts] == [("unscored", reason)] * 8
    assert judge.unreachable == Unreachable(reason, 8)


def test_no_request_starts_after_the_judge_is_found_unreachable() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    clock, transport = Clock(), CountingTransport()
    retry = RetryPolicy(max_retries=6, initial_backoff=0.75)
    judge = dead_judge(url, clock, transport, retry, concurrency=4)
    verdicts = run(judge, [case(n) for n in range(8)])
    # The four requests in flight may each fail; then one of them retries (three more attempts
    # in 3 s) while the others wait for its outcome, and the last four cases ask nothing.
    assert transport.requests <= 4 + 3
    assert clock.delays == [0.75, 1.5, 0.75]
    assert judge.unreachable is not None and judge.unreachable.cases == 8
    assert {v.reason for v in verdicts} == {judge.unreachable.reason}


def test_a_judge_that_accepts_no_connection_is_unreachable_too() -> None:
    clock, transport = Clock(), CountingTransport()
    with NotAccepting() as dead:
        url = f"http://127.0.0.1:{dead.port}/v1"
        judge = dead_judge(url, clock, transport, RetryPolicy(max_retries=6), connect_timeout=0.2)
        verdicts = run(judge, [case(n) for n in range(3)])
    reason = f"nothing answers at {url}: no connection within 0.2 s (3 attempts in 3.0 s)"
    assert [v.reason for v in verdicts] == [reason] * 3
    assert transport.requests == 3
    assert judge.unreachable == Unreachable(reason, 3)


def test_an_overloaded_judge_is_retried_case_by_case_and_never_given_up_for_the_run() -> None:
    with FakeOpenAI(default=Reply(status=503)) as server:
        retry = RetryPolicy(max_retries=2, deadline=60)
        judge = judge_for(server, retry=retry, concurrency=1)
        verdicts = run(judge, [case(n) for n in range(3)])
    assert len(server.seen) == 3 * 3  # every case its own attempts
    assert [v.reason for v in verdicts] == ["HTTP 503; gave up after 3 attempts"] * 3
    assert judge.unreachable is None


def test_a_judge_that_answered_and_then_refuses_is_restarting_and_retried_case_by_case() -> None:
    with FakeOpenAI() as server:
        judge = judge_for(server, retry=RetryPolicy(max_retries=2, deadline=60), concurrency=1)
        [first] = run(judge, [case(0)])
    later = run(judge, [case(1), case(2)])  # the server is gone: its port refuses now
    assert first.status == "scored"
    gave_up = f"cannot reach {server.base_url}: connection refused; gave up after 3 attempts"
    assert [v.reason for v in later] == [gave_up] * 2
    assert judge.unreachable is None


def test_a_judge_given_up_on_is_asked_again_in_the_next_run() -> None:
    # A campaign judges each experiment in a run of its own: a server started since the last
    # one is used, not written off for the rest of the campaign.
    port = closed_port()
    judge = LlmJudge(
        Endpoint(f"http://127.0.0.1:{port}/v1", "m", None),
        retry=RetryPolicy(max_retries=0),
        sleep=Sleeps(),
    )
    [gone] = run(judge, [case(0)])
    assert judge.unreachable is not None
    with FakeOpenAI(port=port):
        [back] = run(judge, [case(1)])
    assert gone.status == "unscored" and back.status == "scored"
    assert judge.unreachable is None


def test_auth_errors_fail_fast() -> None:
    with FakeOpenAI(default=Reply(status=401)) as server:
        [v] = run(judge_for(server), [case()])
    assert v.status == "unscored"
    assert (v.reason or "").startswith("authentication failed (HTTP 401)")
    assert len(server.seen) == 1


def test_json_schema_rejected_falls_back_to_json_object_then_text() -> None:
    with FakeOpenAI(reject_formats=("json_schema",)) as server:
        judge = judge_for(server, concurrency=1)
        verdicts = run(judge, [case(0), case(1)])
    assert [v.status for v in verdicts] == ["scored", "scored"]
    formats = [(s.body.get("response_format") or {}).get("type") for s in server.seen]
    # The step down is remembered: the second case goes straight to json_object.
    assert formats == ["json_schema", "json_object", "json_object"]
    assert judge.notes == [
        f"{server.base_url} rejected response_format json_schema (HTTP 400); using json_object"
    ]

    with FakeOpenAI(reject_formats=("json_schema", "json_object")) as server:
        [v] = run(judge_for(server), [case()])
    assert v.status == "scored"
    assert "response_format" not in server.seen[-1].body


def test_json_in_prose_or_fences_is_extracted() -> None:
    prose = "Here is my verdict:\n```json\n" + json.dumps(GOOD_ANSWER) + "\n```\nThanks."
    with FakeOpenAI(default=Reply(content=prose)) as server:
        [v] = run(judge_for(server), [case()])
    assert v.status == "scored" and v.rank_any == "true"


def test_a_schema_breaking_answer_gets_one_corrective_retry() -> None:
    bad = {**GOOD_ANSWER, "rank_primary": "maybe"}
    with FakeOpenAI([Reply(content=bad), Reply(content=GOOD_ANSWER)]) as server:
        [v] = run(judge_for(server), [case()])
    assert v.status == "scored"
    second = server.seen[1].body["messages"]
    assert second[-2] == {"role": "assistant", "content": json.dumps(bad)}
    assert "rank_primary" in second[-1]["content"]
    assert v.usage.requests == 2 and v.usage.prompt_tokens == 200


def test_two_invalid_answers_are_unscored_with_the_reason() -> None:
    with FakeOpenAI(default=Reply(content="I think it was rank 3.")) as server:
        [v] = run(judge_for(server), [case()])
    assert v.status == "unscored"
    assert (
        v.reason
        == "judge answer invalid twice: no JSON object in the answer ('I think it was rank 3.')"
    )
    assert len(server.seen) == 2


def test_a_truncated_answer_says_it_was_cut_at_max_tokens() -> None:
    cut = Reply(content='{"restart_correct": "true", "rank_pri', finish_reason="length")
    with FakeOpenAI(default=cut) as server:
        [v] = run(judge_for(server), [case()])
    assert v.status == "unscored"
    assert "(answer cut at max_tokens=1024)" in (v.reason or "")


def test_the_fr_label_is_normalised_against_the_fr_table() -> None:
    # The model claims `rank`, but FR names a bystander on the same node: `node` at best.
    claim = {**GOOD_ANSWER, "fr_rank_correct": "rank"}
    fr = FR_RANK_3.replace("| 3\n", "| 2\n")
    with FakeOpenAI(default=Reply(content=claim)) as server:
        [v] = run(judge_for(server), [case(fr_output=fr)])
    assert v.fr_label_answered == "rank"
    assert v.fr_rank_correct == "node"


def test_invalid_runs_and_cases_without_inputs_make_no_call() -> None:
    invalid = case(truth=GroundTruth.build("SEGFAULT", 3, 5, 2, 4, 32, run_valid=False))
    missing = case(problem="no log attribution: x is missing")
    with FakeOpenAI() as server:
        a, b = run(judge_for(server), [invalid, missing])
    assert server.seen == []
    assert a.status == "invalid" and a.dimensions() == dict.fromkeys(a.dimensions(), "N/A")
    assert b.status == "unscored" and b.reason == "no log attribution: x is missing"


def test_a_cached_rerun_makes_no_request_and_the_key_is_not_in_the_cache(tmp_path: Path) -> None:
    cache = VerdictCache(tmp_path / "cache")
    cases = [case(n) for n in range(3)]
    with FakeOpenAI() as server:
        first = run(judge_for(server, cache=cache), cases)
        again = run(judge_for(server, cache=cache), cases)
    assert len(server.seen) == 3
    assert [v.cache_hit for v in first] == [False] * 3
    assert [v.cache_hit for v in again] == [True] * 3
    assert [v.dimensions() for v in again] == [v.dimensions() for v in first]
    assert all(v.usage.requests == 0 for v in again)
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 3
    assert all(KEY not in f.read_text() for f in files)


def test_another_judge_model_does_not_reuse_cached_verdicts(tmp_path: Path) -> None:
    cache = VerdictCache(tmp_path)
    with FakeOpenAI() as server:
        run(judge_for(server, cache=cache), [case()])
        other = LlmJudge(Endpoint(server.base_url, "other-model", None), cache=cache)
        [v] = run(other, [case()])
    assert not v.cache_hit
    assert len(server.seen) == 2


def test_a_400_that_is_not_about_the_format_fails_with_the_servers_message_and_is_not_cached(
    tmp_path: Path,
) -> None:
    cache = VerdictCache(tmp_path)
    too_long = Reply(status=400, raw=b'{"error": {"message": "context length exceeded"}}')
    with FakeOpenAI([too_long]) as server:
        judge = judge_for(server, cache=cache)
        [bad] = run(judge, [case()])
        assert len(server.seen) == 1  # no format step-down, no retry
        assert judge.response_format == "json_schema"
        [good] = run(judge_for(server, cache=cache), [case()])
    assert bad.status == "unscored" and bad.reason == "HTTP 400: context length exceeded"
    assert good.status == "scored" and not good.cache_hit


def test_concurrency_is_bounded() -> None:
    transport = CountingTransport()
    with FakeOpenAI(default=Reply(content=GOOD_ANSWER, delay=0.2)) as server:
        client = httpx.AsyncClient(transport=transport)
        judge = LlmJudge(Endpoint(server.base_url, "m", None), concurrency=3, client=client)
        verdicts = run(judge, [case(n) for n in range(9)])
    assert all(v.status == "scored" for v in verdicts)
    assert transport.peak == 3


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("5", 5.0), ("0", 0.0), ("Thu, 01 Jan 1970 00:01:40 GMT", 40.0), ("soon", None), (None, None)],
)
def test_retry_after_forms(header: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(header, now=60.0) == seconds


def test_a_server_echoing_the_key_does_not_leak_it() -> None:
    echo = Reply(
        status=400,
        raw=json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}).encode(),
    )
    with FakeOpenAI(default=echo) as server:
        [v] = run(judge_for(server), [case()])
    assert v.status == "unscored"
    assert KEY not in (v.reason or "") and "<hidden>" in (v.reason or "")


@pytest.mark.parametrize("body", [b"[1, 2]", b'"nope"', b"null"])
def test_error_bodies_of_any_json_shape_are_reported_not_crashed_on(body: bytes) -> None:
    with FakeOpenAI(default=Reply(status=404, raw=body)) as server:
        [v] = run(judge_for(server), [case()])
    assert v.status == "unscored"
    assert (v.reason or "").startswith("HTTP 404: ")


def test_reasoning_drafts_are_skipped_and_the_last_answer_wins() -> None:
    draft = {**GOOD_ANSWER, "restart_correct": "false", "notes": "draft"}
    final = {**GOOD_ANSWER, "notes": "final"}
    text = f"<think>First guess: {json.dumps(draft)} no wait</think>\n{json.dumps(final)}"
    with FakeOpenAI(default=Reply(content=text)) as server:
        [v] = run(judge_for(server), [case()])
    assert v.notes == "final" and v.restart_correct == "true"


def test_a_cache_that_cannot_be_written_keeps_the_verdict(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with FakeOpenAI() as server:
        judge = judge_for(server, cache=VerdictCache(blocker / "cache"))
        [v] = run(judge, [case()])
    assert v.status == "scored"
    assert judge.notes and judge.notes[0].startswith(
        f"cannot write the verdict cache {blocker / 'cache'}"
    )


def test_the_schema_the_validator_and_the_ranking_allow_the_same_values() -> None:
    # A strict server answers only what the schema allows; a value the validator refused, or
    # one missing from ALLOWED's worst-first order, would turn good answers into retries.
    schema = answer_schema()
    for d in DIMENSIONS:
        assert schema["properties"][d]["enum"] == list(answer_values(d))
        assert sorted(answer_values(d)) == sorted(ALLOWED[d])
    assert schema["required"] == [*DIMENSIONS, "notes"]


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8431/v1", True),
        ("http://127.8.9.10/v1", True),
        ("http://localhost:8000/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://127.example.com/v1", False),  # a name: it may resolve anywhere
        ("https://api.example.com/v1", False),
        ("http://10.0.0.1/v1", False),
    ],
)
def test_only_this_machine_counts_as_loopback(url: str, loopback: bool) -> None:
    from nvrx.score.judges import is_loopback

    assert is_loopback(url) is loopback


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:8431/v1", "http://127.0.0.1:8431/v1"),
        # The port is what tells two local servers apart: a message must keep it.
        ("http://judge:s3cret-pass@127.0.0.1:8431/v1", "http://127.0.0.1:8431/v1"),
        ("http://judge@[::1]:8000/v1", "http://[::1]:8000/v1"),
        (
            "https://api.example.com/v1?api_key=s3cret-pass",
            "https://api.example.com/v1?api_key=<hidden>",
        ),
    ],
)
def test_the_url_a_message_names_keeps_the_port_and_masks_credentials(url: str, shown: str) -> None:
    assert Endpoint(url, "m").display == shown

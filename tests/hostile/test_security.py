"""Secrets never leave nvrx: not cut in half by a truncation, not through the judge cache, not
from inside a URL, not through any route a key can come by; and file names are data, never
terminal control or log lines of their own."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ..test_watch_watcher import cycle_file, healthy_run
from .harness import Result, assert_no_traceback, every_file_text, leaked, run_nvrx
from .inputs import EchoJudge, FakeOpenAI, Reply, canary, fr, good, make_session

WALL = 20.0


def one_session(tmp_path: Path) -> Path:
    return make_session(tmp_path, [("SEGFAULT", 3, good(3, "Segmentation fault"), fr(3))]).dir


def no_leak(secret: str, texts: dict[str, str]) -> None:
    for where, text in texts.items():
        piece = leaked(secret, text)
        assert piece is None, f"{piece!r} (a piece of the secret) is in {where}"


def test_a_key_straddling_the_200th_character_of_a_judge_error_never_leaks(
    tmp_path: Path, home: Path
) -> None:
    key = canary("Cut")
    session = one_session(tmp_path)
    for offset in (186, 190, 195):  # the key starts before the cut and ends after it
        message = "x" * offset + key + " was rejected"
        reply = Reply(status=404, raw=json.dumps({"error": {"message": message}}).encode())
        junit, md = tmp_path / f"score-{offset}.xml", tmp_path / f"report-{offset}.md"
        with FakeOpenAI(default=reply) as server:
            common = [str(session), "--judge", "llm", "--base-url", server.base_url, "--no-cache"]
            env = {"JUDGE_API_KEY": key}
            table = run_nvrx(
                "score", *common, "--junit", str(junit), "--markdown", str(md),
                cwd=home, env=env, wall=WALL,
            )  # fmt: skip
            as_json = run_nvrx("score", *common, "--json", cwd=home, env=env, wall=WALL)
        assert table.code == 3 and as_json.code == 3, table.describe() + as_json.describe()
        no_leak(
            key,
            {
                "stdout": table.stdout,
                "stderr": table.stderr,
                "--json stdout": as_json.stdout,
                "the JUnit file": junit.read_text(),
                "the markdown report": md.read_text(),
            },
        )


def test_the_judge_cache_never_stores_a_key_the_judge_echoed(tmp_path: Path, home: Path) -> None:
    key = canary("Cache")
    cache = tmp_path / "judge-cache"
    session = one_session(tmp_path)
    with EchoJudge() as server:
        proc = run_nvrx(
            "score", str(session), "--judge", "llm", "--base-url", server.base_url,
            "--set", f"score.cache_dir={cache}",
            cwd=home, env={"JUDGE_API_KEY": key}, wall=WALL,
        )  # fmt: skip
    assert proc.code == 0, proc.describe()
    assert server.seen, "the judge was never asked"
    no_leak(key, {"stdout": proc.stdout, "stderr": proc.stderr})
    # Not caching such an answer at all is fine too: what is cached must hold no secret.
    no_leak(key, {str(p): t for p, t in every_file_text(cache).items()})


def test_a_cache_hit_under_another_key_prints_no_old_key(tmp_path: Path, home: Path) -> None:
    old, new = canary("Old"), canary("New")
    cache = tmp_path / "judge-cache"
    session = one_session(tmp_path)
    with EchoJudge() as server:
        args = [
            "score", str(session), "--judge", "llm", "--base-url", server.base_url,
            "--set", f"score.cache_dir={cache}",
        ]  # fmt: skip
        first = run_nvrx(*args, cwd=home, env={"JUDGE_API_KEY": old}, wall=WALL)
        second = run_nvrx(*args, "--json", cwd=home, env={"JUDGE_API_KEY": new}, wall=WALL)
    assert first.code == 0 and second.code == 0, first.describe() + second.describe()
    for secret in (old, new):
        no_leak(secret, {"first run": first.output, "second run": second.output})


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_config_show_hides_a_password_in_a_url_setting(home: Path, as_json: bool) -> None:
    password = canary("Pw")
    url = f"https://nvrx-user:{password}@judge.example.com/v1"
    proc = run_nvrx(
        "config", "show", *(["--json"] if as_json else []),
        cwd=home, env={"JUDGE_BASE_URL": url},
    )  # fmt: skip
    assert proc.code == 0, proc.describe()
    no_leak(password, {"config show": proc.output})
    if as_json:
        shown = json.loads(proc.stdout)["settings"]["score.base_url"]
        assert "<hidden>" in shown["value"], shown
    else:
        [row] = [ln for ln in proc.stdout.splitlines() if ln.startswith("score.base_url ")]
        assert "<hidden>" in row, row


def _hostile_names(work: Path) -> Path:
    healthy_run(work)
    cycles = work / "nvrx" / "901" / "cycle_infos"
    forged = "cycle_info.901.0.7\n2026-01-01 00:00:00,000 ERROR FORGED [CRITICAL] chain gone"
    for name in (forged, "cycle_info.\x1b[31mred\x1b[0m.1", "cycle_info.901.0.8\x1b]0;title\x07"):
        (cycles / name).write_text("{}")
    return cycles


def test_cycle_file_names_with_newlines_or_escapes_forge_no_lines(
    tmp_path: Path, home: Path
) -> None:
    work, state = tmp_path / "w", tmp_path / "state"
    _hostile_names(work)
    proc = run_nvrx(
        "watch", "--platform", "none", "--work-dir", str(work), "--state-dir", str(state), cwd=home
    )
    assert_no_traceback(proc)
    assert proc.code in (0, 3), proc.describe()  # clean, or degraded by what it skipped
    [log] = state.rglob("watch.log")
    outputs = {
        "stdout": proc.stdout_bytes,
        "stderr": proc.stderr_bytes,
        "watch.log": log.read_bytes(),
    }
    for where, data in outputs.items():
        assert b"\x1b" not in data and b"\x07" not in data, f"a raw control byte in {where}"
        forged = [ln for ln in data.splitlines() if b"FORGED" in ln.split(b" ", 4)[:4]]
        assert not forged, f"a forged line in {where}: {forged}"
        for line in data.splitlines():
            assert not line.startswith(b"2026-01-01 00:00:00,000"), f"a forged line in {where}"


# --- the canary: one secret per route, grepped for in everything nvrx wrote -----------------


Route = Callable[[str, Path, str], tuple[dict[str, str], list[str]]]


def _env(name: str) -> Route:
    def route(secret: str, secrets: Path, url: str) -> tuple[dict[str, str], list[str]]:
        return {name: secret, "JUDGE_BASE_URL": url}, []

    return route


def _key_file(secret: str, secrets: Path, url: str) -> tuple[dict[str, str], list[str]]:
    path = secrets / "judge.key"
    path.write_text(secret + "\n")
    path.chmod(0o600)
    return {"JUDGE_API_KEY_FILE": str(path), "JUDGE_BASE_URL": url}, []


def _set_flag(secret: str, secrets: Path, url: str) -> tuple[dict[str, str], list[str]]:
    return {"JUDGE_BASE_URL": url}, ["--set", f"score.api_key={secret}"]


def _user_env(secret: str, secrets: Path, url: str) -> tuple[dict[str, str], list[str]]:
    path = secrets / "user.env"
    path.write_text(f"# site settings\nexport JUDGE_API_KEY='{secret}'\nJUDGE_BASE_URL={url}\n")
    return {}, ["--env-file", str(path)]


def _url_password(secret: str, secrets: Path, url: str) -> tuple[dict[str, str], list[str]]:
    with_password = url.replace("http://", f"http://nvrx:{secret}@", 1)
    return {"JUDGE_BASE_URL": with_password}, []


ROUTES: dict[str, Route] = {
    "env-JUDGE_API_KEY": _env("JUDGE_API_KEY"),
    "env-LLM_API_KEY": _env("LLM_API_KEY"),
    "key-file": _key_file,
    "set-flag": _set_flag,
    "user-env": _user_env,
    "url-password": _url_password,
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_canary_key_never_appears_in_any_output_log_cache_or_report(
    tmp_path: Path, home: Path, route: str
) -> None:
    secret = canary(route.split("-")[-1][:4])
    secrets = tmp_path / "secrets"  # the route's own inputs, which hold the secret by design
    secrets.mkdir()
    session = one_session(tmp_path / "runs")
    out = tmp_path / "out"
    out.mkdir()
    work, state = tmp_path / "w", tmp_path / "watch-state"
    cycle_file(work, "990", 0, datetime.now(UTC) - timedelta(minutes=5), None)
    outputs: list[Result] = []
    with EchoJudge() as server:
        env, flags = ROUTES[route](secret, secrets, server.base_url)
        env["NVRX_SCORE_CACHE_DIR"] = str(tmp_path / "cache")
        env["NVRX_WATCH_STATE_DIR"] = str(state)

        def nvrx(*args: str) -> Result:
            proc = run_nvrx(*args, cwd=home, env=env, wall=WALL)
            assert_no_traceback(proc)
            outputs.append(proc)
            return proc

        for fmt in ([], ["--json"]):
            assert nvrx("config", "show", *fmt, *flags).code == 0, outputs[-1].describe()
        judged = nvrx(
            "score", str(session), "--judge", "llm", *flags, "--json",
            "--junit", str(out / "score.xml"), "--markdown", str(out / "score.md"),
        )  # fmt: skip
        assert judged.code == 0, judged.describe()
        cached = nvrx("score", str(session), "--judge", "llm", *flags)  # from the cache, if any
        assert cached.code == 0, cached.describe()
        reanalysed = nvrx("inject-loop", "--reanalyze", str(session), *flags)
        assert reanalysed.code in (0, 3), reanalysed.describe()
        for fmt in ([], ["--json"]):
            assert nvrx("report", str(session), *fmt).code == 0, outputs[-1].describe()
        watched = nvrx("watch", "--platform", "none", "--work-dir", str(work), *flags)
        assert watched.code in (0, 3), watched.describe()
    assert server.seen, "the judge was never asked"
    texts = {f"run {i} ({' '.join(p.args[:3])})": p.output for i, p in enumerate(outputs)}
    written = every_file_text(tmp_path, exclude=[secrets])
    assert any(p.is_relative_to(state) for p in written), "the watch wrote no state"
    texts.update({str(p): t for p, t in written.items()})
    no_leak(secret, texts)  # HOME, the session, the cache, the reports, the watch state

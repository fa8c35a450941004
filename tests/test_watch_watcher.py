"""A watch pass from the outside (`--platform none`, cycle files only): exit codes, --json,
the webhook with its cooldown, the Prometheus textfile, --dry-run writing nothing."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from .cli_runner import clean_environ
from .cli_runner import nvrx as nvrx_in_process


def cycle_file(work: Path, job: str, cycle: int, start: datetime, end: datetime | None) -> None:
    directory = work / "nvrx" / job / "cycle_infos"
    directory.mkdir(parents=True, exist_ok=True)
    stamp = "%Y-%m-%dT%H:%M:%S.%fZ"
    (directory / f"cycle_info.{job}.0.{cycle}").write_text(
        json.dumps(
            {
                "job_id": job,
                "attempt_index": 0,
                "cycle_number": cycle,
                "cycle_start_time": start.strftime(stamp),
                "cycle_end_time": end.strftime(stamp) if end else "",
                "cycle_log_file": "",
                "active_nodes": "n[1-2]",
                "standby_nodes": "n3",
                "generation": "1" if end else "0",
                "active_ranks": "0-1",
            },
            indent=2,
        )
    )


def checkpoint_file(work: Path, text: str, saved: datetime | None = None) -> Path:
    """The chain's checkpoint-iteration file holding `text`, last written at `saved` (default:
    now); its path."""
    ckpt = work / "checkpoints" / "latest_checkpointed_iteration.txt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_text(text)
    if saved is not None:
        os.utime(ckpt, (saved.timestamp(), saved.timestamp()))
    return ckpt


def stalled_run(work: Path) -> None:
    """Three short completed cycles and an open one, the checkpoint stuck at 40 since before."""
    now = datetime.now(UTC)
    checkpoint_file(work, "40\n", now - timedelta(hours=1))
    for i in range(3):
        start = now - timedelta(minutes=30 - 5 * i)
        cycle_file(work, "900", i, start, start + timedelta(minutes=1))
    cycle_file(work, "900", 3, now - timedelta(minutes=5), None)


def closed_cycles_then_an_open_one(work: Path, job: str, ran: timedelta, checkpoint: str) -> Path:
    """Three completed cycles of `ran` each, back to back, the open fourth since `ran` ago, and
    the checkpoint-iteration file holding `checkpoint` (its path)."""
    now = datetime.now(UTC)
    for i in range(3):
        start = now - (4 - i) * ran
        cycle_file(work, job, i, start, start + ran)
    cycle_file(work, job, 3, now - ran / 4, None)
    return checkpoint_file(work, checkpoint)


def healthy_run(work: Path) -> None:
    now = datetime.now(UTC)
    checkpoint_file(work, "400\n")
    cycle_file(work, "901", 0, now - timedelta(minutes=20), None)


def nvrx_watch(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`nvrx watch ARGS`, with no nvrx setting from the developer's environment."""
    return nvrx_in_process("watch", *args, env=clean_environ(env), cwd=cwd)


def watch(
    work: Path, state: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], str]:
    proc = nvrx_watch(
        "--platform", "none", "--work-dir", str(work), "--state-dir", str(state), "--json", *args,
        env=env,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr
    doc: dict[str, Any] = json.loads(lines[-1])
    return proc.returncode, doc, proc.stderr


class Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []
    status: ClassVar[int] = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.received.append(json.loads(body))
        self.send_response(Hook.status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[str]:
    Hook.received, Hook.status = [], 200
    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/nvrx"
    server.shutdown()


def test_a_stalled_run_is_critical_and_a_healthy_one_clean(tmp_path: Path) -> None:
    stalled_run(tmp_path / "bad")
    code, doc, _ = watch(tmp_path / "bad", tmp_path / "state")
    assert code == 1
    keys = [f["key"] for f in doc["findings"]]
    assert "nvrx-stalled-progress-900-40" in keys
    assert doc["snapshot"]["checkpoint"]["value"] == 40
    assert doc["snapshot"]["restarts"] == 3 and doc["snapshot"]["platform"] is None

    healthy_run(tmp_path / "good")
    code, doc, _ = watch(tmp_path / "good", tmp_path / "state")
    assert (code, doc["findings"], doc["degraded"]) == (0, [], False)


def test_findings_keep_their_first_seen_time_across_passes(tmp_path: Path) -> None:
    stalled_run(tmp_path / "w")
    _, first, _ = watch(tmp_path / "w", tmp_path / "state")
    _, second, _ = watch(tmp_path / "w", tmp_path / "state")
    seen = {f["key"]: f["first_seen"] for f in first["findings"]}
    assert seen and {f["key"]: f["first_seen"] for f in second["findings"]} == seen


def test_the_webhook_gets_each_finding_once_per_cooldown(tmp_path: Path, hook: str) -> None:
    stalled_run(tmp_path / "w")
    watch(tmp_path / "w", tmp_path / "state", "--webhook-url", hook)
    sent = [h["key"] for h in Hook.received]
    assert "nvrx-stalled-progress-900-40" in sent
    critical = next(h for h in Hook.received if h["key"] == "nvrx-stalled-progress-900-40")
    assert critical["text"].startswith("[CRITICAL] ") and critical["severity"] == "critical"
    watch(tmp_path / "w", tmp_path / "state", "--webhook-url", hook)
    assert [h["key"] for h in Hook.received] == sent  # inside the cooldown: nothing again
    watch(
        tmp_path / "w", tmp_path / "state", "--webhook-url", hook, "--set", "watch.alert_cooldown=0"
    )
    assert len(Hook.received) == 2 * len(sent)


def test_a_failing_webhook_never_stops_observation(tmp_path: Path, hook: str) -> None:
    Hook.status = 500
    stalled_run(tmp_path / "w")
    code, doc, err = watch(tmp_path / "w", tmp_path / "state", "--webhook-url", hook)
    assert code == 1 and doc["findings"]
    assert any("webhook" in e and "500" in e for e in doc["sink_errors"])
    # Said as a warning on stderr, one line each, never in the answer on stdout.
    warnings = [line for line in err.splitlines() if "sink failed" in line]
    assert warnings and all(w.startswith("nvrx: warning: sink failed: webhook") for w in warnings)
    text = nvrx_watch("--platform", "none", "--work-dir", str(tmp_path / "w"), "--state-dir",
                      str(tmp_path / "state2"), "--webhook-url", hook)  # fmt: skip
    assert "sink failed" not in text.stdout
    assert "nvrx: warning: sink failed: webhook for nvrx-stalled-progress-900-40" in text.stderr
    fleet = nvrx_watch("--platform", "none", "--fleet", str(tmp_path / "w"), "--state-dir",
                       str(tmp_path / "state3"), "--webhook-url", hook)  # fmt: skip
    assert "sink failed" not in fleet.stdout
    assert f"nvrx: warning: sink failed: {tmp_path / 'w'}: webhook for" in fleet.stderr
    Hook.status = 200
    watch(tmp_path / "w", tmp_path / "state", "--webhook-url", hook)
    assert Hook.received[-1]["key"]  # not marked as sent while it failed: retried next pass


def test_the_prometheus_textfile(tmp_path: Path) -> None:
    stalled_run(tmp_path / "w")
    prom = tmp_path / "textfile" / "run.prom"
    watch(tmp_path / "w", tmp_path / "state", "--prom-file", str(prom))
    text = prom.read_text()
    assert "nvrx_watch_checkpoint_iteration{chain=" in text
    assert "nvrx_watch_restarts{" in text and "} 3\n" in text.split("nvrx_watch_restarts{")[1]
    assert 'detector="stalled_progress"} 1' in text
    assert 'detector="orphaned_generation"} 0' in text  # every detector has a series
    assert 'nvrx_watch_findings_total{chain="' in text
    assert "nvrx_watch_degraded{" in text


def test_dry_run_writes_nothing_and_alerts_nobody(tmp_path: Path, hook: str) -> None:
    stalled_run(tmp_path / "w")
    prom = tmp_path / "run.prom"
    code, doc, _ = watch(
        tmp_path / "w",
        tmp_path / "state",
        "--dry-run",
        "--webhook-url",
        hook,
        "--prom-file",
        str(prom),
    )
    assert code == 1 and doc["findings"]
    assert Hook.received == [] and not prom.exists()
    # Not a file: no state, cache, lock, nor a line in watch.log (upstream wrote [DRY] lines).
    assert not [p for p in (tmp_path / "state").rglob("*") if p.is_file()]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--disable", "no_such_detector"], "unknown detector in disable: no_such_detector"),
        (["--set", "watch.storm_cycles=0"], "watch.storm_cycles: '0'"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = nvrx_watch("--platform", "none", "--work-dir", str(tmp_path), *args)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


class Beat(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Beat.hits.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def beat() -> Iterator[str]:
    Beat.hits = []
    server = HTTPServer(("127.0.0.1", 0), Beat)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/beat"
    server.shutdown()


def test_a_work_dir_that_is_not_there_is_bad_input_and_one_with_nothing_to_read_blind(
    tmp_path: Path, beat: str
) -> None:
    from nvrx.chain.manifest import manifest_path, write_manifest

    from .test_chain_cli import manifest

    # Not there at all: a typo or the wrong path, said in one line (exit 2), no pass made.
    state = ("--state-dir", str(tmp_path / "state"), "--heartbeat-url", beat)
    missing = nvrx_watch("--platform", "none", "--work-dir", str(tmp_path / "gone"), *state)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr == f"nvrx: error: --work-dir {tmp_path / 'gone'}: no such directory\n"
    (tmp_path / "a-file").write_text("")
    afile = nvrx_watch("--platform", "none", "--work-dir", str(tmp_path / "a-file"), *state)
    assert afile.returncode == 2 and "a-file: not a directory" in afile.stderr
    # There, but with neither a chain manifest nor any generation's directory: nothing to see
    # (a parent of the work dir?): a blind pass, no heartbeat.
    (tmp_path / "parent").mkdir()
    code, doc, _ = watch(tmp_path / "parent", tmp_path / "state", "--heartbeat-url", beat)
    assert code == 3 and doc["degraded"] is True
    assert [f["key"].rsplit("-", 1)[0] for f in doc["findings"]] == ["nvrx-watch-blind-cycles"]
    assert "no chain manifest and no nvrx/ directory" in doc["findings"][0]["summary"]
    assert Beat.hits == []
    # A chain whose first generation has not started yet (its manifest, no nvrx/) is not blind.
    (tmp_path / "pending").mkdir()
    write_manifest(manifest(tmp_path / "pending"), manifest_path(tmp_path / "pending"))
    code, doc, _ = watch(tmp_path / "pending", tmp_path / "state", "--heartbeat-url", beat)
    assert (code, doc["degraded"], Beat.hits) == (0, False, ["/beat"])


def test_upstreams_exit_codes_on_request(tmp_path: Path) -> None:
    stalled_run(tmp_path / "bad")
    healthy_run(tmp_path / "good")
    (tmp_path / "blind").mkdir()
    expected = {"bad": (1, 2), "good": (0, 0), "blind": (3, 1)}  # (nvrx, upstream)
    for name, (ours, theirs) in expected.items():
        work = tmp_path / name
        code, doc, _ = watch(work, tmp_path / "s1")
        assert code == doc["exit_code"] == ours, name
        code, doc, _ = watch(work, tmp_path / "s2", "--exit-codes", "upstream")
        assert code == doc["exit_code"] == theirs, name
        env = {"NVRX_WATCH_EXIT_CODES": "upstream"}
        assert watch(work, tmp_path / "s3", env=env)[0] == theirs, name
    # Blind and critical at once (a fleet of a critical chain and one whose only cycle file
    # cannot be read): nvrx's 3 (the answer is incomplete), upstream's 2 (it pages on "at
    # least one critical finding").
    unreadable = tmp_path / "team" / "unreadable" / "nvrx" / "902" / "cycle_infos"
    unreadable.mkdir(parents=True)
    (unreadable / "cycle_info.902.0.0").write_text("{not json")
    stalled_run(tmp_path / "team" / "stalled")
    fleet = ("--platform", "none", "--fleet", str(tmp_path / "team"), "--json")
    for codes, expected_code in (("nvrx", 3), ("upstream", 2)):
        proc = nvrx_watch(*fleet, "--state-dir", str(tmp_path / codes), "--exit-codes", codes)
        doc = json.loads(proc.stdout)
        assert proc.returncode == doc["exit_code"] == expected_code, codes
        assert [c["state"] for c in doc["chains"]] == ["critical", "blind"]
    # Bad input is 2 under both; the runbook of a blind pass names the code it exits with.
    gone = ("--platform", "none", "--work-dir", str(tmp_path / "gone"), "--exit-codes", "upstream")
    assert nvrx_watch(*gone).returncode == 2
    _, doc, _ = watch(tmp_path / "blind", tmp_path / "s6")
    assert "blind (exit 3; 1 with --exit-codes upstream)" in doc["findings"][0]["runbook"]
    wrong = nvrx_watch("--platform", "none", "--work-dir", str(tmp_path), "--exit-codes", "1")
    assert wrong.returncode == 2 and "watch.exit_codes" in wrong.stderr


def test_cycle_files_that_none_can_be_read_are_a_blind_pass_not_a_clean_one(
    tmp_path: Path, beat: str
) -> None:
    work = tmp_path / "w"
    healthy_run(work)
    cycle = work / "nvrx" / "901" / "cycle_infos" / "cycle_info.901.0.0"
    doc = json.loads(cycle.read_text())
    cycle.write_text(json.dumps({**doc, "cycle_start_time": "yesterday at noon"}))
    code, doc, _ = watch(work, tmp_path / "state", "--heartbeat-url", beat)
    assert code == 3 and doc["degraded"] is True, doc
    assert [f["key"].rsplit("-", 1)[0] for f in doc["findings"]] == ["nvrx-watch-blind-cycles"]
    finding = doc["findings"][0]
    assert "the only cycle-info file could not be used" in finding["summary"] + finding["detail"]
    assert Beat.hits == []
    # One readable cycle among them and the watcher sees again.
    cycle_file(work, "901", 1, datetime.now(UTC) - timedelta(minutes=5), None)
    code, doc, _ = watch(work, tmp_path / "state", "--heartbeat-url", beat)
    assert (code, doc["degraded"], Beat.hits) == (0, False, ["/beat"])


def test_a_checkpoint_caught_mid_write_keeps_the_last_value(tmp_path: Path) -> None:
    work = tmp_path / "w"
    # three healthy two-hour cycles and a checkpoint that advanced
    ckpt = closed_cycles_then_an_open_one(work, "950", timedelta(hours=2), "5000\n")
    code, doc, _ = watch(work, tmp_path / "state")
    assert code == 0, doc["findings"]
    ckpt.write_text("")  # Megatron's open("w") before the write
    code, doc, _ = watch(work, tmp_path / "state")
    assert code == 0, doc["findings"]
    assert doc["snapshot"]["checkpoint"]["value"] == 5000
    assert "being written" in doc["snapshot"]["checkpoint"]["error"]


def test_a_fifo_as_checkpoint_file_does_not_hang_the_pass(tmp_path: Path) -> None:
    work = tmp_path / "w"
    cycle_file(work, "960", 0, datetime.now(UTC) - timedelta(minutes=5), None)
    fifo = tmp_path / "iter.fifo"
    os.mkfifo(fifo)
    _, doc, _ = watch(work, tmp_path / "state", "--checkpoint-iteration-file", str(fifo))
    assert doc["snapshot"]["checkpoint"]["error"] == "not a regular file"


def test_a_cycle_from_a_clock_far_ahead_is_skipped_not_current(tmp_path: Path) -> None:
    work = tmp_path / "w"
    now = datetime.now(UTC)
    cycle_file(work, "970", 0, now - timedelta(minutes=10), None)
    cycle_file(work, "971", 0, now + timedelta(days=1), None)
    _, doc, _ = watch(work, tmp_path / "state")
    assert doc["snapshot"]["current_job"] == "970"
    assert any("in the future" in n for n in doc["notes"])


def test_a_passs_notes_go_to_stderr_not_into_its_answer(tmp_path: Path) -> None:
    work = tmp_path / "w"
    now = datetime.now(UTC)
    cycle_file(work, "972", 0, now - timedelta(minutes=10), None)
    cycle_file(work, "973", 0, now + timedelta(days=1), None)
    proc = nvrx_watch(
        "--platform", "none", "--work-dir", str(work), "--state-dir", str(tmp_path / "state")
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "in the future" not in proc.stdout
    (said,) = [line for line in proc.stderr.splitlines() if "in the future" in line]
    assert said.startswith("nvrx: note: skipped ")


def test_a_loop_says_each_note_once_and_every_failed_sink_each_pass(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from nvrx.config import WatchSettings
    from nvrx.watch.passoutput import PassOutput

    out = PassOutput(WatchSettings(), as_json=True)
    for _ in range(3):
        out.show({"state": "ok"}, 0, list, ["webhook: 500"], ["skipped a: in the future"])
    err = capsys.readouterr().err.splitlines()
    assert err.count("nvrx: note: skipped a: in the future") == 1
    assert err.count("nvrx: warning: sink failed: webhook: 500") == 3


def test_paths_with_markup_print_as_they_are(tmp_path: Path) -> None:
    work = tmp_path / "run[/x][red]"
    cycle_file(work, "980", 0, datetime.now(UTC) - timedelta(minutes=5), None)
    proc = nvrx_watch(
        "--platform", "none", "--work-dir", str(work), "--state-dir", str(tmp_path / "state")
    )
    assert proc.returncode == 0, proc.stderr
    assert "run[/x][red]" in proc.stdout


def test_a_pass_that_finds_the_state_locked_only_observes(tmp_path: Path, hook: str) -> None:
    import fcntl

    stalled_run(tmp_path / "w")
    watch(tmp_path / "w", tmp_path / "state")  # creates the chain's state dir
    (lock_path,) = (tmp_path / "state").glob("*/.lock")
    with open(lock_path, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code, doc, _ = watch(
            tmp_path / "w",
            tmp_path / "state",
            "--webhook-url",
            hook,
            "--set",
            "watch.alert_cooldown=0",
        )
    assert code == 1 and doc["findings"]
    assert Hook.received == []
    assert any("another watch pass holds" in n for n in doc["notes"])


def test_a_pass_that_breaks_is_one_error_line_and_exit_3_not_a_traceback(tmp_path: Path) -> None:
    work = tmp_path / "w"
    healthy_run(work)
    state = tmp_path / "state-is-a-file"
    state.write_text("")
    code, doc, err = watch(work, state)
    assert code == 3 and doc["degraded"] is True
    assert "pass failed" in doc["error"]
    assert err.splitlines() == [f"nvrx: error: {doc['error']}"]


def test_a_job_id_slurm_cannot_resolve_is_blind_exit_3(tmp_path: Path) -> None:
    # Stand-in Slurm commands that answer like a controller that is down.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "sacct", "squeue"):
        tool = bin_dir / name
        tool.write_text(
            "#!/bin/sh\necho 'error: Unable to contact slurm controller (connect failure)' >&2\n"
            "exit 1\n"
        )
        tool.chmod(0o755)
    env = {"NVRX_SLURM_BIN_DIR": str(bin_dir), "NVRX_SLURM_RETRY_DEADLINE": "0"}
    proc = nvrx_watch("4242", "--json", "--state-dir", str(tmp_path / "st"), env=env, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["degraded"] is True and "cannot resolve job 4242" in doc["error"]
    assert proc.stderr.splitlines()[-1] == f"nvrx: error: {doc['error']}"
    assert "Traceback" not in proc.stderr


def test_the_no_restart_code_of_a_chain_without_manifest_is_the_sites_setting(
    tmp_path: Path,
) -> None:
    healthy_run(tmp_path / "w")
    _, doc, _ = watch(tmp_path / "w", tmp_path / "state", env={"NVRX_NO_RESTART_EXIT_CODE": "42"})
    assert doc["chain"]["no_restart_exit_code"] == 42


# --- PagerDuty Events v2 ------------------------------------------------------------------------

PD_KEY = "R0UT1NGKEY-must-never-be-printed-0000"


def _events(kind: str) -> list[dict[str, Any]]:
    return [e for e in Hook.received if e.get("event_action") == kind]


def test_pagerduty_gets_one_incident_per_chain_and_finding_from_every_login_node(
    tmp_path: Path, hook: str
) -> None:
    stalled_run(tmp_path / "w")
    pd = ("--set", f"watch.pd_url={hook}")
    env = {"NVRX_WATCH_PD_ROUTING_KEY": PD_KEY}
    # Two login nodes watch the same chain, each with its own state.
    outputs = [
        watch(tmp_path / "w", tmp_path / f"state-{node}", *pd, env=env) for node in ("a", "b")
    ]
    triggers = _events("trigger")
    stalled = [t for t in triggers if t["payload"]["custom_details"]["key"].startswith(
        "nvrx-stalled-progress-"
    )]  # fmt: skip
    assert len(stalled) == 2 and stalled[0]["dedup_key"] == stalled[1]["dedup_key"]
    event = stalled[0]
    assert event["routing_key"] == PD_KEY and event["payload"]["severity"] == "critical"
    assert event["payload"]["component"] == "nvrx-watch"
    assert event["payload"]["class"] == "stalled_progress"
    for code, doc, stderr in outputs:
        assert code == 1 and not doc["sink_errors"]
        assert PD_KEY not in json.dumps(doc) + stderr
    for node in ("a", "b"):
        for file in (tmp_path / f"state-{node}").rglob("*"):
            if file.is_file():
                assert PD_KEY not in file.read_text(errors="replace"), file


def test_pagerduty_resolves_the_incident_once_the_finding_is_gone(
    tmp_path: Path, hook: str
) -> None:
    key_file = tmp_path / "pd.key"
    key_file.write_text(PD_KEY + "\n")
    key_file.chmod(0o600)
    pd = ("--set", f"watch.pd_url={hook}", "--pd-routing-key-file", str(key_file))
    stalled_run(tmp_path / "w")
    watch(tmp_path / "w", tmp_path / "state", *pd)
    opened = {e["payload"]["custom_details"]["key"]: e["dedup_key"] for e in _events("trigger")}
    assert opened and all(e["routing_key"] == PD_KEY for e in _events("trigger"))
    assert not _events("resolve")
    # The checkpoint moves on: the stall is over.
    (tmp_path / "w" / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("400\n")
    _, doc, _ = watch(tmp_path / "w", tmp_path / "state", *pd)
    still = {f["key"] for f in doc["findings"]}
    assert "nvrx-stalled-progress-900-40" not in still
    resolved = {e["dedup_key"] for e in _events("resolve")}
    assert resolved == {dedup for key, dedup in opened.items() if key not in still}
    assert opened["nvrx-stalled-progress-900-40"] in resolved
    assert all(set(e) == {"routing_key", "event_action", "dedup_key"} for e in _events("resolve"))
    before = len(Hook.received)
    watch(tmp_path / "w", tmp_path / "state", *pd)
    assert not [e for e in Hook.received[before:] if e["event_action"] == "resolve"]  # once


def test_a_failing_pagerduty_is_a_sink_error_and_is_retried(tmp_path: Path, hook: str) -> None:
    Hook.status = 503
    stalled_run(tmp_path / "w")
    pd = ("--set", f"watch.pd_url={hook}")
    env = {"NVRX_WATCH_PD_ROUTING_KEY": PD_KEY}
    code, doc, stderr = watch(tmp_path / "w", tmp_path / "state", *pd, env=env)
    assert code == 1 and doc["findings"]
    assert any("pagerduty" in e and "503" in e for e in doc["sink_errors"])
    assert PD_KEY not in json.dumps(doc) + stderr
    Hook.status = 202
    sent = len(_events("trigger"))
    watch(tmp_path / "w", tmp_path / "state", *pd, env=env)
    assert len(_events("trigger")) > sent  # not marked as sent while it failed


def test_a_blind_pass_resolves_nothing(tmp_path: Path, hook: str) -> None:
    pd = ("--set", f"watch.pd_url={hook}")
    env = {"NVRX_WATCH_PD_ROUTING_KEY": PD_KEY}
    stalled_run(tmp_path / "w")
    watch(tmp_path / "w", tmp_path / "state", *pd, env=env)
    assert _events("trigger")
    # The cycle files become symlinks (never followed): the watcher cannot see the cycles.
    cycles = tmp_path / "w" / "nvrx" / "900" / "cycle_infos"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for file in cycles.iterdir():
        file.rename(elsewhere / file.name)
        file.symlink_to(elsewhere / file.name)
    (tmp_path / "w" / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("400\n")
    code, doc, _ = watch(tmp_path / "w", tmp_path / "state", *pd, env=env)
    assert code == 3 and doc["degraded"]
    assert not _events("resolve")  # a blind watcher must not call anything healthy


def test_a_checkpoint_file_that_keeps_holding_no_iteration_is_reported(tmp_path: Path) -> None:
    # Text that is no iteration: maybe caught mid-write on the first pass; held by the second,
    # a watcher that took it as "being written" forever would never see progress stop.
    work = tmp_path / "w"
    cycle_file(work, "980", 0, datetime.now(UTC) - timedelta(minutes=20), None)
    ckpt = checkpoint_file(work, "iter=40\n")
    code, doc, _ = watch(work, tmp_path / "state")
    assert code == 0 and not doc["findings"]  # one pass: it may be caught mid-write
    code, doc, _ = watch(work, tmp_path / "state")
    (finding,) = [f for f in doc["findings"] if f["detector"] == "stalled_progress"]
    assert finding["key"] == "nvrx-checkpoint-not-an-iteration-980"
    assert finding["severity"] == "warning" and "not an integer (8 bytes" in finding["detail"]
    assert "iter=40" not in json.dumps(doc)  # the file may be anything: said, never quoted
    ckpt.write_text("40\n")  # an iteration again: the finding clears
    code, doc, _ = watch(work, tmp_path / "state")
    assert not [f for f in doc["findings"] if f["key"].startswith("nvrx-checkpoint-not-an")]


def test_megatrons_release_marker_is_no_checkpoint_yet(tmp_path: Path) -> None:
    # `release` is a released checkpoint with no iteration: upstream reads it as "no
    # iteration yet", so three completed cycles on it are three cycles without a save.
    work = tmp_path / "w"
    closed_cycles_then_an_open_one(work, "985", timedelta(minutes=5), "release\n")
    code, doc, _ = watch(work, tmp_path / "state")
    (finding,) = [f for f in doc["findings"] if f["detector"] == "stalled_progress"]
    assert finding["key"] == "nvrx-no-checkpoint-985" and finding["severity"] == "critical"
    assert "holds 'release'" in finding["detail"]
    checkpoint = doc["snapshot"]["checkpoint"]
    assert (checkpoint["value"], checkpoint["error"], checkpoint["released"]) == (None, None, True)
    assert code == 1


def test_the_header_is_never_better_than_the_worst_finding(tmp_path: Path) -> None:
    healthy_run(tmp_path / "w")
    work, state = str(tmp_path / "w"), str(tmp_path / "state")
    args = ("--platform", "none", "--work-dir", work, "--state-dir", state)
    first = nvrx_watch(*args)
    assert first.returncode == 0 and first.stdout.splitlines()[0].endswith("  OK")
    ckpt = tmp_path / "w" / "checkpoints" / "latest_checkpointed_iteration.txt"
    ckpt.write_text("300\n")  # went back from 400: a warning, and exit 0 (no critical)
    second = nvrx_watch(*args)
    assert "WARNING  counter_regressed" in second.stdout
    assert second.returncode == 0 and second.stdout.splitlines()[0].endswith("  WARNING")
    doc = json.loads(nvrx_watch(*args, "--json").stdout)
    assert doc["state"] == "warning" and doc["exit_code"] == 0


@pytest.mark.parametrize(
    ("act", "expected"),
    [
        (False, "[observe-only] not acting; owner should run: scontrol update nodename=n2"),
        (True, "[act] ran: scontrol update nodename=n2"),
    ],
)
def test_a_suspect_node_is_drained_only_with_act(tmp_path: Path, act: bool, expected: str) -> None:
    import logging

    from nvrx.config import WatchSettings
    from nvrx.watch.detectors import suspect_node
    from nvrx.watch.model import ChainRef
    from nvrx.watch.resolve import Target
    from nvrx.watch.watcher import PassResult, Watcher
    from tests.test_slurm_replay import Replay, slurm_for
    from tests.test_watch_detectors import LIVE, SUSPECT_N2, snap

    settings = WatchSettings(state_dir=tmp_path / "state", drain_suspects=True)
    (finding,) = suspect_node(snap(SUSPECT_N2, platform=LIVE), settings)
    replay = Replay({"sinfo": [(0, "n1\nn2\nn3\n", "")], "scontrol": [(0, "", "")]})
    target = Target(ChainRef("train", "alice", None), (), None, "train")
    watcher = Watcher(target, settings, slurm_for(replay), host="h", act=act)
    assert watcher._node_names([finding]) == (frozenset({"n1", "n2", "n3"}) if act else None)
    result = PassResult(snap(SUSPECT_N2, platform=LIVE), [finding], False)
    watcher._act(result, logging.getLogger("test"))
    (line,) = result.actions
    assert line.startswith(expected)
    assert "state=drain 'reason=nvrx watch suspect_node: in each of the last 3" in line
    ran = [a for a in replay.argvs if os.path.basename(a[0]) == "scontrol"]
    assert ran == ([[ran[0][0], "update", "nodename=n2", "state=drain", ran[0][-1]]] if act else [])


def test_a_drain_waits_for_a_node_list_that_could_not_be_read() -> None:
    import logging

    from nvrx.config import WatchSettings
    from nvrx.watch.detectors import suspect_node
    from nvrx.watch.model import ChainRef
    from nvrx.watch.resolve import Target
    from nvrx.watch.watcher import PassResult, Watcher
    from tests.test_slurm_replay import Replay, slurm_for
    from tests.test_watch_detectors import LIVE, SUSPECT_N2, snap

    settings = WatchSettings(drain_suspects=True)
    (finding,) = suspect_node(snap(SUSPECT_N2, platform=LIVE), settings)
    replay = Replay({"sinfo": [(1, "", "slurm_load_partitions: Zero Bytes were transmitted")]})
    target = Target(ChainRef("train", "alice", None), (), None, "train")
    watcher = Watcher(target, settings, slurm_for(replay), host="h", act=True)
    assert watcher._node_names([finding]) is None  # no refusal: nothing known against it
    result = PassResult(snap(SUSPECT_N2, platform=LIVE), [finding], False)
    watcher._act(result, logging.getLogger("test"))
    (line,) = result.actions
    assert line.startswith("[act] FAILED: scontrol update nodename=n2")
    assert "node list could not be read" in line and line.endswith("(next pass retries)")
    assert not [a for a in replay.argvs if os.path.basename(a[0]) == "scontrol"]


def test_the_live_view_cuts_what_does_not_fit_the_terminal_and_says_so() -> None:
    from nvrx.watch.output import fit_screen

    screen = [[("state CRITICAL", "")], *([[(f"finding {i}", "")] for i in range(30)])]
    assert fit_screen(screen, rows=40, width=80) == screen  # it fits: nothing changes
    fitted = fit_screen(screen, rows=10, width=80)
    kept = len(fitted) - 1
    # The top first (the state, then findings by severity); the notice wraps to two rows of 80
    # and the footer's row is left free: 7 lines of the 10 rows.
    assert fitted[:kept] == screen[:kept] and kept == 7
    notice = fitted[-1][0][0]
    assert f"{len(screen) - kept} more lines do not fit this terminal (10 rows)" in notice
    assert "--json" in notice
    wide = [[("x" * 200, "")]] * 3  # a line longer than the width takes several rows
    assert len(fit_screen(wide, rows=8, width=80)) == 2


def test_the_cycle_line_counts_the_generations_restarts_in_the_right_number(
    tmp_path: Path,
) -> None:
    """A generation's first cycle has `0 restarts` behind it, its second `1 restart`: the
    count and its noun agree, as everywhere nvrx counts."""
    now = datetime.now(UTC)

    def cycle_line(work: Path) -> str:
        proc = nvrx_watch(
            "--platform", "none", "--work-dir", str(work), "--state-dir", str(work / "state")
        )  # fmt: skip
        (line,) = [row for row in proc.stdout.splitlines() if row.startswith("cycle: ")]
        return line

    first = tmp_path / "first"
    cycle_file(first, "990", 0, now - timedelta(minutes=5), None)
    assert cycle_line(first).startswith("cycle: 990.0.0 (cycle 0, 0 restarts in this generation)")
    restarted = tmp_path / "restarted"
    cycle_file(restarted, "991", 0, now - timedelta(hours=2), now - timedelta(hours=1))
    cycle_file(restarted, "991", 1, now - timedelta(minutes=50), None)
    assert cycle_line(restarted).startswith(
        "cycle: 991.0.1 (cycle 1, 1 restart in this generation)"
    )


# --- drains: every pass says what it knows of them ---------------------------------------------


def test_every_pass_says_the_chains_drain_state() -> None:
    from nvrx.watch.drains import drain_status
    from nvrx.watch.model import ChainRef
    from nvrx.watch.output import pass_lines
    from nvrx.watch.watcher import PassResult
    from tests.test_watch_detectors import drained, drained_platform, snap

    def drains(result: PassResult) -> tuple[str, dict[str, Any]]:
        (line,) = [
            "".join(t for t, _ in row)
            for row in pass_lines(result)
            if row[0][0].startswith("drains: ")
        ]
        return line, drain_status(result)

    chain = ChainRef("train", "alice", None, drain_poller="on")
    # sinfo answered, nothing of the chain's drained: said, not left out.
    quiet = snap(platform=drained_platform(drained("n7")), chain=chain)
    line, doc = drains(PassResult(quiet, [], False))
    assert line == (
        "drains: none of the chain's 3 nodes drained (sinfo); in-job drain poller on; "
        "watch.drain_suspects off"
    )
    assert doc == {"poller": "on", "sinfo": "ok", "chain_nodes": 3, "drained": 0,
                   "drain_suspects": False, "acting": False}  # fmt: skip
    # One drained: which, where, since when; watch.drain_suspects on, with and without --act.
    held = snap(platform=drained_platform(), chain=chain)
    line, doc = drains(PassResult(held, [], False, drain_suspects=True, acting=True))
    assert line.startswith("drains: 1 of the chain's 3 nodes drained: n3 (generation 100 task")
    assert line.endswith("; in-job drain poller on; watch.drain_suspects on (--act drains a "
                         "suspect node)")  # fmt: skip
    assert (doc["drained"], doc["drain_suspects"], doc["acting"]) == (1, True, True)
    line, _ = drains(PassResult(held, [], False, drain_suspects=True))
    assert line.endswith("watch.drain_suspects on, observe-only (no --act)")
    # sinfo failed, or not asked: unknown, never "none".
    failed = replace(drained_platform(), drained=None, drained_error="sinfo: timed out")
    line, doc = drains(PassResult(snap(platform=failed), [], True))
    assert line.startswith("drains: UNKNOWN (sinfo failed: sinfo: timed out); in-job drain "
                           "poller unknown")  # fmt: skip
    assert (doc["sinfo"], doc["drained"], doc["chain_nodes"]) == ("failed", None, 3)
    line, doc = drains(PassResult(snap(), [], False))
    assert line.startswith("drains: not asked (--platform none)")
    assert (doc["sinfo"], doc["drained"], doc["chain_nodes"]) == ("not asked", None, None)


def test_the_drain_poller_is_read_from_the_manifest_or_derived_from_its_settings(
    tmp_path: Path,
) -> None:
    from nvrx.chain.manifest import manifest_path, write_manifest
    from nvrx.watch.resolve import from_manifest

    from .test_chain_cli import manifest

    def poller(shape: dict[str, Any], drain_poll: str | None) -> str:
        m = manifest(tmp_path)
        m.shape = shape
        if drain_poll is not None:
            m.settings = {"chain.drain_poll": {"value": drain_poll, "source": "default"}}
        return from_manifest(m).chain.drain_poller

    spares = {"hot_spares": 1, "cold_spares": 0}
    # The shape says it (as submit-chain writes it: the word, then why).
    assert poller({**spares, "drain_poller": "off (chain.drain_poll=off)"}, "on") == "off"
    assert poller(spares, "auto") == "on"  # an older manifest: auto with spares is on
    assert poller({"hot_spares": 0, "cold_spares": 0}, "auto") == "off"
    assert poller({"hot_spares": 0, "cold_spares": 0}, "on") == "on"
    assert poller(spares, None) == "unknown"  # from before the poller
    assert poller({}, "auto") == "unknown"
    # And the pass says it, in the screen and the document.
    m = manifest(tmp_path)
    m.shape = {
        **spares,
        "drain_poller": "on (auto: 1 spare task can take a drained task's place)",
    }
    write_manifest(m, manifest_path(tmp_path))
    _, doc, _ = watch(tmp_path, tmp_path / "state")
    assert doc["drains"]["poller"] == "on"
    proc = nvrx_watch("--platform", "none", "--work-dir", str(tmp_path), "--state-dir",
                      str(tmp_path / "state"))  # fmt: skip
    assert "; in-job drain poller on; watch.drain_suspects off\n" in proc.stdout


def test_act_help_names_every_action() -> None:
    text = " ".join(nvrx_watch("--help").stdout.split())
    act = text.split(" --act ", 1)[1].split(" --dry-run ", 1)[0]
    assert "orphaned generation's pending tasks" in act
    assert "watch.drain_suspects" in act and "drain the one node" in act


def test_ctrl_c_stops_a_loop_with_exit_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    healthy_run(tmp_path / "w")

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", interrupted)  # Ctrl-C while the loop waits
    proc = nvrx_watch("--platform", "none", "--work-dir", str(tmp_path / "w"), "--state-dir",
                      str(tmp_path / "state"), "--interval", "60")  # fmt: skip
    assert proc.returncode == 130 and proc.stderr.endswith("nvrx: interrupted\n")
    assert "OK" in proc.stdout.splitlines()[0]  # the pass before it was printed


def test_a_watch_that_names_no_chain_lists_every_way_to_name_one(tmp_path: Path) -> None:
    proc = nvrx_watch("--state-dir", str(tmp_path / "state"))
    assert proc.returncode == 2
    assert proc.stderr == (
        "nvrx: error: name the chain to watch: a JOB_ID, --work-dir DIR or --cycle-info-glob "
        "GLOB; or several chains: --fleet PATH... or --mine\n"
    )

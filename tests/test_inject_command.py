"""`inject-loop`'s request: what the command line asked for, checked as one value before any
setting is loaded or any session is touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvrx.inject.command import InjectRequest
from nvrx.terminal import CommandError


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        (InjectRequest(next_=Path("s"), pool="quick"), "--next reads one session"),
        (InjectRequest(reanalyze=Path("s"), dry_run=True), "--reanalyze works on a session alone"),
        (InjectRequest(force=True), "--force applies to --reanalyze only"),
        (InjectRequest(rerun_failing=Path("s"), pool="quick"), "--rerun-failing re-runs"),
        (InjectRequest(resume=Path("s"), extra_args=("--gres=gpu:1",)), "--resume finishes"),
    ],
)
def test_what_does_not_go_together_is_one_line_and_bad_input(
    request_: InjectRequest, says: str
) -> None:
    with pytest.raises(CommandError) as caught:
        request_.check()
    assert str(caught.value).startswith(says) and caught.value.exit_code == 2


def test_a_plain_campaign_and_each_session_action_alone_are_requests_that_go_together() -> None:
    for ok in (
        InjectRequest(pool="quick", dry_run=True),
        InjectRequest(resume=Path("s")),
        InjectRequest(reanalyze=Path("s"), force=True),
        InjectRequest(rerun_failing=Path("s"), batch_size=2),
        InjectRequest(next_=Path("s")),
        InjectRequest(next_=Path("s"), as_json=True),
        # How a campaign runs: a resumed or re-run session takes it from this command line.
        InjectRequest(resume=Path("s"), batch_size=4, window_mode="strict", no_analysis=True,
                      cancel_on_interrupt=True, no_progress=True, as_json=True),
        InjectRequest(reanalyze=Path("s"), no_progress=True, as_json=True),
        InjectRequest(rerun_failing=Path("s"), list_pool=True),
        # A preview takes the options of the run it shows.
        InjectRequest(pool="quick", list_pool=True, iters="2,10", allow_duplicates=True),
        InjectRequest(pool="quick", dry_run=True, batch_size=4, sbatch_script=Path("job.sh"),
                      time_limit="00:10:00", extra_args=("-A", "acct")),
    ):  # fmt: skip
        ok.check()


def test_the_refusal_names_the_mode_and_every_option_it_would_drop() -> None:
    with pytest.raises(CommandError) as caught:
        InjectRequest(reanalyze=Path("s"), iters="2,10", time_limit="1:00", force=True).check()
    assert str(caught.value).endswith("not with --time-limit, --iters")
    assert str(caught.value).startswith("--reanalyze")


def test_the_session_paths_are_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    resolved = InjectRequest(resume=Path("s1"), rerun_failing=Path("s2")).resolved()
    assert resolved.resume == tmp_path / "s1" and resolved.rerun_failing == tmp_path / "s2"
    assert resolved.reanalyze is None

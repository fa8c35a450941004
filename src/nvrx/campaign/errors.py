"""What a campaign's errors are (pure: a leaf, so that pure modules can name them without loading
the readers of pools and sessions)."""

from __future__ import annotations


class CampaignError(ValueError):
    """Something a campaign needs cannot be used: one line naming it. Its kinds say what failed:
    a pool (PoolError), a session or its journal (SessionError, JournalError), a workload
    (WorkloadError), an analyser's setup (AnalyserSetupError)."""

    exit_code = 2  # bad input


class PoolError(CampaignError):
    """A pool entry or pool source is invalid."""


class SessionError(CampaignError):
    """A session directory that cannot be created or opened, or whose journal lacks what a
    command needs."""


class JournalError(SessionError):
    """A journal (or tracking file) line that cannot be read: named by file and line."""


FORCE_HINT = " (report --force and inject-loop --reanalyze --force skip such lines)"

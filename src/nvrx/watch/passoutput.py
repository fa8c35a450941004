"""Where each watch pass goes: one JSON line (--json), the screen redrawn in place (a loop on a
terminal), or its lines printed (cron, pipes, a single pass); its notes and failed sinks on
stderr; and the loop of `watch --interval`."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from nvrx.contract import INTERRUPTED, write_document
from nvrx.terminal import note, warn

if TYPE_CHECKING:
    from nvrx.config import WatchSettings
    from nvrx.watch.output import Line


class PassOutput:
    """Where each pass goes: one JSON line (--json), the screen redrawn in place (a loop on a
    terminal), or its lines printed (cron, pipes, a single pass)."""

    def __init__(self, settings: WatchSettings, as_json: bool) -> None:
        self.as_json = as_json
        self.interval = settings.interval
        self.live: Any = None
        self.said: set[str] = set()  # notes already on stderr: a loop says each one once
        if self.interval is not None and sys.stdout.isatty() and not as_json:
            from rich.live import Live

            from nvrx.terminal import stdout

            self.live = Live(console=stdout(), auto_refresh=False)
            self.live.start()

    def show(
        self,
        doc: Mapping[str, Any],
        code: int,
        lines: Callable[[], list[Line]],
        sink_errors: list[str],
        notes: list[str],
    ) -> None:
        """The pass (exiting `code`), then its notes and each sink that failed, one line each on
        stderr (above the live screen, which rich keeps below what is written meanwhile). A
        note is said once in a loop: the same skipped file is not news on every pass."""
        from nvrx.watch.output import fit_screen, lines_renderable, print_lines

        if self.as_json:
            write_document(doc, code)
        elif self.live is not None:
            upcoming = datetime.now() + timedelta(seconds=self.interval or 0)
            footer = f"next pass at {upcoming:%H:%M:%S} (every {self.interval} s)"
            size = self.live.console.size
            screen = fit_screen(lines(), size.height, size.width)
            self.live.update(lines_renderable(screen, footer), refresh=True)
        else:
            print_lines(lines(), sys.stdout, color=sys.stdout.isatty())
        for message in notes:
            if message not in self.said:
                self.said.add(message)
                note(message)
        for error in sink_errors:
            warn(f"sink failed: {error}")

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def every_interval(self, one_pass: Callable[[], tuple[int, bool]]) -> int:
        """`one_pass` once, or every `watch.interval` until it says it is done; the last pass's
        exit code. Ctrl-C stops the loop as it stops any command: `nvrx: interrupted`, exit 130
        (as `nvrx.cli.main` says it), whatever the last pass found."""

        try:
            while True:
                code, done = one_pass()
                if done or self.interval is None:
                    return code
                time.sleep(self.interval)
        except KeyboardInterrupt:
            self.close()  # the live screen first, so that the line comes below it
            sys.stderr.write("nvrx: interrupted\n")
            return INTERRUPTED
        finally:
            self.close()

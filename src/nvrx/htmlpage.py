"""The frame of every page nvrx writes (the campaign report, the watch timeline): one
self-contained HTML document that works opened from a shared filesystem with no network.

No script, font or image, only inline CSS and SVG, and a Content-Security-Policy that forbids
any load, so a page cannot fetch even if some text in it tried to. Everything from outside goes
through `escape`, and every part of a page that comes from outside through `escape_within`,
its byte budget.
"""

from __future__ import annotations

import html
import re

from nvrx.display import printable

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
BASE_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px}h2{font-size:17px;margin-top:28px}h4{margin:10px 0 4px;font-size:13px}
figure{margin:12px 0}figcaption{font-weight:600;margin-bottom:4px}
svg text{font:12px system-ui,sans-serif}svg text.h{fill:#444}
.dim{color:#777}.up{color:#1a7f37}.down{color:#b42318}
pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:320px;white-space:pre-wrap}
"""


def escape(text: object) -> str:
    """`text` safe inside an element or a quoted attribute: HTML-escaped, and its control and
    bidirectional-override characters written as escapes (`display.printable`), lines kept."""
    return html.escape(printable(str(text), lines=True), quote=True)


def escape_within(text: str, limit: int, *, keep: str = "head") -> str:
    """`text` escaped (`escape`) in at most `limit` bytes of UTF-8, its head or its tail
    (neither a character nor an entity cut in two, nor a word unless no space is near, `word_end`):
    escaping can make text six times longer, and non-Latin text is three bytes a character, so a
    part's budget is counted in what the page carries."""
    # Each character escapes to a byte at least: past `limit` of them, none can be kept (and a
    # megabyte of text is not escaped to keep 48 bytes of it).
    out = escape(text[: limit + 1] if keep == "head" else text[-(limit + 1) :])
    if len(out) * 4 <= limit:  # UTF-8 is at most 4 bytes a character: no need to encode
        return out
    data = out.encode()
    if len(data) <= limit:
        return out
    room = max(limit - 3, 0)  # "…" is 3 bytes
    if keep == "tail":
        piece = data[len(data) - room :].decode("utf-8", "ignore")
        entity_tail = _ENTITY_TAIL.match(piece)
        piece = piece[entity_tail.end() :] if entity_tail else piece
        # `piece` ends `out`: what came before it decides whether its first word is whole.
        return "…" + piece[word_start(piece, out[: len(out) - len(piece)]) :]
    piece = data[:room].decode("utf-8", "ignore")
    amp = piece.rfind("&")
    if amp != -1 and ";" not in piece[amp:]:
        piece = piece[:amp]  # an entity cut short
    return piece[: word_end(piece, out[len(piece) :])].rstrip() + "…"  # `piece` starts `out`


def word_end(head: str, after: str) -> int:
    """Where a head cut from a text ends so that its last word is whole: where it is when the
    text went on (`after`) with a space, else after its last space, when that keeps at least
    half of it (a text of one long token is cut where it is)."""
    if after[:1].isspace():
        return len(head)
    space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    return space + 1 if space >= len(head) // 2 else len(head)


def word_start(tail: str, before: str) -> int:
    """Where a tail cut from a text starts so that its first word is whole (`word_end`'s
    mirror: `before` is what preceded it)."""
    if before[-1:].isspace():
        return 0
    found = [i for i in (tail.find(" "), tail.find("\n"), tail.find("\t")) if i != -1]
    return min(found) + 1 if found and min(found) < len(tail) // 2 else 0


_ENTITY_TAIL = re.compile(r"[#\w]{1,8};")  # the end of an entity whose `&` a tail cut off


def document(title: str, body: str, css: str = "") -> str:
    """A whole page: `body` is trusted markup built with `escape`d text."""
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{_CSP}\">"
        f"<style>{BASE_CSS}{css}</style></head><body>{body}</body></html>\n"
    )

"""web_fetch inside the sandbox: a page fetched with the standard library, saved as text."""

from __future__ import annotations

import hashlib
import html.parser
import os
import re
import urllib.error
import urllib.parse
import urllib.request

from .errors import ToolError
from .workspace import Workspace, atomic_write

FETCH_MAX_BYTES = 20 * 1024 * 1024
PREVIEW_CHARS = 2000


class _TextOfHtml(html.parser.HTMLParser):
    SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    BLOCK = {"p", "div", "br", "li", "tr", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
             "header", "footer", "nav", "pre", "blockquote", "table", "ul", "ol", "dt", "dd", "hr", "title", "main"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list = []
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCK:
            self.parts.append("\n- " if tag == "li" else "\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)

    def text(self) -> str:
        lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(self.parts).split("\n"))
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def html_to_text(page: str) -> str:
    parser = _TextOfHtml()
    parser.feed(page)
    parser.close()
    return parser.text()


def fetch(ws: Workspace, url: str, save_as: str | None, timeout: float) -> dict:
    """The page at `url` as text, saved whole under cairn's files (or `save_as`); a preview comes back."""
    parts = urllib.parse.urlsplit(url if isinstance(url, str) else "")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ToolError(f"{url!r}: only http and https URLs can be fetched")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", parts.netloc + parts.path).strip("-")[:80]
    real = ws.resolve(save_as or f"{ws.cairn}/web/{slug}-{hashlib.sha1(url.encode()).hexdigest()[:8]}.txt")
    request = urllib.request.Request(url, headers={"User-Agent": "cairn-toolbox/1", "Accept": "*/*"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(FETCH_MAX_BYTES)
            status, final_url, headers = response.status, response.geturl(), response.headers
    except urllib.error.HTTPError as exc:
        raise ToolError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        if set(os.listdir("/sys/class/net")) <= {"lo"}:
            raise ToolError(f"cannot fetch {url}: the sandbox has no network (needs --network bridge)") from None
        raise ToolError(f"cannot fetch {url}: {getattr(exc, 'reason', exc)}") from None
    ctype = headers.get_content_type()
    charset = headers.get_content_charset() or "utf-8"
    if ctype in ("text/html", "application/xhtml+xml"):
        text = html_to_text(body.decode(charset, "replace"))
    elif ctype.startswith("text/") or ctype.endswith(("json", "xml", "javascript")):
        text = body.decode(charset, "replace")
    else:
        raise ToolError(f"{url}: {ctype} is not text ({len(body)} bytes); download it with curl in the shell")
    data = text.encode("utf-8")
    atomic_write(real, data)
    return {"url": final_url, "status": status, "content_type": ctype, "path": ws.rel(real),
            "bytes": len(data), "text": text[:PREVIEW_CHARS]}

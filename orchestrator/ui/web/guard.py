"""What keeps `cairn serve` safe: an ASGI middleware in front of every route.

- **The token.** `cairn serve` prints a URL with `?token=...` (a random 256-bit secret, as Jupyter does).
  The first GET that carries it gets the token back as an HttpOnly, SameSite=Strict cookie and a redirect
  to the same address without it, so it leaves the address bar and the history. Every request without the
  right cookie gets 401 and nothing else. The cookie's name carries the port: two servers on one host do
  not overwrite each other's.
- **Changes.** Only POST changes anything, and a POST must come from this page: its `Origin` names this
  server (the `Host` it was sent to), `Sec-Fetch-Site`, where the browser sends it, says same-origin, and
  its body is JSON (a form on another site cannot send that without a preflight we never answer). A
  SameSite=Strict cookie is not even sent by another site's request; the origin check holds without it.
- **The Host.** Bound to loopback, only a loopback name is accepted in `Host` (on any port: a tunnel may
  end on another): a DNS-rebinding page that resolves its own name to 127.0.0.1 is refused before
  anything is read.
- **Headers.** A strict Content-Security-Policy (scripts and styles only from this server's files, no
  inline script, no framing), nosniff, no referrer, no caching of what a run holds.
"""

from __future__ import annotations

import secrets
from typing import Any, Awaitable, Callable
from urllib.parse import urlencode

from starlette.datastructures import URL, Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
# What a run's own bytes (a raw image) and the charts are served with: nothing in them may run.
SANDBOXED = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; sandbox"
HEADERS = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "cache-control": "no-store",
}
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
NO_TOKEN = ("cairn serve: no access token. Open the URL `cairn serve` printed (it ends in ?token=...); "
            "the token then stays in a cookie of this browser.\n")

ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
                   Awaitable[None]]


def new_token() -> str:
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    return f"cairn_serve_{port}"


class Guard:
    """The middleware. `loopback_only`: accept only a loopback name in `Host` (the server listens on one)."""

    def __init__(self, app: ASGIApp, token: str, port: int, loopback_only: bool) -> None:
        self.app, self.token, self.port, self.loopback_only = app, token, port, loopback_only
        self.cookie = cookie_name(port)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.setdefault("headers", [])}
                extra = dict(HEADERS, **({} if b"content-security-policy" in have else {"content-security-policy": CSP}))
                message["headers"] = list(message["headers"]) + [(k.encode(), v.encode()) for k, v in extra.items()
                                                                  if k.encode() not in have]
            await send(message)

        refusal = self.refusal(Request(scope))
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
        else:
            await self.app(scope, receive, send_with_headers)

    def refusal(self, request: Request) -> Response | None:
        """The response that ends this request here, or None when it may go on."""
        if not self._host_allowed(request.headers.get("host", "")):
            return PlainTextResponse("cairn serve: this server answers only to a loopback address\n", status_code=403)
        given = request.query_params.get("token")
        if given is not None and request.method in ("GET", "HEAD"):
            if not secrets.compare_digest(given.encode(), self.token.encode()):
                return PlainTextResponse(NO_TOKEN, status_code=401)
            # The token moves into a cookie, out of the address bar (and so out of the history and of
            # anything the page links to).
            query = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = URL(path=request.url.path, query=urlencode(query))
            response = RedirectResponse(str(target), status_code=303)
            response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
            return response
        cookie = request.cookies.get(self.cookie, "")
        if not secrets.compare_digest(cookie.encode(), self.token.encode()):
            return PlainTextResponse(NO_TOKEN, status_code=401)
        if request.method in ("GET", "HEAD"):
            return None
        if request.method != "POST":
            return PlainTextResponse("cairn serve: only GET and POST\n", status_code=405)
        why = foreign(request.headers)
        if why:
            return PlainTextResponse(f"cairn serve: refused: {why}\n", status_code=403)
        return None

    def _host_allowed(self, host: str) -> bool:
        """Any port: an SSH tunnel may bring the server to another port on the viewer's machine."""
        if not self.loopback_only:
            return True
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
        return name in LOOPBACK_NAMES


def foreign(headers: Headers) -> str | None:
    """Why a state-changing request does not come from this server's own page; None when it does."""
    origin, host = headers.get("origin"), headers.get("host")
    if not origin:
        return "a change needs the Origin header of this page"
    if origin not in (f"http://{host}", f"https://{host}"):
        return f"the request comes from another origin ({origin[:100]})"
    site = headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return f"the request comes from another site (Sec-Fetch-Site: {site[:40]})"
    if headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return "a change is sent as JSON"
    return None

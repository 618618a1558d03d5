"""`cairn serve`: bind, print the URL with its token, serve until Ctrl-C.

The socket is bound here, before uvicorn starts, so that `--port 0` gets its free port from the kernel
and the URL printed is one that already answers. Anything but a loopback host is said loudly: whoever
reaches the port and has the token can act on every run.
"""

from __future__ import annotations

import ipaddress
import socket
import tempfile
from pathlib import Path
from typing import Callable

from orchestrator.errors import UsageError
from orchestrator.ui.web.guard import new_token

LOOPBACK_HOSTS = ("localhost",)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: {exc.strerror}") from None
    family, _type, _proto, _name, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}",
                         hint="another port with --port, or --port 0 for any free one") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_host(host: str, sock: socket.socket) -> str:
    """The host part of the URL to open: the bound address, bracketed when IPv6; `localhost` as given."""
    if host == "localhost":
        return host
    address = sock.getsockname()[0]
    if address in ("0.0.0.0", "::"):
        address = socket.gethostname()
    return f"[{address}]" if ":" in address else address


def serve(host: str, port: int, runs_dir: Path, say: Callable[[str], None], warn: Callable[[str], None]) -> None:
    import uvicorn

    from orchestrator.ui.web.app import create_app

    if not 0 <= port <= 65535:
        raise UsageError(f"--port is 0 to 65535, not {port}")
    sock = bind(host, port)
    port = sock.getsockname()[1]
    loopback = is_loopback(host)
    token = new_token()
    with tempfile.TemporaryDirectory(prefix="cairn-serve-logs-") as logs:
        app = create_app(runs_dir, token, port, loopback_only=loopback, logs=Path(logs))
        if not loopback:
            warn(f"WARNING: cairn serve listens on {host}, not only on this machine: anyone who reaches port "
                 f"{port} and has the token can read every run in {runs_dir} and act on it (say, stop, "
                 "approve, start runs). Plain HTTP: the token crosses the network unencrypted. An SSH tunnel "
                 "to a server on 127.0.0.1 is safer (docs/web.md).")
        say(f"cairn serve: runs in {runs_dir}")
        say(f"open http://{url_host(host, sock)}:{port}/?token={token}")
        say("Ctrl-C stops the server (runs started from the page go on).")
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=1,
                                lifespan="off", server_header=False)
        try:
            uvicorn.Server(config).run(sockets=[sock])
        except KeyboardInterrupt:  # uvicorn raises the Ctrl-C again once it has shut down: the normal end
            pass
        say("cairn serve: stopped")

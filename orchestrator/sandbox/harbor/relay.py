"""The toolbox's relay inside a Harbor environment (standard-library Python 3.9+, run by the same Python
as the toolbox; it is uploaded into the task's container, never imported by cairn on the host).

Harbor's environments offer `exec` of a whole command, not a process whose stdin and stdout stay open.
So the toolbox (PROTOCOL.md: JSON lines on stdin and stdout) is kept alive by this relay, started once,
and each op is one `exec` of the relay's client, which hands one request line to the toolbox over a Unix
socket and prints its answer: one round trip per tool call, and the toolbox's shell, terminal sessions
and journal live for the whole trial.

    relay.py serve SOCKET --log FILE -- PYTHON toolbox.pyz --workdir ... --cairn ...
    relay.py call SOCKET BASE64-REQUEST        (or: relay.py call SOCKET --file PATH)

`serve` makes the toolbox's key itself (exec has no stdin to carry one from the host, and argv, the
environment and files are open to the agent), hands it to the toolbox as its first line, and prints two
lines on its own stdout, which only the host reads: the key line and the toolbox's signed ready line.
Then it leaves a process of its own behind, in a session of its own, writing to FILE, which answers one
connection at a time and ends when the toolbox ends (and then so does every later `call`, exit code 3).
`call` prints the response line on stdout and exits 0; it exits 3 when the relay is gone, with the
reason on stderr. The relay only carries lines: whether an answer is the toolbox's is the host's to
check (its MAC), so a socket or a relay the agent replaced can delay an answer, never forge one. The
agent can reach the socket too, so the relay passes on only a request the host signed with the key
(PROTOCOL.md, "The channel"), each id once, and answers any other line at once with an error of its
own: the toolbox, which would drop it unanswered, never sees it, and the relay does not wait for an
answer that never comes.
"""

import base64
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys

GONE = 3  # exit code of `call` when no toolbox answers


def serve(path: str, log: str, argv: list) -> int:
    not_dumpable()  # before the key exists: other processes cannot read this one's memory or pipes
    key = os.urandom(32)
    key_line = b'{"key": "' + key.hex().encode() + b'"}\n'
    report_r, report_w = os.pipe()
    if os.fork():  # the exec's own process: it prints what the relay reports, and is done
        os.close(report_w)
        with os.fdopen(report_r, "rb") as report:
            lines = report.read()
        sys.stdout.buffer.write(lines)
        sys.stdout.flush()
        return 0 if lines.count(b"\n") == 2 else 1
    os.close(report_r)
    os.setsid()
    if os.fork():  # the relay outlives the exec that starts it
        os._exit(0)
    _detach(log)
    toolbox = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    toolbox.stdin.write(key_line)
    toolbox.stdin.flush()
    ready = toolbox.stdout.readline()
    if not ready:
        os.close(report_w)
        return toolbox.wait() or 1
    with open(path + ".pid", "w") as pid:
        pid.write(str(os.getpid()))
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(4)
    os.write(report_w, key_line + ready)
    os.close(report_w)
    passed = set()  # the ids of the requests passed on
    while toolbox.poll() is None:
        connection, _ = server.accept()
        with connection:
            request = _read_line(connection)
            if not request:
                continue
            wanted = _id_of(request) if signed_by_host(key, request) else None
            if wanted is None or wanted in passed:  # the toolbox runs an id once, and would never answer
                connection.sendall(b'{"id": null, "ok": false, "error": "the relay passes on only requests the host '
                                   b'signed, each once"}\n')
                continue
            passed.add(wanted)
            try:
                toolbox.stdin.write(request)
                toolbox.stdin.flush()
            except (ValueError, AttributeError, OSError):
                connection.sendall(json.dumps({"id": None, "ok": False, "error": "the relay got a bad request"}).encode() + b"\n")
                continue
            while True:
                line = toolbox.stdout.readline()
                if not line:
                    break  # the toolbox ended; its client sees the connection close
                if _id_of(line) == wanted:
                    try:
                        connection.sendall(line)
                    except OSError:
                        pass  # the client was cut off (its exec timed out): the answer is dropped
                    break
    server.close()
    os.unlink(path)
    return 0


def _id_of(line: bytes) -> object:
    try:
        return json.loads(line).get("id")
    except (ValueError, AttributeError, RecursionError):
        return None


def signed_by_host(key: bytes, line: bytes) -> bool:
    """Whether `line` is a request the host signed (the toolbox checks the same: toolbox/channel.py's
    `opened`; this file stands alone in the sandbox, so it cannot import that)."""
    line = line.rstrip(b"\r\n")
    field = b', "mac": "'
    if len(line) <= len(field) + 66 or line[-66 - len(field):-66] != field or not line.endswith(b'"}'):
        return False
    body = line[:-66 - len(field)] + b"}"
    good = hmac.new(key, b"request\n" + body, hashlib.sha256).hexdigest().encode()
    return hmac.compare_digest(line[-66:-2], good)


def _detach(log: str) -> None:
    """stdin from /dev/null, stdout and stderr to `log`: nothing of the exec's streams stays open here."""
    quiet = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(quiet, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(quiet)
    os.close(out)


def not_dumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0), as the toolbox does (sandbox_image/toolbox/channel.py)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass


def call(path: str, request: bytes) -> int:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(path)
    except OSError as exc:
        sys.stderr.write("the toolbox's relay is not there (%s)\n" % (exc.strerror or exc))
        return GONE
    with client:
        client.sendall(request.rstrip(b"\n") + b"\n")
        answer = _read_line(client)
    if not answer:
        sys.stderr.write("the toolbox ended without an answer\n")
        return GONE
    sys.stdout.buffer.write(answer)
    sys.stdout.flush()
    return 0


def _read_line(connection: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = connection.recv(1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks)


def main(args: list) -> int:
    if len(args) >= 5 and args[0] == "serve" and args[2] == "--log" and args[4] == "--":
        return serve(args[1], args[3], args[5:])
    if len(args) == 3 and args[0] == "call":
        return call(args[1], base64.b64decode(args[2]))
    if len(args) == 4 and args[0] == "call" and args[2] == "--file":
        with open(args[3], "rb") as request:
            data = request.read()
        os.unlink(args[3])
        return call(args[1], data)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

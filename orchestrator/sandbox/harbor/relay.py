"""The toolbox's relay inside a Harbor environment (standard-library Python 3.9+, run by the same Python
as the toolbox; it is uploaded into the task's container, never imported by cairn on the host).

Harbor's environments offer `exec` of a whole command, not a process whose stdin and stdout stay open.
So the toolbox (PROTOCOL.md: JSON lines on stdin and stdout) is kept alive by this relay, started once
in the background, and each op is one `exec` of the relay's client, which hands one request line to the
toolbox over a Unix socket and prints its answer: one round trip per tool call, and the toolbox's
shell, terminal sessions and journal live for the whole trial.

    relay.py serve SOCKET -- PYTHON toolbox.pyz --workdir ... --cairn ...
    relay.py call SOCKET BASE64-REQUEST        (or: relay.py call SOCKET --file PATH)

`serve` writes the toolbox's ready line to SOCKET.ready, then answers one connection at a time; it ends
when the toolbox ends (and then so does every later `call`, exit code 3). `call` prints the response line
on stdout and exits 0; it exits 3 when the relay is gone, with the reason on stderr.
"""

import base64
import json
import os
import socket
import subprocess
import sys

GONE = 3  # exit code of `call` when no toolbox answers


def serve(path: str, argv: list) -> int:
    with open(path + ".pid", "w") as pid:
        pid.write(str(os.getpid()))
    toolbox = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    ready = toolbox.stdout.readline()
    if not ready:
        return toolbox.wait() or 1
    with open(path + ".ready.tmp", "wb") as out:
        out.write(ready)
    os.replace(path + ".ready.tmp", path + ".ready")
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(4)
    while toolbox.poll() is None:
        connection, _ = server.accept()
        with connection:
            request = _read_line(connection)
            if not request:
                continue
            try:
                wanted = json.loads(request).get("id")
                toolbox.stdin.write(request)
                toolbox.stdin.flush()
            except (ValueError, AttributeError, OSError):
                connection.sendall(json.dumps({"id": None, "ok": False, "error": "the relay got a bad request"}).encode() + b"\n")
                continue
            while True:
                line = toolbox.stdout.readline()
                if not line:
                    break  # the toolbox ended; its client sees the connection close
                message = json.loads(line)
                if message.get("id") in (wanted, None):
                    try:
                        connection.sendall(line)
                    except OSError:
                        pass  # the client was cut off (its exec timed out): the answer is dropped
                    break
    server.close()
    os.unlink(path)
    return 0


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
    if len(args) >= 3 and args[0] == "serve" and "--" in args:
        return serve(args[1], args[args.index("--") + 1:])
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

"""Images derived from the sandbox image: the base plus what a run needs installed at build time (the
MCP servers' packages, tools/mcp_packages.py), built once with the network on and then reused.

The tag is `<repository>:<hash>`, a hash of the base image's id, what is installed (`key`) and the
host's CA certificates, so a changed base or list builds a new image and an unchanged one is reused.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from orchestrator.errors import SandboxError
from orchestrator.sandbox.docker import image as images
from orchestrator.sandbox.docker.engine import connect, has_image


def derived_image(base: str, repository: str, key: Any, body: list[str], *, what: str, names: str,
                  files: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                  progress: Callable[[str], None] | None = None) -> str:
    """The tag of the image that is `base` with the Dockerfile lines `body` run as root (and then the
    base's own user again); `files` are put in the build context by name. `what` and `names` say what
    is installed, in the progress lines and errors. SandboxError when the base cannot be read or the
    build fails."""
    say = progress or (lambda _line: None)
    client = connect()
    try:
        base_attrs = client.api.inspect_image(base)
    except Exception as exc:  # noqa: BLE001 - ImageNotFound or an engine error: both are a clear SandboxError
        raise SandboxError(f"cannot read the sandbox image {base} to add {what} to it: {exc}")
    cas = sorted(images.HOST_CA_DIR.glob("*.crt")) if images.HOST_CA_DIR.is_dir() else []
    digest = hashlib.sha256(json.dumps([base_attrs["Id"], key]).encode())
    for path in cas:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    tag = f"{repository}:{digest.hexdigest()[:12]}"
    user = (base_attrs.get("Config") or {}).get("User") or "root"
    lines = [f"FROM {base}", "USER root", "ENV DEBIAN_FRONTEND=noninteractive"]
    if cas:  # the base may be a user's own image, without the proxy's CA: pip and npm must trust it to fetch
        lines += ["COPY extra-ca/ /usr/local/share/ca-certificates/",
                  "RUN update-ca-certificates >/dev/null 2>&1 || true"]
    lines += [*body, f"USER {user}"]
    lines += [f"LABEL {name}={shlex.quote(value)}" for name, value in (labels or {}).items()]
    with images._build_lock():
        if has_image(client, tag):
            return tag
        say(f"installing {what} into {tag} (once; with the network on): {names}")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"{repository}-") as context:
            (Path(context) / "Dockerfile").write_text("\n".join(lines) + "\n")
            for name, text in (files or {}).items():
                (Path(context) / name).write_text(text)
            (Path(context) / "extra-ca").mkdir()
            for path in cas:
                (Path(context) / "extra-ca" / path.name).write_bytes(path.read_bytes())
            try:
                images._docker_build(client, Path(context), tag, {}, say)
            except SandboxError as exc:
                raise SandboxError(f"installing {what} failed: {exc.message}", hint=exc.hint) from exc
        say(f"installed {what} into {tag} in {time.monotonic() - started:.0f} s")
    return tag

"""The uvx rule: MCP servers that tiny-agents would fetch at start, installed into a derived image.

The sandbox has no network, so a stdio server whose command is `uvx [--from SPEC] [--with REQ]…
PKG[@VERSION] ARGS…` (or `uv tool run …`) or `pipx run [--spec SPEC] PKG[==VERSION] ARGS…` is installed at
build time: cairn builds `cairn-tools:<hash>` FROM the sandbox image, with `RUN python3 -m venv
/opt/cairn-tools/<PKG> && pip install SPEC`, and runs `/opt/cairn-tools/<PKG>/bin/<PKG>` (or the command
named after `--from`) with ARGS instead. `@latest` means no pin. `npx …` runs unchanged (cairn's image
has no Node.js); any other command runs as it is.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator.config import McpServerConfig
from orchestrator.errors import SandboxError, UsageError


TOOLS_ROOT = "/opt/cairn-tools"
TOOLS_REPOSITORY = "cairn-tools"
_BAD_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")

# -- packages: the uvx rule ----------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    name: str  # the distribution, as written (also the folder under /opt/cairn-tools)
    requirements: tuple[str, ...]  # what pip installs: the package spec, then --with ones
    entry: str  # the console script to run
    launcher: str  # "uvx", "pipx run"
    args: tuple[str, ...] = ()  # the server's own arguments

    @property
    def argv(self) -> list[str]:
        return [f"{TOOLS_ROOT}/{self.folder}/bin/{self.entry}", *self.args]

    @property
    def folder(self) -> str:
        return _BAD_NAME_CHARS.sub("_", self.name.lower())


_UVX_FLAGS = {"-q", "--quiet", "-v", "--verbose", "--refresh", "--isolated", "--offline", "-n", "--no-cache",
              "--no-progress", "--native-tls", "--no-config", "--no-python-downloads", "--prerelease=allow"}
_UVX_VALUED = {"--python", "-p", "--index-url", "--default-index", "--index", "--extra-index-url",
               "--cache-dir", "--directory", "--with-requirements", "--python-preference", "--env-file"}
_PIP_INDEX = {"--index-url": "--index-url", "--default-index": "--index-url", "--index": "--extra-index-url",
              "--extra-index-url": "--extra-index-url"}


def package_of(command: str, args: list[str]) -> Package | None:
    """The package a stdio server's command would fetch at start (uvx, uv tool run, pipx run), or None."""
    base = Path(command).name
    if base == "uvx":
        return _parse_uvx(list(args), "uvx")
    if base == "uv" and args[:2] == ["tool", "run"]:
        return _parse_uvx(list(args[2:]), "uv tool run")
    if base == "pipx" and args[:1] == ["run"]:
        return _parse_pipx(list(args[1:]))
    return None


def _parse_uvx(args: list[str], launcher: str) -> Package:
    source: str | None = None
    extra: list[str] = []
    index: list[str] = []
    while args and args[0].startswith("-"):
        option = args.pop(0)
        key, _, inline = option.partition("=")
        if option in _UVX_FLAGS or key in _UVX_FLAGS:
            continue
        if key in ("--from", "--with") or key in _UVX_VALUED:
            value = inline or (args.pop(0) if args else "")
            if not value:
                raise UsageError(f"`{launcher} {option}` needs a value")
            if key == "--from":
                source = value
            elif key == "--with":
                extra += [v for v in value.split(",") if v]
            elif key in _PIP_INDEX:
                index += [_PIP_INDEX[key], value]
            continue
        raise UsageError(f"cairn cannot turn `{launcher} {option}` into an install in the sandbox image; "
                         f"run the server another way, or write its command out")
    if not args:
        raise UsageError(f"`{launcher}` names no package to run")
    command = args.pop(0)
    if source:
        requirement, name = _requirement(source)
        entry = command
    else:
        requirement, name = _requirement(command)
        entry = name
    return Package(name=name, requirements=(requirement, *extra, *index), entry=entry, launcher=launcher,
                   args=tuple(args))


def _parse_pipx(args: list[str]) -> Package:
    spec: str | None = None
    while args and args[0].startswith("-"):
        option = args.pop(0)
        key, _, inline = option.partition("=")
        if key == "--spec":
            spec = inline or (args.pop(0) if args else "")
        elif key in ("--python", "--pip-args", "--index-url"):
            _ = inline or (args.pop(0) if args else "")
        elif key in ("--no-cache", "--verbose", "-v", "--quiet", "-q", "--system-site-packages"):
            continue
        else:
            raise UsageError(f"cairn cannot turn `pipx run {option}` into an install in the sandbox image")
    if not args:
        raise UsageError("`pipx run` names no package to run")
    command = args.pop(0)
    requirement, name = _requirement(spec or command)
    entry = command if spec else name
    return Package(name=name, requirements=(requirement,), entry=entry, launcher="pipx run", args=tuple(args))


_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?(.*)$")


def _requirement(text: str) -> tuple[str, str]:
    """(pip requirement, distribution name) of `PKG`, `PKG@1.2`, `PKG@latest`, `PKG[x]==1.2`, `PKG>=1`."""
    match = _REQ.match(text.strip())
    if not match:
        raise UsageError(f"{text!r} is not a package name cairn understands")
    name, extras, rest = match.group(1), match.group(2) or "", match.group(3).strip()
    if rest.startswith("@"):
        version = rest[1:].strip()
        rest = "" if version in ("", "latest") else f"=={version}"
    return f"{name}{extras}{rest}", name


def tools_image(base: str, packages: list[Package], progress: Callable[[str], None] | None = None) -> str:
    """The image that is `base` plus a venv per package under /opt/cairn-tools: built once, then reused
    (its tag is a hash of the base image's id, the packages and the host's CA certificates)."""
    from orchestrator.sandbox import image as images
    from orchestrator.sandbox.engine import connect

    say = progress or (lambda _line: None)
    client = connect()
    try:
        base_attrs = client.api.inspect_image(base)
    except Exception as exc:  # noqa: BLE001 - ImageNotFound or an engine error: both are a clear SandboxError
        raise SandboxError(f"cannot read the sandbox image {base} to add the MCP servers' packages to it: {exc}")
    wanted = sorted({(p.folder, p.requirements, p.entry) for p in packages})
    cas = sorted(images.HOST_CA_DIR.glob("*.crt")) if images.HOST_CA_DIR.is_dir() else []
    digest = hashlib.sha256(json.dumps([base_attrs["Id"], wanted]).encode())
    for path in cas:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    tag = f"{TOOLS_REPOSITORY}:{digest.hexdigest()[:12]}"
    user = (base_attrs.get("Config") or {}).get("User") or "root"
    lines = [f"FROM {base}", "USER root"]
    if cas:  # the base may be a user's own image, without the proxy's CA: pip must trust it to fetch
        lines += ["COPY extra-ca/ /usr/local/share/ca-certificates/",
                  "RUN update-ca-certificates >/dev/null 2>&1 || true"]
    for folder, requirements, entry in wanted:
        venv = f"{TOOLS_ROOT}/{folder}"
        pip_args = " ".join(shlex.quote(r) for r in requirements)
        lines.append(
            f"RUN set -eux; export PIP_CERT=${{PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}; "
            f"python3 -m venv {venv}; {venv}/bin/pip install --no-cache-dir --disable-pip-version-check "
            f"{pip_args}; test -x {venv}/bin/{shlex.quote(entry)} || "
            f"{{ echo 'the package installs no command named {entry}; its commands are:'; ls {venv}/bin; exit 1; }}")
    lines += [f"USER {user}", f"LABEL org.cairn.tools={shlex.quote(json.dumps([list(w[1]) for w in wanted]))}"]
    with images._build_lock():
        if images._image_exists(client, tag):
            return tag
        say(f"building {tag}: {', '.join(r for w in wanted for r in w[1][:1])} on {base}")
        with tempfile.TemporaryDirectory(prefix="cairn-tools-") as context:
            (Path(context) / "Dockerfile").write_text("\n".join(lines) + "\n")
            (Path(context) / "extra-ca").mkdir()
            for path in cas:
                (Path(context) / "extra-ca" / path.name).write_bytes(path.read_bytes())
            try:
                images._docker_build(client, Path(context), tag, {}, say)
            except SandboxError as exc:
                raise SandboxError(f"installing the MCP servers' packages failed: {exc.message}", hint=exc.hint) from exc
    return tag


def image_for(base: str, servers: list[McpServerConfig], progress: Callable[[str], None] | None = None) -> str:
    """`base`, or the derived image with the packages the stdio servers fetch with uvx or pipx."""
    packages = [p for s in servers if s.type == "stdio" and (p := package_of(s.command or "", s.args))]
    return tools_image(base, packages, progress) if packages else base


def server_argv(server: McpServerConfig) -> list[str]:
    package = package_of(server.command or "", server.args)
    return package.argv if package else [server.command or "", *server.args]



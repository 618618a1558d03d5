"""The uvx rule: MCP servers that tiny-agents would fetch at start, installed into a derived image.

The sandbox has no network, so a stdio server that would fetch its package when it starts is installed
at build time instead, into `cairn-tools:<hash>` built FROM the sandbox image (with the network on, once;
the tag is a hash of the base image and the packages, so the next run reuses it):

- `uvx [--from SPEC] [--with REQ]… PKG[@VERSION] ARGS…` (or `uv tool run …`) and `pipx run [--spec SPEC]
  PKG[==VERSION] ARGS…`: `python3 -m venv /opt/cairn-tools/<PKG> && pip install SPEC`; the server runs
  as `/opt/cairn-tools/<PKG>/bin/<PKG>` (or the command named after `--from`/`--spec`) with ARGS.
- `npx [-y] [-p PKG]… PKG[@VERSION] ARGS…`: Node.js and npm from Debian's packages (`nodejs`, `npm`) when
  the image has no npm, then `npm install -g --prefix /opt/cairn-tools/node/<PKG> PKG`; the server runs
  as the package's own command (its `bin`, as npx picks it: the only one, else the one named after the
  package; or the command given after `-p`), linked at `/opt/cairn-tools/node/<PKG>/cairn-entry`.

`@latest` means no pin. Any other command runs as it is, and must be in the image.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator.config import McpServerConfig
from orchestrator.errors import UsageError


TOOLS_ROOT = "/opt/cairn-tools"
TOOLS_REPOSITORY = "cairn-tools"
_BAD_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")

# -- packages: the uvx rule ----------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    name: str  # the distribution, as written (also the folder under /opt/cairn-tools)
    requirements: tuple[str, ...]  # what pip installs: the package spec, then --with ones
    entry: str  # the console script to run
    launcher: str  # "uvx", "uv tool run", "pipx run", "npx"
    args: tuple[str, ...] = ()  # the server's own arguments

    @property
    def node(self) -> bool:
        return self.launcher == "npx"

    @property
    def argv(self) -> list[str]:
        if self.node:
            return [f"{self.prefix}/cairn-entry", *self.args]
        return [f"{self.prefix}/bin/{self.entry}", *self.args]

    @property
    def folder(self) -> str:
        return _BAD_NAME_CHARS.sub("_", self.name.lower()).strip("_")

    @property
    def prefix(self) -> str:
        """Where it is installed in the image: a venv, or an npm prefix."""
        return f"{TOOLS_ROOT}/node/{self.folder}" if self.node else f"{TOOLS_ROOT}/{self.folder}"

    @property
    def label(self) -> str:
        """A short name for the server: the distribution; an npm package without its scope, unless the
        rest says nothing (@playwright/mcp -> playwright-mcp)."""
        if not self.node:
            return self.name
        scope, _, rest = self.name.lstrip("@").rpartition("/")
        return f"{scope}-{rest}" if scope and rest in ("mcp", "server", "mcp-server") else rest


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
    if base == "npx":
        return _parse_npx(list(args))
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


_NPX_FLAGS = {"-y", "--yes", "-q", "--quiet", "--no-install", "--prefer-offline", "--prefer-online", "-s", "--silent"}
_NPM_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$")


def _parse_npx(args: list[str]) -> Package:
    packages: list[str] = []
    while args and args[0].startswith("-"):
        option = args.pop(0)
        key, _, inline = option.partition("=")
        if option == "--":
            break
        if key in _NPX_FLAGS:
            continue
        if key in ("-p", "--package"):
            value = inline or (args.pop(0) if args else "")
            if not value:
                raise UsageError(f"`npx {option}` needs a value")
            packages.append(value)
            continue
        raise UsageError(f"cairn cannot turn `npx {option}` into an install in the sandbox image; "
                         f"run the server another way, or write its command out")
    if not args:
        raise UsageError("`npx` names no package to run")
    command = args.pop(0)
    if packages:  # npx -p PKG CMD: CMD is one of PKG's commands
        specs = [_npm_spec(p) for p in packages]
        return Package(name=specs[0][1], requirements=tuple(s for s, _ in specs), entry=command, launcher="npx",
                       args=tuple(args))
    spec, name = _npm_spec(command)
    return Package(name=name, requirements=(spec,), entry="", launcher="npx", args=tuple(args))


def _npm_spec(text: str) -> tuple[str, str]:
    """(npm install spec, package name) of `PKG`, `@scope/PKG`, `PKG@1.2`, `@scope/PKG@latest`."""
    at = text.find("@", 1)
    name, version = (text[:at], text[at + 1:]) if at > 0 else (text, "")
    if not _NPM_NAME.match(name):
        raise UsageError(f"{text!r} is not an npm package name cairn understands")
    return (name if version in ("", "latest") else f"{name}@{version}"), name


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


# Picks the command npx would run from an installed package's `bin` (npm's own rule: the only one, else
# the one named after the package without its scope), checks a command given with -p, and links it as
# <prefix>/cairn-entry. argv: prefix, package name, wanted command ("" for npx's choice).
_PICK_BIN_JS = """
const fs = require("fs"), path = require("path");
const [prefix, name, wanted] = process.argv.slice(2);
const manifest = JSON.parse(fs.readFileSync(path.join(prefix, "lib/node_modules", name, "package.json")));
const unscoped = name.replace(/^@[^/]+\\//, "");
const bins = typeof manifest.bin === "string" ? {[unscoped]: manifest.bin} : (manifest.bin || {});
const names = Object.keys(bins);
const pick = wanted || (names.length === 1 ? names[0] : names.find((n) => n === unscoped));
if (!pick || !fs.existsSync(path.join(prefix, "bin", pick))) {
  console.error(`the npm package ${name} has no command named ${pick || unscoped}; its commands are: ${names.join(", ") || "none"}`);
  process.exit(1);
}
fs.symlinkSync(path.join("bin", pick), path.join(prefix, "cairn-entry"));
"""


def tools_image(base: str, packages: list[Package], progress: Callable[[str], None] | None = None) -> str:
    """The image that is `base` plus each package under /opt/cairn-tools (a venv, or an npm prefix; Node.js
    and npm from Debian when the base has no npm): built once with the network on, then reused
    (sandbox/docker/derived.py; its tag is a hash of the base image's id, the packages and the host's CA
    certificates)."""
    from orchestrator.sandbox.docker.derived import derived_image

    wanted = sorted({(p.launcher == "npx", p.folder, p.name, p.requirements, p.entry) for p in packages})
    lines = []
    if any(node for node, *_ in wanted):
        lines += [
            "RUN set -eux; if ! command -v npm >/dev/null; then apt-get update; "
            "apt-get install -y --no-install-recommends nodejs npm ca-certificates; apt-get clean; "
            "rm -rf /var/lib/apt/lists/*; fi; node --version; npm --version",
            f"COPY pick-bin.js {TOOLS_ROOT}/pick-bin.js"]
    for node, folder, name, requirements, entry in wanted:
        quoted = " ".join(shlex.quote(r) for r in requirements)
        if node:
            prefix = f"{TOOLS_ROOT}/node/{folder}"
            lines.append(
                f"RUN set -eux; export NODE_EXTRA_CA_CERTS=${{NODE_EXTRA_CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}}; "
                f"npm install -g --no-fund --no-audit --no-update-notifier --prefix {prefix} {quoted}; "
                f"node {TOOLS_ROOT}/pick-bin.js {prefix} {shlex.quote(name)} {shlex.quote(entry)}")
            continue
        venv = f"{TOOLS_ROOT}/{folder}"
        lines.append(
            f"RUN set -eux; export PIP_CERT=${{PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}; "
            f"python3 -m venv {venv}; {venv}/bin/pip install --no-cache-dir --disable-pip-version-check "
            f"{quoted}; test -x {venv}/bin/{shlex.quote(entry)} || "
            f"{{ echo 'the package installs no command named {entry}; its commands are:'; ls {venv}/bin; exit 1; }}")
    return derived_image(base, TOOLS_REPOSITORY, wanted, lines, what="the MCP servers' packages",
                         names=", ".join(r for w in wanted for r in w[3][:1]), files={"pick-bin.js": _PICK_BIN_JS},
                         labels={"org.cairn.tools": json.dumps([list(w[3]) for w in wanted])}, progress=progress)


def image_for(base: str, servers: list[McpServerConfig], progress: Callable[[str], None] | None = None) -> str:
    """`base`, or the derived image with the packages the stdio servers fetch with uvx, pipx or npx."""
    packages = [p for s in servers if s.type == "stdio" and (p := package_of(s.command or "", s.args))]
    return tools_image(base, packages, progress) if packages else base


def server_argv(server: McpServerConfig) -> list[str]:
    package = package_of(server.command or "", server.args)
    return package.argv if package else [server.command or "", *server.args]



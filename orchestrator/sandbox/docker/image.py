"""The sandbox image: its tag, and building it when it is missing.

The tag is `cairn-sandbox:<12 hex>`, a hash of everything that goes into the build: cairn's version
(the image's `org.cairn.version` label), the files of cairn's `sandbox_image/` (package data) and
the host's extra CA certificates. The same inputs always give the same tag, so an image that exists is
never built again, and any change to the inputs gives a new one.

The Dockerfile starts `FROM ${BASE}`. The base is, in order of preference: one given by the caller;
`python:3.12-slim` if it is already here; `cairn-base:bookworm` if an earlier build made it;
`python:3.12-slim` pulled from Docker Hub; and, where no registry can be reached, a Debian bookworm
made here with debootstrap and imported as `cairn-base:bookworm`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import docker.errors
from docker.utils import parse_repository_tag

from orchestrator.errors import SandboxError, first_line
from orchestrator.sandbox import toolbox_files
from orchestrator.sandbox.docker.engine import connect, has_image
from orchestrator.version import __version__

Progress = Callable[[str], None]

HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
REPOSITORY = "cairn-sandbox"
DEFAULT_BASE = "python:3.12-slim"
LOCAL_BASE = "cairn-base:bookworm"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"

# Asking the registry for a manifest answers in well under a second where it is reachable; a firewall
# that drops packets would otherwise hold the build for minutes before the debootstrap fallback.
REGISTRY_PROBE_SECONDS = 20.0
LOG_TAIL_LINES = 25
# Files that appear beside the sources without being part of the image (the host imports the toolbox).
_IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_IGNORED_SUFFIXES = {".pyc", ".pyo"}
# Lines of the builder's own about layers and intermediate containers, not of the step's commands.
_BUILDER_CHATTER = (" ---> ", "Removing intermediate container", "Successfully built", "Successfully tagged")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def image_tag(source: Path | None = None, ca_dir: Path | None = None) -> str:
    """`cairn-sandbox:<12 hex>` for the build context made from `source` and `ca_dir`.

    Defaults: cairn's `sandbox_image/` (package data) and the host's `/usr/local/share/ca-certificates`.
    """
    return f"{REPOSITORY}:{_context_hash(_context_files(source, ca_dir))[:12]}"


def ensure_image(progress: Progress | None = None) -> str:
    """The tag of the sandbox image, building it first only if the engine does not have it."""
    return build_image(progress)


def build_image(
    progress: Progress | None = None,
    force: bool = False,
    base: str | None = None,
    *,
    source: Path | None = None,
    ca_dir: Path | None = None,
) -> str:
    """Build the sandbox image unless it exists already (or `force`), and return its tag.

    `base` overrides the choice of base image (see the module's docstring). `source` and `ca_dir` are
    for tests: another copy of `sandbox_image/`, another directory of CA certificates.
    Raises SandboxError naming the step that failed, with the last lines of that step's log.
    A build says when it starts and when it ends (with the time it took): through `progress`, which also
    gets every step and its log, or else on stderr, so an automatic build is never a silent wait.
    """
    say = progress or (lambda _step: None)
    announce = progress or _to_stderr
    files = _context_files(source, ca_dir)
    digest = _context_hash(files)
    tag = f"{REPOSITORY}:{digest[:12]}"
    client = connect()
    # Two runs of a batch may both find the image missing; the lock makes the second one wait and
    # then find it built, instead of building it (or debootstrapping) a second time.
    with _build_lock():
        if not force and has_image(client, tag):
            return tag
        started = time.monotonic()
        announce(f"building the sandbox image {tag} (once for this version of cairn; about a minute)")
        if base is None:
            base = _choose_base(client, say)
        elif not has_image(client, base):
            _pull(client, base, say)
        with tempfile.TemporaryDirectory(prefix="cairn-image-") as context:
            _write_context(files, Path(context))
            _docker_build(client, Path(context), tag,
                          {"BASE": base, "CAIRN_BUILD_HASH": digest, "CAIRN_VERSION": __version__}, say)
    if not has_image(client, tag):
        raise SandboxError(f"docker build ended without error but {tag} is not in the engine")
    announce(f"built {tag} on {base} in {time.monotonic() - started:.0f} s")
    return tag


def _to_stderr(line: str) -> None:
    print(f"cairn: {line}", file=sys.stderr, flush=True)


# The build context and its hash


def _context_files(source: Path | None, ca_dir: Path | None) -> list[tuple[str, Path]]:
    """(path in the build context, file on the host) for every file of the context, sorted."""
    source = source or toolbox_files.folder()
    ca_dir = ca_dir or HOST_CA_DIR
    if not (source / "Dockerfile").is_file():
        raise SandboxError(f"no Dockerfile in {source}: the sandbox_image/ directory of cairn is incomplete")
    files = {
        path.relative_to(source).as_posix(): path
        for path in source.rglob("*")
        if path.is_file() and not _ignored(path.relative_to(source))
    }
    if ca_dir.is_dir():
        # update-ca-certificates only reads *.crt, so that is all that is carried.
        for path in ca_dir.rglob("*.crt"):
            if path.is_file():
                files[f"extra-ca/{path.relative_to(ca_dir).as_posix()}"] = path
    return sorted(files.items())


def _write_context(files: list[tuple[str, Path]], context: Path) -> None:
    for relative, path in files:
        target = context / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def _ignored(relative: Path) -> bool:
    return bool(_IGNORED_PARTS.intersection(relative.parts)) or relative.suffix in _IGNORED_SUFFIXES


def _context_hash(files: list[tuple[str, Path]]) -> str:
    digest = hashlib.sha256()
    # The version is a build argument (the image's label), so it is an input like the files.
    digest.update(f"version\0{__version__}\0".encode())
    for relative, path in files:
        content = path.read_bytes()
        # Name and length delimit each entry, so moving bytes from one file to the next changes it.
        digest.update(f"{relative}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


@contextmanager
def _build_lock() -> Iterator[None]:
    lock_path = Path(tempfile.gettempdir()) / f"cairn-image-build-{os.getuid()}.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# Choosing and making the base


def _choose_base(client: docker.DockerClient, say: Progress) -> str:
    for present in (DEFAULT_BASE, LOCAL_BASE):
        if has_image(client, present):
            return present
    if _registry_reachable(DEFAULT_BASE):
        try:
            _pull(client, DEFAULT_BASE, say)
            return DEFAULT_BASE
        except SandboxError as exc:
            say(f"{exc.message}; making a local base instead")
    else:
        say(f"{DEFAULT_BASE} cannot be pulled here; making a local Debian {DEBIAN_SUITE} base instead")
    _make_local_base(client, say)
    return LOCAL_BASE


def _registry_reachable(image: str) -> bool:
    probe = connect(timeout=REGISTRY_PROBE_SECONDS)
    try:
        probe.api.inspect_distribution(image)
    except (docker.errors.APIError, OSError):
        # requests' timeouts are OSErrors too; either way the registry is out of reach from here.
        return False
    finally:
        probe.close()
    return True


def _pull(client: docker.DockerClient, image: str, say: Progress) -> None:
    say(f"pulling {image}")
    repository, tag = parse_repository_tag(image)
    try:
        for event in client.api.pull(repository, tag=tag or "latest", stream=True, decode=True):
            if "error" in event:
                raise SandboxError(f"cannot pull {image}: {_one_line(event['error'])}")
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot pull {image}: {_one_line(exc.explanation or str(exc))}") from exc


def _make_local_base(client: docker.DockerClient, say: Progress) -> None:
    """Debootstrap a minimal Debian and import it as LOCAL_BASE."""
    debootstrap = _find_debootstrap(say)
    # Not in /tmp: where that is a `nodev` tmpfs, dpkg inside the new root cannot open /dev/null.
    parent = "/var/tmp" if os.path.isdir("/var/tmp") else None
    root = Path(tempfile.mkdtemp(prefix="cairn-debootstrap-", dir=parent))
    try:
        say(f"debootstrap {DEBIAN_SUITE} (about a minute)")
        _run_step(
            f"debootstrap {DEBIAN_SUITE}",
            [debootstrap, "--variant=minbase", DEBIAN_SUITE, str(root), DEBIAN_MIRROR],
            say,
        )
        say(f"importing the new root as {LOCAL_BASE}")
        _import_root(client, root, LOCAL_BASE)
    finally:
        _remove_root(root, say)


def _find_debootstrap(say: Progress) -> str:
    found = shutil.which("debootstrap") or _sbin("debootstrap")
    if found:
        if os.geteuid() != 0:
            raise SandboxError(
                f"{DEFAULT_BASE} cannot be pulled and making a local base with debootstrap needs root",
                hint="run `sudo cairn image build` once, or `cairn image build --base IMAGE` with an image you have",
            )
        return found
    if os.geteuid() == 0 and Path("/etc/debian_version").exists() and shutil.which("apt-get"):
        say("installing debootstrap with apt-get")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run_step("apt-get update", ["apt-get", "update", "-q"], say, env)
        _run_step(
            "apt-get install debootstrap",
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"],
            say,
            env,
        )
        found = shutil.which("debootstrap") or _sbin("debootstrap")
        if found:
            return found
    raise SandboxError(
        f"{DEFAULT_BASE} cannot be pulled and debootstrap, which would make a local base, is not installed",
        hint="let Docker reach Docker Hub, or install debootstrap and run as root (Debian: apt-get install "
        "debootstrap), or `cairn image build --base IMAGE` with an image you have",
    )


def _sbin(name: str) -> str | None:
    # A non-login root shell may lack /usr/sbin in PATH, where Debian puts debootstrap.
    path = Path("/usr/sbin", name)
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def _import_root(client: docker.DockerClient, root: Path, image: str) -> None:
    repository, tag = image.split(":")
    # GNU tar rather than the tarfile module: it is there wherever debootstrap is, keeps device nodes,
    # hard links and extended attributes exactly, and is several times faster on a 200 MB tree.
    # Its stderr goes to a file: a pipe nobody reads while the import runs could fill up and stall tar.
    with tempfile.TemporaryFile() as tar_errors:
        tar = subprocess.Popen(
            ["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE, stderr=tar_errors
        )
        assert tar.stdout is not None
        chunks = iter(lambda: tar.stdout.read(1 << 20), b"")
        try:
            answer = client.api.import_image_from_stream(chunks, repository=repository, tag=tag)
        except docker.errors.APIError as exc:
            tar.kill()
            tar.wait()
            raise SandboxError(f"docker import of the debootstrap root failed: {_one_line(str(exc))}") from exc
        if tar.wait() != 0:
            tar_errors.seek(0)
            raise SandboxError(
                f"tar of the debootstrap root failed: {_one_line(tar_errors.read().decode(errors='replace'))}"
            )
    if '"error' in str(answer) or not has_image(client, image):
        raise SandboxError(f"docker import of the debootstrap root failed: {_one_line(str(answer))}")


def _remove_root(root: Path, say: Progress) -> None:
    """Delete a debootstrap root, after unmounting what debootstrap may have left mounted in it.

    In some containers debootstrap bind-mounts the host's /dev into the root; deleting through such a
    mount would delete the host's device nodes, so nothing is deleted while a mount remains. That case
    is only reported, not raised: it runs while the error that stopped debootstrap may be on its way up.
    """
    for mountpoint in sorted(_mounts_below(root), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mountpoint], capture_output=True, check=False)
    still = _mounts_below(root)
    if still:
        say(f"left {root} in place: {still[0]} is still mounted in it; unmount it, then delete {root}")
        return
    shutil.rmtree(root)


def _mounts_below(root: Path) -> list[str]:
    prefix = str(root).rstrip("/") + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1].replace("\\040", " ") for line in mounts]
    return [point for point in points if point.startswith(prefix)]


# Running the steps


def _docker_build(
    client: docker.DockerClient, context: Path, tag: str, buildargs: dict[str, str], say: Progress
) -> None:
    step = "docker build"
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    pending = ""
    try:
        stream = client.api.build(
            path=str(context), tag=tag, buildargs=buildargs, rm=True, forcerm=True, pull=False, decode=True
        )
        for event in stream:
            if "error" in event:
                raise _step_failed(step, _one_line(event["error"]), tail)
            # The engine sends the log in pieces that need not end at line ends.
            pending += event.get("stream", "")
            *lines, pending = pending.split("\n")
            for line in lines:
                # The classic builder colours a step's stderr with terminal escapes.
                line = _ANSI_ESCAPE.sub("", line).rstrip()
                if line.startswith(_BUILDER_CHATTER):
                    continue
                if line.startswith("Step "):
                    # "Step 3/9 : RUN set -eux; ..." -> "docker build step 3/9: RUN set -eux; ..."
                    number, _, instruction = line[len("Step ") :].partition(" : ")
                    step = f"docker build step {number}"
                    tail.clear()
                    say(f"{step}: {_shorten(instruction)}")
                elif line:
                    tail.append(line)
                    say(f"  | {line}")
    except docker.errors.APIError as exc:
        # Refused before any step ran: a bad Dockerfile, a missing base, an engine error.
        raise _step_failed(step, _one_line(exc.explanation or str(exc)), tail) from exc


def _run_step(step: str, argv: list[str], say: Progress, env: dict[str, str] | None = None) -> None:
    """Run a command, passing its output line by line to `say`; raise SandboxError if it fails."""
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        env=env,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip()
            if line:
                tail.append(line)
                say(f"  | {line}")
        code = process.wait()
    if code != 0:
        raise _step_failed(step, f"exit code {code}", tail)


def _step_failed(step: str, reason: str, tail: deque[str]) -> SandboxError:
    log = "\n".join(f"    {line}" for line in tail) or "    (no output)"
    return SandboxError(f"{step} failed: {reason}", hint=f"last lines of its log:\n{log}")


def _one_line(text: str) -> str:
    return _shorten(first_line(str(text)), 300)


def _shorten(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

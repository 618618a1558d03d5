"""A Python carried into images that have none, so the toolbox runs on any Linux image.

The toolbox is standard-library Python. cairn's own image has python3; a user's image (`--image`) may
have none (a plain debian), a musl one (alpine), or no libc at all (busybox). So cairn fills a named
Docker volume, `cairn-python-<hash>`, once, from its own sandbox image: the python3 binary, the shared
libraries it and its extension modules need (as `ldd` lists them), the dynamic loader, the standard
library and the CA bundle. The volume is mounted read-only at /opt/cairn-python and the toolbox is
started through the carried loader:

    /opt/cairn-python/python/lib/ld.so --library-path /opt/cairn-python/python/lib \
        /opt/cairn-python/python/bin/python3 -I -S /opt/cairn/toolbox.py ...

The loader is the one that resolves every library, so the image's own libc (musl, or none) is never
used, and nothing leaks into the commands the toolbox runs: `--library-path` is an argument of this one
process, not an environment variable. `-I -S`: no PYTHON* variables, no site-packages of the image.

The volume is filled in a scratch directory that is renamed to `python/` when whole (a rename is
atomic), so two cairn processes filling it at once, or a fill cut off by Ctrl-C, never leave a half
Python that a toolbox would start from. Its name holds a hash of the sandbox image and of the fill
script, so a new image gets a new volume; `docker volume rm` of an old one is always safe.
"""

from __future__ import annotations

import hashlib

import docker
import docker.errors

from orchestrator.errors import SandboxError

MOUNT = "/opt/cairn-python"
HOME = f"{MOUNT}/python"
LOADER = f"{HOME}/lib/ld.so"
PYTHON = f"{HOME}/bin/python3"
CA_BUNDLE = f"{HOME}/etc/ca-certificates.crt"  # cairn's image's: the host's local CAs are in it
LABEL = "cairn.python"

# Runs as root in a container of cairn's image, with the volume at /dest (or on a host, into another folder).
FILL_SCRIPT = r'''
import glob, os, secrets, shutil, subprocess, sys, sysconfig

DEST = sys.argv[1] if len(sys.argv) > 1 else "/dest"  # another folder: a Harbor environment's copy (integrations/harbor)
if os.path.isdir(f"{DEST}/python"):
    sys.exit(0)  # filled already (by another cairn process)
fill = f"{DEST}/.fill-{secrets.token_hex(4)}"
version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
stdlib = sysconfig.get_paths()["stdlib"]
dynload = sysconfig.get_config_var("DESTSHARED") or f"{stdlib}/lib-dynload"
# What the toolbox never imports; test alone is a third of the standard library.
SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages", "dist-packages"}
os.makedirs(f"{fill}/bin")
os.makedirs(f"{fill}/etc")
shutil.copy2(os.path.realpath(sys.executable), f"{fill}/bin/python3")
shutil.copytree(stdlib, f"{fill}/lib/{version}",
                ignore=lambda d, names: [n for n in names if d == stdlib and (n in SKIP or n.startswith("config-"))])
if not os.path.isdir(f"{fill}/lib/{version}/lib-dynload"):
    shutil.copytree(dynload, f"{fill}/lib/{version}/lib-dynload")
libraries, loader = {}, None
for binary in [os.path.realpath(sys.executable), *glob.glob(f"{dynload}/*.so")]:
    listed = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        parts = line.split()
        if "=>" in parts and parts.index("=>") + 1 < len(parts) and parts[parts.index("=>") + 1].startswith("/"):
            libraries[parts[0]] = parts[parts.index("=>") + 1]
        elif parts and parts[0].startswith("/"):
            loader = parts[0]
if loader is None:
    sys.exit("no dynamic loader in ldd's output of " + sys.executable)
for name, path in libraries.items():
    shutil.copyfile(os.path.realpath(path), f"{fill}/lib/{name}")
shutil.copyfile(os.path.realpath(loader), f"{fill}/lib/ld.so")
for name in os.listdir(f"{fill}/lib"):
    if not os.path.isdir(f"{fill}/lib/{name}"):
        os.chmod(f"{fill}/lib/{name}", 0o755)
for bundle in ("/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/cert.pem"):
    if os.path.isfile(bundle):
        shutil.copyfile(bundle, f"{fill}/etc/ca-certificates.crt")
        break
try:
    os.rename(fill, f"{DEST}/python")
except OSError:  # another process renamed its whole copy first
    shutil.rmtree(fill)
'''

_ready: set[str] = set()  # volumes this process filled or found whole


def volume_name(source_image_id: str) -> str:
    digest = hashlib.sha256(f"{source_image_id}\n{FILL_SCRIPT}".encode()).hexdigest()[:12]
    return f"cairn-python-{digest}"


def argv(script: str) -> list[str]:
    """The command that runs `script` with the carried Python."""
    return [LOADER, "--library-path", f"{HOME}/lib", PYTHON, "-I", "-S", script]


def ensure(client: docker.DockerClient, source_image: str) -> str:
    """The name of the volume that carries a Python from `source_image` (cairn's own), created and
    filled when it is not there yet. Raises SandboxError when the engine refuses."""
    try:
        name = volume_name(client.api.inspect_image(source_image)["Id"])
        if name in _ready:
            return name
        try:
            client.api.inspect_volume(name)
        except docker.errors.NotFound:
            client.api.create_volume(name, labels={LABEL: "1", "cairn.source-image": source_image})
            fill(client, source_image, name)
        return name
    except docker.errors.DockerException as exc:
        raise SandboxError(f"cannot make the volume that carries Python into the sandbox: {exc}") from exc


def fill(client: docker.DockerClient, source_image: str, name: str) -> None:
    """Fill the volume `name` from `source_image` (a no-op when it is whole already)."""
    try:
        client.containers.run(source_image, entrypoint=["python3", "-c", FILL_SCRIPT], command=[], user="0:0",
                              volumes={name: {"bind": "/dest", "mode": "rw"}}, network_mode="none",
                              labels={LABEL: "fill"}, remove=True, stdout=False, stderr=True)
    except docker.errors.ContainerError as exc:
        detail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
        raise SandboxError(f"cannot fill the volume {name} with a Python: {detail[0][:300]}") from exc
    _ready.add(name)


def check(container: object, client: docker.DockerClient, source_image: str, name: str) -> None:
    """Make sure the carried Python is whole in a running container, filling the volume when a fill was
    cut off earlier (the volume exists, its `python/` does not). One `docker exec` of the loader, which
    checks the binary without starting Python, and only once per process and volume."""
    if name in _ready:
        return
    code, _ = container.exec_run([LOADER, "--verify", PYTHON], user="0:0")
    if code != 0:
        fill(client, source_image, name)
    _ready.add(name)

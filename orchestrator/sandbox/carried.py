"""The Python cairn carries into a sandbox whose image has none, whatever the backend.

The toolbox is standard-library Python. A user's image may have no python3 (a plain debian), a musl one
(alpine), or no libc at all (busybox). So cairn carries one in: the python3 binary of cairn's own image
(Docker, sandbox/docker/python_volume.py, fills a volume with it) or of this host (Harbor's environments,
sandbox/harbor/, upload a tar of it), with the shared libraries it and its extension modules need (as
`ldd` lists them), the dynamic loader, the standard library and the CA bundle, at MOUNT. The toolbox is
then started through the carried loader:

    /opt/cairn-python/python/lib/ld.so --library-path /opt/cairn-python/python/lib \
        /opt/cairn-python/python/bin/python3 -I -S /opt/cairn ...

The loader is the one that resolves every library, so the image's own libc (musl, or none) is never
used, and nothing leaks into the commands the toolbox runs: `--library-path` is an argument of this one
process, not an environment variable. `-I -S`: no PYTHON* variables, no site-packages of the image.

A fill is made in a scratch directory that is renamed to `python/` when whole (a rename is atomic), so
two cairn processes filling at once, or a fill cut off by Ctrl-C, never leave a half Python that a
toolbox would start from.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from orchestrator.errors import SandboxError

MOUNT = "/opt/cairn-python"
HOME = f"{MOUNT}/python"
LOADER = f"{HOME}/lib/ld.so"
PYTHON = f"{HOME}/bin/python3"
CA_BUNDLE = f"{HOME}/etc/ca-certificates.crt"  # cairn's image's: the host's local CAs are in it

# Runs as root in a container of cairn's image, with the volume at /dest (or on a host, into another folder).
FILL_SCRIPT = r'''
import glob, os, secrets, shutil, subprocess, sys, sysconfig

DEST = sys.argv[1] if len(sys.argv) > 1 else "/dest"  # another folder: a Harbor environment's copy (sandbox/harbor)
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


def argv(script: str) -> list[str]:
    """The command that runs `script` with the carried Python."""
    return [LOADER, "--library-path", f"{HOME}/lib", PYTHON, "-I", "-S", script]


def carried_python(cache: Path | None = None) -> Path:
    """A tar.gz of this host's Python, made to run anywhere on the same architecture (python_volume.py's
    fill script: the binary, its libraries and loader, the standard library, the CA bundle); made once
    per Python and fill script, in cairn's cache."""
    digest = hashlib.sha256(f"{sys.version}\n{sys.executable}\n{FILL_SCRIPT}".encode()).hexdigest()[:12]
    cache = cache or Path.home() / ".cache" / "cairn"
    tar = cache / f"carried-python-{digest}.tar.gz"
    if tar.is_file():
        return tar
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cairn-carried-python-") as dest:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", FILL_SCRIPT, dest],
                              capture_output=True, text=True)
        if done.returncode != 0 or not (Path(dest) / "python").is_dir():
            raise SandboxError(f"cannot carry this host's Python into the environment: "
                               f"{_last_line(done.stderr) or 'the copy failed'}")
        partial = tar.with_suffix(".partial")
        with tarfile.open(partial, "w:gz") as archive:
            archive.add(Path(dest) / "python", arcname="python")
        partial.replace(tar)
    return tar


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""

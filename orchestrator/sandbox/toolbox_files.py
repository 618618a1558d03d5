"""The toolbox's code as a backend puts it into a sandbox, and the command that starts it.

The toolbox is the folder `sandbox_image/` of cairn (package data, `orchestrator.sandbox_image`): its
`__main__.py` and the standard-library package `toolbox/`. Python runs such a folder, or a zip of it (a
zipapp), as a program: `python3 /opt/cairn --workdir ...`. Docker mounts the folder read-only at
/opt/cairn in every container (sandbox/docker/profile.py), so the toolbox always matches this cairn and
no file the agent writes can take its place; Harbor's environments get it uploaded as one zipapp
(sandbox/harbor/), which runs the same way.
"""

from __future__ import annotations

import io
import zipfile
from importlib import resources
from pathlib import Path

from orchestrator.errors import SandboxError

TOOLBOX_IN_SANDBOX = "/opt/cairn"  # where the folder is mounted (Docker) and the zipapp's folder (Harbor)
# How any Python runs the toolbox: isolated (no PYTHON* variables, no user site, not the current folder)
# and without `site` (no site-packages: a .pth file the agent's `pip install` left there runs nothing in it).
PYTHON_FLAGS = ["-I", "-S"]
CAIRN_DIR = "/cairn"  # where the run's own cairn files (<run>/cairn/) are seen in the sandbox
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)  # every member's time: the same code gives the same bytes


def folder() -> Path:
    """The folder that holds `__main__.py` and `toolbox/`, as installed (a wheel) or checked out (an
    editable install maps the package to the repository's `sandbox_image/`)."""
    found = resources.files("orchestrator.sandbox_image")
    path = Path(str(found))
    if not (path / "__main__.py").is_file() or not (path / "toolbox").is_dir():
        raise SandboxError(f"cairn's toolbox is not at {path}: its sandbox_image/ is missing or incomplete; "
                           "reinstall cairn")
    return path


def sources() -> list[tuple[str, bytes]]:
    """The program's files as a zipapp holds them: `__main__.py` and the package's modules, sorted."""
    root = folder()
    names = ["__main__.py", *sorted(p.relative_to(root).as_posix() for p in (root / "toolbox").glob("*.py"))]
    return [(name, (root / name).read_bytes()) for name in names]


def zipapp() -> bytes:
    """The toolbox as one zipapp, byte for byte the same for the same code."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in sources():
            info = zipfile.ZipInfo(name, _ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def arguments(workdir: str, lockdown: bool, program: str = TOOLBOX_IN_SANDBOX) -> list[str]:
    """What follows the Python that runs the toolbox: the program (the folder or a zipapp), the work
    directory, cairn's directory and the confinement (PROTOCOL.md)."""
    return [program, "--workdir", workdir, "--cairn", CAIRN_DIR, *(["--lockdown"] if lockdown else [])]

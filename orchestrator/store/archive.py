"""`cairn export` / `cairn import`: a run (workspace and state) as one tar.gz, to move it between machines.

The archive holds one top-level directory, the run id, with `workspace/` and `state/` under it (and so
`state/checkpoints.git` when the run has one; with `export --with-machine`, `state/machine.tar`: the
run's container as a `docker save` image, see orchestrator/sandbox/machine.py). Modes are kept;
ownership is not: imported files belong to the user who imports (a later resume of a `--lockdown` run as root
gives the workspace to the sandbox user again).

An archive may come from anywhere, so import checks every member before it extracts any: only regular
files, directories, symlinks and hard links, each under `<id>/workspace` or `<id>/state`; no absolute
path, no `..`, no member under a symlink, no link that leads outside the run, no name twice. It
extracts into a temporary directory beside the runs and renames that into place, so a refused or broken
archive never leaves half a run behind.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

from orchestrator.errors import UsageError
from orchestrator.store.runs import RunDir

PARTS = ("workspace", "state")
# Files of a live process, meaningless elsewhere: the pid file and half-written temporary files.
STATE_SKIP = ("pid", "pid.tmp", "run.json.tmp")
MACHINE_MEMBER = "machine.tar"  # the same name as sandbox.machine.MACHINE_FILE (not imported: no docker here)
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SPECIAL_BITS = 0o7000  # setuid, setgid, sticky: never carried into an import


def export_run(run: RunDir, out: Path, machine: Path | None = None) -> list[str]:
    """Writes `out` (tar.gz); returns the paths it left out (links leading outside the run, fifos...).
    `machine`: the run's container saved as an image (sandbox/machine.py), added as state/machine.tar."""
    skipped: list[str] = []
    root = run.root.resolve()
    skip = STATE_SKIP + ((MACHINE_MEMBER,) if machine is not None else ())

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        rel = info.name.split("/", 1)[1] if "/" in info.name else ""
        if rel.startswith("state/") and rel.count("/") == 1 and rel.split("/")[1] in skip:
            return None
        if info.issym() and not _link_inside(info.name, info.linkname, run.id):
            skipped.append(f"{rel} (a symlink to {info.linkname}, outside the run)")
            return None
        if not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
            skipped.append(f"{rel} (not a file, directory or link)")
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
            tar.add(root, arcname=run.id, recursive=False)
            if run.external_workspace is None:
                for part in PARTS:
                    if (root / part).is_dir():
                        tar.add(root / part, arcname=f"{run.id}/{part}", filter=keep)
            else:
                _add_in_place_run(tar, run, keep)
            if machine is not None:
                add_machine(tar, run.id, machine)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return skipped


def add_machine(tar: tarfile.TarFile, run_id: str, machine: Path) -> None:
    """The run's machine (a `docker save` tar) as `<id>/state/machine.tar`: the host side of the run, which
    the sandbox never sees; the run's next session loads it (runner.carried_machine)."""
    info = tar.gettarinfo(machine, arcname=f"{run_id}/state/{MACHINE_MEMBER}")
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o600
    with open(machine, "rb") as f:
        tar.addfile(info, f)


def _add_in_place_run(tar: tarfile.TarFile, run: RunDir, keep) -> None:  # noqa: ANN001
    """A run made with `--workspace DIR` is exported as an ordinary run: DIR becomes its workspace/, its
    cairn files (`<run>/cairn/`, the sandbox's /workspace/.cairn) go to workspace/.cairn, and run.json
    forgets DIR, so the imported run works on its own copy."""
    def keep_workspace(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        rel = info.name.split("/", 1)[1]
        return None if rel == "workspace/.cairn" or rel.startswith("workspace/.cairn/") else keep(info)

    def keep_state(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if info.name == f"{run.id}/state/run.json" else keep(info)

    tar.add(run.workspace, arcname=f"{run.id}/workspace", filter=keep_workspace)
    if run.cairn_dir.is_dir():
        tar.add(run.cairn_dir, arcname=f"{run.id}/workspace/.cairn", filter=keep)
    tar.add(run.state, arcname=f"{run.id}/state", filter=keep_state)
    meta = run.read_meta()
    meta.pop("workspace", None)
    data = json.dumps(meta, indent=2, sort_keys=True).encode()
    info = tarfile.TarInfo(f"{run.id}/state/run.json")
    info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def import_run(archive: Path, runs_dir: Path) -> RunDir:
    """Checks and extracts an exported run into `runs_dir`; refuses an unsafe archive or a taken id."""
    archive = Path(archive)
    try:
        tar = tarfile.open(archive, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise UsageError(f"cannot read {archive} as a run archive ({exc})") from exc
    with tar:
        try:
            members = tar.getmembers()
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise UsageError(f"{archive} is a broken archive ({exc})") from exc
        run_id = check_members(members, archive)
        target = runs_dir / run_id
        if target.exists():
            raise UsageError(f"run {run_id} already exists in {runs_dir}; not imported",
                             hint="remove that run first, or import into another --runs-dir")
        runs_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".import-{run_id}-", dir=runs_dir))
        try:
            uid, gid = os.getuid(), os.getgid()
            for m in members:
                m.uid, m.gid, m.uname, m.gname = uid, gid, "", ""  # ownership follows the importer
                m.mode &= ~_SPECIAL_BITS
            trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(staging, members=members, numeric_owner=True, **trusted)  # checked above
            extracted = staging / run_id
            if not (extracted / "state" / "run.json").is_file() or not (extracted / "state" / "events.jsonl").is_file():
                raise UsageError(f"{archive} holds no run: {run_id}/state/run.json or events.jsonl is missing")
            (extracted / "workspace").mkdir(exist_ok=True)
            try:
                os.rename(extracted, target)  # fails if the id was taken meanwhile
            except OSError as exc:
                raise UsageError(f"run {run_id} already exists in {runs_dir}; not imported") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return RunDir(target)


def check_members(members: list[tarfile.TarInfo], archive: Path | str = "the archive") -> str:
    """The run id the archive holds; raises UsageError naming the first member that is not safe."""
    if not members:
        raise UsageError(f"{archive} is empty")
    run_id = members[0].name.strip("/").split("/")[0]
    if not RUN_ID.match(run_id):
        raise UsageError(f"{archive}: {run_id!r} is not a run id")
    seen: set[str] = set()
    links: set[str] = set()  # symlink members: nothing may be extracted through them
    for m in members:
        name = m.name

        def refuse(why: str) -> UsageError:
            return UsageError(f"refusing {archive}: member {name!r} {why}")

        if name.startswith("/") or re.match(r"^[A-Za-z]:", name) or "\\" in name:
            raise refuse("has an absolute path")
        parts = name.rstrip("/").split("/")
        if ".." in parts or "" in parts or "." in parts[1:]:
            raise refuse("has '..' or an empty part in its path")
        if parts[0] != run_id:
            raise refuse(f"is outside the run directory {run_id}/")
        if len(parts) > 1 and parts[1] not in PARTS:
            raise refuse("is neither under workspace/ nor under state/")
        path = "/".join(parts)
        if path in seen:
            raise refuse("appears twice")
        if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
            raise refuse("lies under a symlink")
        if m.isdev() or m.isfifo() or not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
            raise refuse("is a device, fifo or other special file")
        if len(parts) < 3 and not m.isdir():
            raise refuse("should be a directory")
        if m.issym():
            if not _link_inside(path, m.linkname, run_id):
                raise refuse(f"is a symlink leading outside the run ({m.linkname})")
            links.add(path)
        if m.islnk():
            target = m.linkname.rstrip("/")
            if target not in seen or target in links or target.split("/")[0] != run_id:
                raise refuse(f"is a hard link to something that is not a file of the run ({m.linkname})")
        seen.add(path)
    return run_id


def _link_inside(name: str, linkname: str, run_id: str) -> bool:
    """Whether a symlink at `name` (archive path) pointing to `linkname` stays inside `<run_id>/`."""
    if not linkname or linkname.startswith("/") or "\\" in linkname:
        return False
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), linkname))
    return resolved == run_id or resolved.startswith(run_id + "/")

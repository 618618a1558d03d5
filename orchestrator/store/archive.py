"""`cairn export` / `cairn import`: a run (workspace and state) as one tar.gz, to move it between machines.

The archive holds one top-level directory, the run id, with `workspace/`, `cairn/` (cairn's own files:
saved outputs, pages, summaries; absent in archives of older runs) and `state/` under it (and so
`state/checkpoints.git` when the run has one; with `export --with-machine`, `state/machine.tar`: the
run's container as a `docker save` image, see orchestrator/sandbox/docker/machine.py). Modes are kept;
ownership is not: imported files belong to the user who imports (a later resume of a `--lockdown` run
as root gives the workspace to the sandbox user again).

An archive may come from anywhere, so import checks every member before it extracts any: only regular
files, directories, symlinks and hard links, each under `<id>/workspace`, `<id>/cairn` or `<id>/state`;
no absolute path, no `..`, no member under a symlink, no name twice; no link in `state/` at all. Every symlink is
resolved the way the file system would, through the other links of the archive, and one that ends
outside the run is refused (`sub/deep -> ../..` with `sub/x -> deep/../../f`). Sizes are bounded from
the headers before anything is written (declared sizes, the real size of a sparse member, the number of
members; and, unless the user gave `--max-size`, the ratio of the data to the archive's own size, which
refuses a decompression bomb long before the absolute bound; a sparse member's holes are no expansion,
so only its data counts there) and again on disk while extracting. It extracts into a temporary directory beside the runs and
renames that into place, so a refused or broken archive never leaves half a run behind.

An imported run is marked in its run.json (`"imported": {"archive", "at", "trusted": false}`): its
settings that reach the host apply only once the user trusts it (orchestrator/store/trust.py). Its
`checkpoints.git` gets cairn's own config and loses hooks, info/ and the index (checkpoints.own_git_dir).

Export leaves out what would not be safe or sane to carry: links whose chain leaves the run, special
files. A file that is mostly holes (a disk image, a preallocated file) is written as a GNU sparse member
(PAX format 1.0) holding only its data, so a 50 GB sparse file costs what it holds, not 50 GB of zeros
(store/sparse.py).
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
import zlib
from pathlib import Path
from typing import Callable, Iterator

from orchestrator.sizes import format_size
from orchestrator.errors import UsageError
from orchestrator.store.checkpoints import SKIPPED_DIRS, own_git_dir
from orchestrator.events import parse_event
from orchestrator.store import run_meta
from orchestrator.store.run_dir import RunDir
from orchestrator.store.archive_files import add_tree

PARTS = ("workspace", "cairn", "state")
# Files of a live process, meaningless elsewhere: the pid file and half-written temporary files.
STATE_SKIP = ("pid", "pid.tmp", "lock", "run.json.tmp")
MACHINE_MEMBER = "machine.tar"  # the same name as sandbox.machine.MACHINE_FILE (not imported: no docker here)
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SPECIAL_BITS = 0o7000  # setuid, setgid, sticky: never carried into an import
MAX_BYTES = 20 * 2**30  # what a real run holds, with room: `cairn import --max-size` raises it
MAX_FILES = 1_000_000
# A decompression bomb: an archive of a few MB that unpacks to GBs. Real runs (source, logs, git packs)
# unpack to a few times their archive, rarely tens; gzip's most is ~1,000 (zeros). Without --max-size, an
# archive whose data passes RATIO_FLOOR is refused once it holds more than MAX_RATIO times its own size.
MAX_RATIO = 100
RATIO_FLOOR = 256 * 2**20
_MAX_LINK_HOPS = 40  # as Linux's ELOOP


# -- export -----------------------------------------------------------------------------------------

def export_run(run: RunDir, out: Path, machine: Path | None = None) -> list[str]:
    """Writes `out` (tar.gz); returns one line for each path it left out or wrote sparse, saying why.
    `machine`: the run's container saved as an image (sandbox/docker/machine.py), added as state/machine.tar."""
    notes: list[str] = []
    root = run.root.resolve()
    skip = STATE_SKIP + ((MACHINE_MEMBER,) if machine is not None else ())

    def keep_under(base: Path, arc_base: str) -> Callable[[tarfile.TarInfo], tarfile.TarInfo | None]:
        """The filter for the tree at `base` (host), added as `arc_base` in the archive."""
        inside = base.resolve()

        def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            rel = info.name.split("/", 1)[1] if "/" in info.name else ""
            if rel.startswith("state/") and rel.count("/") == 1 and rel.split("/")[1] in skip:
                return None
            host = base / info.name[len(arc_base):].lstrip("/")
            if info.issym() and not (_link_inside(info.name, info.linkname, run.id)
                                     and _within(Path(os.path.realpath(host)), inside)):
                notes.append(f"left out: {rel} (a symlink to {info.linkname}, leading outside the run)")
                return None
            if not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
                notes.append(f"left out: {rel} (not a file, directory or link)")
                return None
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            return info
        return keep

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            tar.add(root, arcname=run.id, recursive=False)
            if run.external_workspace is None:
                for part in PARTS:
                    if (root / part).is_dir():
                        add_tree(tar, root / part, f"{run.id}/{part}", keep_under(root / part, f"{run.id}/{part}"),
                                 notes)
            else:
                _add_in_place_run(tar, run, keep_under, notes)
            if machine is not None:
                add_machine(tar, run.id, machine)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return notes


def add_machine(tar: tarfile.TarFile, run_id: str, machine: Path) -> None:
    """The run's machine (a `docker save` tar) as `<id>/state/machine.tar`: the host side of the run, which
    the sandbox never sees; the run's next session loads it (runner.carried_machine)."""
    info = tar.gettarinfo(machine, arcname=f"{run_id}/state/{MACHINE_MEMBER}")
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o600
    with open(machine, "rb") as f:
        tar.addfile(info, f)


def _add_in_place_run(tar: tarfile.TarFile, run: RunDir, keep_under, notes: list[str]) -> None:  # noqa: ANN001
    """A run made with `--workspace DIR` is exported as an ordinary run: DIR becomes its workspace/, and
    run.json forgets DIR, so the imported run works on its own copy."""
    arc_ws, arc_cairn, arc_state = f"{run.id}/workspace", f"{run.id}/cairn", f"{run.id}/state"
    keep_st = keep_under(run.state, arc_state)

    def keep_state(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if info.name == f"{arc_state}/run.json" else keep_st(info)

    add_tree(tar, run.workspace, arc_ws, keep_under(run.workspace, arc_ws), notes)
    if run.cairn_dir.is_dir():
        add_tree(tar, run.cairn_dir, arc_cairn, keep_under(run.cairn_dir, arc_cairn), notes)
    add_tree(tar, run.state, arc_state, keep_state, notes)
    meta = run.read_meta()
    meta.pop("workspace", None)
    data = json.dumps(meta, indent=2, sort_keys=True).encode()
    info = tarfile.TarInfo(f"{arc_state}/run.json")
    info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


# -- import -----------------------------------------------------------------------------------------

def import_run(archive: Path, runs_dir: Path, max_bytes: int | None = None, max_files: int = MAX_FILES) -> RunDir:
    """Checks and extracts an exported run into `runs_dir`; refuses an unsafe archive, one past the
    size limits, or a taken id. The run is marked imported and untrusted. `max_bytes`: the user's bound on
    what it unpacks to; without it, MAX_BYTES and the bound on the expansion ratio (MAX_RATIO)."""
    archive = Path(archive)
    ratio = max_bytes is None
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    try:
        tar = tarfile.open(archive, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise UsageError(f"cannot read {archive} as a run archive ({exc})") from exc
    with tar:
        members = _read_members(tar, archive, max_bytes, max_files, ratio)
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
            try:  # checked above; the disk use is watched while writing
                tar.extractall(staging, members=_on_disk_within(members, staging, archive, max_bytes),
                               numeric_owner=True, **trusted)
            except (tarfile.TarError, EOFError, zlib.error) as exc:
                raise UsageError(f"{archive} is a broken archive ({exc})") from exc
            extracted = staging / run_id
            _adopt(RunDir(extracted), archive)
            try:
                os.rename(extracted, target)  # fails if the id was taken meanwhile
            except OSError as exc:
                raise UsageError(f"run {run_id} already exists in {runs_dir}; not imported") from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return RunDir(target)


def _read_members(tar: tarfile.TarFile, archive: Path, max_bytes: int, max_files: int,
                  ratio: bool = True) -> list[tarfile.TarInfo]:
    """The members, read header by header and refused as soon as they pass a limit (before any write)."""
    members: list[tarfile.TarInfo] = []
    total = data = 0
    packed = max(archive.stat().st_size, 1)
    try:
        for m in tar:
            members.append(m)
            if len(members) > max_files:
                raise UsageError(f"refusing {archive}: it holds more than {max_files:,} files",
                                 hint="if you expect that many, raise the limit: cairn import --max-files N")
            if m.isreg():  # a sparse member's size is its real size: what it becomes on disk, at most
                total += m.size
                if m.sparse is not None and any(o < 0 or n < 0 or o + n > m.size for o, n in m.sparse):
                    raise UsageError(f"refusing {archive}: member {m.name!r} has a sparse map past its size")
                data += m.size if m.sparse is None else sum(n for _o, n in m.sparse)
            if ratio and data > RATIO_FLOOR and data > MAX_RATIO * packed:
                raise UsageError(f"refusing {archive}: it unpacks to more than {MAX_RATIO} times its size "
                                 f"({format_size(data)} from {format_size(packed)} by {m.name!r}), as a "
                                 "decompression bomb does", hint="if you expect that, say how much it may "
                                 "unpack to: cairn import --max-size SIZE")
            if total > max_bytes:
                raise UsageError(f"refusing {archive}: it unpacks to more than {format_size(max_bytes)} "
                                 f"(at {m.name!r})", hint="if you expect that much, raise the limit: "
                                 "cairn import --max-size SIZE")
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise UsageError(f"{archive} is a broken archive ({exc})") from exc
    return members


def _on_disk_within(members: list[tarfile.TarInfo], staging: Path, archive: Path,
                    max_bytes: int) -> Iterator[tarfile.TarInfo]:
    """The members, one at a time, stopping the extraction once the files written pass `max_bytes`."""
    used = 0
    previous: tarfile.TarInfo | None = None
    for m in [*members, None]:
        if previous is not None:
            st = os.lstat(staging / previous.name)
            used += max(st.st_blocks * 512, 0)
            if used > max_bytes:
                raise UsageError(f"refusing {archive}: it took more than {format_size(max_bytes)} of disk "
                                 f"(at {previous.name!r})", hint="cairn import --max-size SIZE raises the limit")
        if m is None:
            return
        previous = m if m.isreg() else None
        yield m


def _adopt(run: RunDir, archive: Path) -> None:
    """Makes an extracted run one of ours: an untrusted, imported run whose git dir is cairn's."""
    if not run.meta_path.is_file() or not run.events.path.is_file():
        raise UsageError(f"{archive} holds no run: {run.id}/state/run.json or events.jsonl is missing")
    try:
        meta = json.loads(run.meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{archive} holds no readable run: {run.id}/state/run.json is not JSON ({exc})") from exc
    why = run_meta.problem(meta)
    if why:
        raise UsageError(f"{archive} holds an unreadable run: {why.replace('state/', f'{run.id}/state/', 1)}")
    for number, line in enumerate(run.events.path.read_bytes().split(b"\n")[:-1], 1):  # a torn last line is set aside on resume
        try:
            if line.strip():
                parse_event(line)
        except ValueError as exc:  # pydantic's ValidationError
            raise UsageError(f"{archive} holds an unreadable run: line {number} of its event log is not an event "
                             f"({str(exc).splitlines()[-1].strip()[:80]})") from None
    # Whatever the archive said about trust, an import is a run from someone else. A machine it carries
    # (export --with-machine) is an image from someone else: loaded only once the run is trusted; and an
    # image tag it names means nothing here (it could name an image of this machine).
    meta.pop("machine", None)
    meta["imported"] = {"archive": archive.name, "at": time.time(), "trusted": False,
                        "machine": (run.state / MACHINE_MEMBER).is_file()}
    run.write_meta(meta)
    (run.state / "pid").unlink(missing_ok=True)
    (run.root / "workspace").mkdir(exist_ok=True)
    git_dir = run.state / "checkpoints.git"
    if git_dir.is_dir():
        own_git_dir(git_dir)
        (git_dir / "index").unlink(missing_ok=True)  # stat data of another machine; rebuilt from the branch
        (git_dir / "HEAD").write_text("ref: refs/heads/checkpoints\n")
        (git_dir / "cairn-exclude").write_text("".join(f"{name}/\n" for name in SKIPPED_DIRS))


def check_members(members: list[tarfile.TarInfo], archive: Path | str = "the archive") -> str:
    """The run id the archive holds; raises UsageError naming the first member that is not safe."""
    if not members:
        raise UsageError(f"{archive} is empty")
    run_id = members[0].name.strip("/").split("/")[0]
    if not RUN_ID.match(run_id):
        raise UsageError(f"{archive}: {run_id!r} is not a run id")
    seen: dict[str, tarfile.TarInfo] = {}
    links: dict[str, str] = {}  # symlink members (path -> target): nothing may be extracted through them
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
            raise refuse("is not under workspace/, cairn/ or state/")
        path = "/".join(parts)
        if path in seen:
            raise refuse("appears twice")
        if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
            raise refuse("lies under a symlink")
        if m.isdev() or m.isfifo() or not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
            raise refuse("is a device, fifo or other special file")
        if len(parts) < 3 and not m.isdir():
            raise refuse("should be a directory")
        if (m.issym() or m.islnk()) and parts[1] == "state":
            raise refuse("is a link in state/, which holds none")
        if m.issym():
            if not _link_inside(path, m.linkname, run_id):
                raise refuse(f"is a symlink leading outside the run ({m.linkname})")
            links[path] = m.linkname
        if m.islnk():
            target = m.linkname.rstrip("/")
            if target not in seen or target in links or not seen[target].isreg() or target.split("/")[:2] != parts[:2]:
                raise refuse(f"is a hard link to something that is not a file of the run's {parts[1]}/ ({m.linkname})")
        seen[path] = m
    for path in links:  # a chain of links, each inside on its own, may still lead out
        if _resolve(path, links, run_id) is None:
            name = path
            raise UsageError(f"refusing {archive}: member {name!r} is a symlink leading outside the run "
                             f"through other links ({links[path]})")
    return run_id


def _link_inside(name: str, linkname: str, run_id: str) -> bool:
    """Whether a symlink at `name` (archive path) pointing to `linkname` stays inside `<run_id>/`,
    read as a string (the first test; `_resolve` follows the other links too)."""
    if not linkname or linkname.startswith("/") or "\\" in linkname:
        return False
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), linkname))
    return resolved == run_id or resolved.startswith(run_id + "/")


def _resolve(link: str, links: dict[str, str], run_id: str) -> list[str] | None:
    """Where the symlink at archive path `link` ends, followed as the kernel would through every other
    symlink of the archive (a `..` after a link goes up from the link's target, not from the link);
    None when it leaves `<run_id>/` or loops. A part that names nothing is taken as a directory."""
    hops = 0

    def walk(start: list[str], target: str) -> list[str] | None:
        nonlocal hops
        if target.startswith("/"):
            return None
        current = list(start)
        for part in target.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if len(current) <= 1:  # at <run_id>: up would leave the run
                    return None
                current.pop()
                continue
            current.append(part)
            key = "/".join(current)
            if key in links:
                hops += 1
                if hops > _MAX_LINK_HOPS:
                    return None
                current = walk(current[:-1], links[key])
                if current is None:
                    return None
        return current

    parts = link.split("/")
    return walk(parts[:-1], links[link])

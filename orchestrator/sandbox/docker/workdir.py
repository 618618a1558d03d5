"""Another work directory than /workspace (`cairn run --image IMG --workdir /app`): the image's content
at that path becomes the run's workspace.

At run creation the path is copied out of the image, the way `docker cp` would: a container is created
(never started), the engine streams the path as a tar, and the tar is unpacked into the run's
`workspace/` with modes, symlinks, hard links and times kept; owners are kept when cairn runs as root
(as another user the files become that user's: only root can give files away). The container is removed
again. The workspace is then mounted back at the same path, so the agent finds the project where the
image has it, and checkpoints, `files`, `diff`, `report`, export and resume see it as any workspace.

The tar comes from an image, so it is not trusted: a member that would land outside the workspace
(`..`, an absolute name, a path through a symlink unpacked earlier, a hard link to something outside) is
refused, and the copy fails naming it. Symlinks are kept as they are, whatever they point to: they are
followed inside the container, never by this unpacking. Device files are not copied (they mean
nothing in a project, and only root could make them).
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from orchestrator.errors import SandboxError

MAX_LINK_HOPS = 8


@dataclass(frozen=True)
class CopyOut:
    """What a copy-out found: `found` is False when the path is not in the image (the workspace starts
    empty); `files` counts the entries unpacked, `skipped` the device files left out."""

    found: bool
    files: int = 0
    skipped: int = 0


def copy_out(client: docker.DockerClient, image: str, path: str, dest: Path, name: str) -> CopyOut:
    """Unpack the directory `path` of `image` into the existing, empty directory `dest`.

    `name`: the temporary container's name (it is labelled as cairn's, so `cairn gc` removes it should
    this process die before it does). Raises SandboxError for an engine that refuses, an image that is
    not there, a path that is a file, or a member that would escape `dest`."""
    try:
        client.api.inspect_image(image)
    except docker.errors.ImageNotFound:
        raise SandboxError(f"the image {image} is not in the Docker engine",
                           hint="build or load it first; cairn never pulls an image") from None
    except docker.errors.DockerException as exc:
        raise SandboxError(f"cannot read the image {image}: {exc}") from exc
    try:
        container = client.api.create_container(image, entrypoint=["true"], command=[], name=name,
                                                labels={"cairn.managed": "1", "cairn.run": name},
                                                network_disabled=True)
    except docker.errors.DockerException as exc:
        raise SandboxError(f"cannot create a container of {image} to copy {path} out: {exc}") from exc
    try:
        return _copy(client, container["Id"], image, path, dest)
    finally:
        try:
            client.api.remove_container(container["Id"], force=True)
        except docker.errors.DockerException:
            pass  # `cairn gc` removes it: it is labelled as cairn's


def _copy(client: docker.DockerClient, container: str, image: str, path: str, dest: Path) -> CopyOut:
    for _ in range(MAX_LINK_HOPS):
        try:
            info = client.api.get_archive(container, path)[1]
        except docker.errors.NotFound:
            return CopyOut(found=False)
        except docker.errors.DockerException as exc:
            raise SandboxError(f"cannot copy {path} out of {image}: {exc}") from exc
        mode = _go_mode(info.get("mode", 0))
        if stat.S_ISLNK(mode):  # /app -> /srv/app: the mount lands on the link's target, so copy that
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), info.get("linkTarget", "")))
            continue
        if not stat.S_ISDIR(mode):
            raise SandboxError(f"{path} is a file in the image {image}, not a directory; --workdir names a "
                               "directory")
        stream, _ = client.api.get_archive(container, path)
        with tarfile.open(fileobj=_Chunks(stream), mode="r|") as tar:
            return _Unpacker(tar, dest, path).unpack()
    raise SandboxError(f"{path} in the image {image} is a chain of more than {MAX_LINK_HOPS} symlinks")


def _go_mode(mode: int) -> int:
    """The engine reports a Go os.FileMode; turn its type bits into stat's."""
    perm = mode & 0o7777
    if mode & (1 << 31):
        return stat.S_IFDIR | perm
    if mode & (1 << 27):
        return stat.S_IFLNK | perm
    return stat.S_IFREG | perm


class _Chunks:
    """A file-like reader over the engine's chunked stream, for tarfile's stream mode."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.buffer = iter(chunks), b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.buffer) < size:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.buffer += chunk
        if size < 0:
            size = len(self.buffer)
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out


class _Unpacker:
    def __init__(self, tar: tarfile.TarFile, dest: Path, path: str) -> None:
        self.tar, self.dest, self.path = tar, Path(dest).resolve(), path
        self.root = os.getuid() == 0
        self.directories: list[tuple[str, tarfile.TarInfo]] = []
        self.files = self.skipped = 0

    def unpack(self) -> CopyOut:
        prefix = None
        for member in self.tar:
            parts = [p for p in member.name.split("/") if p not in ("", ".")]
            if prefix is None and parts:
                prefix = parts[0]  # the engine names members after the directory's own name
            if not parts or parts[0] != prefix:
                raise self._refused(member.name, "it is not under the copied directory")
            rel = parts[1:]
            if not rel:
                self.directories.append((".", member))
                continue
            if ".." in rel:
                raise self._refused(member.name, "it climbs out with ..")
            if member.ischr() or member.isblk():
                self.skipped += 1
                continue
            target = "/".join(rel)
            self._check_parents(rel, member.name)
            self._clear(self.dest / target, member)
            if member.islnk():
                member = member.replace(linkname=self._link_target(member), deep=False)
            if member.isdir():
                self.directories.append((target, member))
                member = member.replace(mode=member.mode | 0o700, deep=False)  # its content comes next
            self.tar.extract(member.replace(name=target, deep=False), self.dest, set_attrs=True,
                             numeric_owner=True, filter="fully_trusted")
            self.files += 1
        for target, member in reversed(self.directories):  # deepest first: a read-only one is made last
            self._set_attrs(self.dest / target if target != "." else self.dest, member)
        return CopyOut(found=True, files=self.files, skipped=self.skipped)

    def _check_parents(self, rel: list[str], name: str) -> None:
        """Every directory on the way must be a real directory inside dest: never a symlink (unpacking
        through one would write wherever it points, on the host)."""
        current = self.dest
        for part in rel[:-1]:
            current = current / part
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                return  # tarfile makes the missing ones as plain directories
            if not stat.S_ISDIR(st.st_mode):
                raise self._refused(name, f"{current.relative_to(self.dest)} on its way is not a directory")

    def _clear(self, path: Path, member: tarfile.TarInfo) -> None:
        """A name given twice: the later member wins, as with tar. What is there is removed first, so a
        file is never written through a symlink of the same name."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            if not member.isdir():
                raise self._refused(member.name, "a directory of that name came first")
            return
        os.unlink(path)

    def _link_target(self, member: tarfile.TarInfo) -> str:
        """A hard link's target, made relative to dest: an earlier regular member, never a path outside."""
        parts = [p for p in member.linkname.split("/") if p not in ("", ".")]
        if len(parts) < 2 or ".." in parts:
            raise self._refused(member.name, f"it is a hard link to {member.linkname}, outside the directory")
        target = "/".join(parts[1:])
        self._check_parents(parts[1:], member.name)
        if not stat.S_ISREG(os.lstat(self.dest / target).st_mode):
            raise self._refused(member.name, f"it is a hard link to {member.linkname}, which is not a file")
        return target

    def _set_attrs(self, path: Path, member: tarfile.TarInfo) -> None:
        if self.root:
            os.lchown(path, member.uid, member.gid)
        os.chmod(path, member.mode & 0o7777)
        os.utime(path, (member.mtime, member.mtime))

    def _refused(self, name: str, why: str) -> SandboxError:
        return SandboxError(f"copying {self.path} out of the image refused the member {name!r}: {why}")

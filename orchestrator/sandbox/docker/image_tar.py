"""A `docker save` tar, read and rewritten member by member without unpacking it: how cairn takes the
values it passed into a container out of a machine it saves, and the image names out of a machine it
loads (sandbox/docker/machine.py).

A saved image is a plain tar: `manifest.json` (which config file and layers make each image, and the
`RepoTags` that `docker load` applies), the image's config `<sha256>.json`, a directory per layer with its
`layer.tar` and a `json` (the older format's copy of the config), `repositories` (the older format's
names) and, from Docker 25, an OCI `index.json` whose annotations name images too. The layers are most
of the bytes; they are copied as they are, and only the small JSON members are rewritten.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BLOCK = tarfile.BLOCKSIZE
CHUNK = 1 << 20
SMALL = 16 * 2**20  # a JSON member bigger than this is not one `docker save` writes


class BadImageTar(ValueError):
    """The tar is not a saved image cairn can take apart."""


def json_members(path: Path) -> dict[str, Any]:
    """The JSON members of the tar (manifest, configs, layer `json`s, index), parsed, by name."""
    found: dict[str, Any] = {}
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                if member.isreg() and _is_json(member.name):
                    if member.size > SMALL:
                        raise BadImageTar(f"its {member.name} is {member.size} bytes, too big for image metadata")
                    data = tar.extractfile(member).read()
                    try:
                        found[member.name] = json.loads(data)
                    except ValueError as exc:
                        raise BadImageTar(f"its {member.name} is not JSON ({exc})") from None
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise BadImageTar(f"it is not a tar ({exc})") from None
    return found


def small_members(path: Path, skip: set[str] = frozenset()) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each regular member not in `skip` (the layers) and no bigger than SMALL; a
    bigger one is refused: a saved image's metadata is small."""
    with tarfile.open(path, "r:") as tar:
        for member in tar:
            if member.isreg() and member.name not in skip:
                if member.size > SMALL:
                    raise BadImageTar(f"its {member.name} is {member.size} bytes, and not a layer")
                yield member.name, tar.extractfile(member).read()


def _is_json(name: str) -> bool:
    return name.endswith(".json") or name.endswith("/json") or name in ("repositories",)


def encode(doc: Any) -> bytes:
    """JSON as Docker writes it: compact."""
    return json.dumps(doc, separators=(",", ":")).encode()


def config_name(data: bytes) -> str:
    """The name a config of these bytes has in a saved image: its digest."""
    return hashlib.sha256(data).hexdigest() + ".json"


def stream(path: Path, replace: dict[str, tuple[str, bytes] | None]) -> Iterator[bytes]:
    """The tar at `path`, as bytes, with each member named in `replace` dropped (None) or put in its
    place as (new name, data); every other member is copied byte for byte (its headers included)."""
    with tarfile.open(path, "r:") as tar, open(path, "rb") as raw:
        for member in tar:
            if member.sparse is not None:
                raise BadImageTar(f"its {member.name} is a sparse member, which `docker save` never writes")
            if member.name in replace:
                new = replace[member.name]
                if new is not None:
                    name, data = new
                    info = tarfile.TarInfo(name)
                    info.size, info.mode, info.mtime, info.type = len(data), member.mode, member.mtime, tarfile.REGTYPE
                    yield info.tobuf(format=tarfile.PAX_FORMAT) + data + b"\0" * (-len(data) % BLOCK)
                continue
            end = member.offset_data + (member.size + BLOCK - 1) // BLOCK * BLOCK if member.isreg() else member.offset_data
            raw.seek(member.offset)
            left = end - member.offset
            while left:
                chunk = raw.read(min(CHUNK, left))
                if not chunk:
                    raise BadImageTar(f"it ends inside {member.name}")
                yield chunk
                left -= len(chunk)
    yield b"\0" * (2 * BLOCK)


def write(path: Path, out: Path, replace: dict[str, tuple[str, bytes] | None]) -> None:
    with open(out, "wb") as f:
        for chunk in stream(path, replace):
            f.write(chunk)


def walk_env(doc: Any, change: Callable[[list[str]], list[str]]) -> Any:
    """`doc` with every `Env` list in it (an image's config, its container_config, anywhere) changed."""
    if isinstance(doc, dict):
        return {key: change(value) if key == "Env" and isinstance(value, list) else walk_env(value, change)
                for key, value in doc.items()}
    if isinstance(doc, list):
        return [walk_env(value, change) for value in doc]
    return doc

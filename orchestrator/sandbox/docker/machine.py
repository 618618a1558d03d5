"""A run's machine carried between hosts: `cairn export --with-machine` and its `cairn import`.

The kept container is committed to an image (`docker commit`) and that image is saved (`docker save`) into
the archive as `<run>/state/machine.tar`. The committed image holds every layer, those of the image the
container was made from included, so the other host needs neither that image nor a registry; its
`docker load` skips the layers it has already. The import leaves the tar in the run's state; the first
session of a trusted run loads it (`load`), records the image's id in run.json (`machine`), deletes the
tar, and makes the run's container from that image with the run's own settings and mounts. The original
image is not touched on either host.

What leaves: the committed image keeps the container's configuration, and Docker (20.10) records it
twice more, as `container_config` in the image's config and in each layer's `json` of the saved tar.
Every variable cairn set when it made the container (`sandbox.env`, and the host variables of
`pass_env`, which may be secrets) is blanked in all of them (image_tar.py rewrites the saved tar), and
the tar's metadata is then searched for each value: an export that still holds one is refused. Each
session sets them again anyway. What the agent itself wrote into the container's files (a key echoed
into a dotfile) is in its layers, and travels: see docs/hostile.md.

What comes in: a saved image names itself (`RepoTags` in its manifest, `repositories`, an OCI index's
annotations), and a plain `docker load` applies those names, moving any tag of this engine, such as
the `cairn-sandbox:<hash>` every later run starts from. `load` strips them all before the engine sees the
tar, loads the image by content, and tags only `cairn-machine:<run id>`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from orchestrator.errors import SandboxError, UsageError
from orchestrator.sandbox.docker import container as containers
from orchestrator.sandbox.docker import image_tar
MACHINE_FILE = "machine.tar"
REPOSITORY = "cairn-machine"


def machine_tag(run_id: str) -> str:
    return f"{REPOSITORY}:{run_id.lower()}"


def save(client: docker.DockerClient, run_id: str, out: Path, run_dir: Path | None = None) -> str:
    """Write the run's kept container, as an image, to `out` (a `docker save` tar) with no value cairn
    passed into it; return the image's tag."""
    kept = containers.find(client, run_id, run_dir)
    if kept is None:
        raise UsageError(f"run {run_id} holds no container (cairn ls shows which runs do); export it "
                         "without --with-machine")
    image_env = client.api.inspect_image(kept.attrs["Image"])["Config"].get("Env") or []
    passed = [entry for entry in kept.attrs["Config"].get("Env") or [] if entry not in image_env]
    blank = _blanker(image_env, passed)
    tag = machine_tag(run_id)
    raw = out.with_name(out.name + ".saved")
    try:
        client.api.commit(kept.id, repository=REPOSITORY, tag=run_id.lower(), conf={"Env": blank(image_env)},
                          message=f"cairn run {run_id}", pause=False)
        try:
            with open(raw, "wb") as f:
                for chunk in client.api.get_image(tag):
                    f.write(chunk)
        finally:
            client.api.remove_image(tag)  # the archive holds it; the container is still kept here
        _write_without(raw, out, blank, passed)
    except containers.ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot save the machine of run {run_id}: {containers._explain(exc)}") from exc
    except image_tar.BadImageTar as exc:
        raise SandboxError(f"cannot save the machine of run {run_id}: the engine's image tar: {exc}") from exc
    finally:
        raw.unlink(missing_ok=True)
    return tag


def _blanker(image_env: list[str], passed: list[str]) -> Callable[[list[str]], list[str]]:
    """What makes an `Env` list safe to carry: each variable cairn passed in gets the image's own value
    back where the image has one, else is blanked (`KEY=`)."""
    own = {entry.split("=", 1)[0]: entry for entry in image_env}
    keys = {entry.split("=", 1)[0] for entry in passed}

    def blank(env: list[str]) -> list[str]:
        out = []
        for entry in env:
            key = entry.split("=", 1)[0] if isinstance(entry, str) else None
            out.append(entry if key not in keys else own.get(key, f"{key}="))
        return out
    return blank


def _write_without(raw: Path, out: Path, blank: Callable[[list[str]], list[str]], passed: list[str]) -> None:
    """`out`: the saved tar `raw` with every Env in its metadata blanked (the config renamed for its new
    digest, the manifest following), then checked for each passed value."""
    docs = image_tar.json_members(raw)
    manifest = docs.get("manifest.json")
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        raise image_tar.BadImageTar("its manifest.json does not name exactly one image")
    entry = manifest[0]
    replace: dict[str, tuple[str, bytes] | None] = {"repositories": None}
    for name, doc in docs.items():
        if name in ("manifest.json", "repositories"):
            continue
        clean = image_tar.walk_env(doc, blank)
        if name == entry.get("Config"):
            data = image_tar.encode(clean)
            entry["Config"] = image_tar.config_name(data)
            replace[name] = (entry["Config"], data)
        elif clean != doc:
            replace[name] = (name, image_tar.encode(clean))
    replace["manifest.json"] = ("manifest.json", image_tar.encode(manifest))
    image_tar.write(raw, out, replace)
    layers = set(entry.get("Layers") or [])
    for name, data in image_tar.small_members(out, skip=layers):
        for variable in passed:
            if _needle(variable) and _needle(variable) in data:
                out.unlink()
                raise image_tar.BadImageTar(f"the value of {variable.split('=', 1)[0]}, passed into the container, "
                                            f"is still in its {name}; nothing was exported")


def _needle(entry: str) -> bytes:
    """What shows a passed `KEY=value` in the tar's metadata, as JSON writes it; empty for a blank value."""
    return json.dumps(entry)[1:-1].encode() if "=" in entry and entry.split("=", 1)[1] else b""


def load(client: docker.DockerClient, tar: Path, run_id: str) -> str:
    """`docker load` a machine saved by `save`, by content: no name the tar claims is applied; the image
    is tagged `cairn-machine:<run id>` only. Returns the image's id."""
    try:
        docs = image_tar.json_members(tar)
        manifest = docs.get("manifest.json")
        if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
            raise image_tar.BadImageTar("its manifest.json does not name exactly one image")
        manifest[0]["RepoTags"] = None
        replace: dict[str, tuple[str, bytes] | None] = {"manifest.json": ("manifest.json", image_tar.encode(manifest)),
                                                         "repositories": None}
        if "index.json" in docs:
            replace["index.json"] = ("index.json", image_tar.encode(_unnamed(docs["index.json"])))
        loaded = None
        for line in client.api.load_image(image_tar.stream(tar, replace)):
            text = (line.get("stream") or "") if isinstance(line, dict) else ""
            error = (line.get("error") or "") if isinstance(line, dict) else ""
            if error:
                raise SandboxError(f"cannot load the machine in {tar}: {error.strip()[:300]}")
            if text.startswith("Loaded image ID: "):
                loaded = text[len("Loaded image ID: "):].strip()
            elif text.startswith("Loaded image: "):  # a name got through: never expected, never accepted
                raise SandboxError(f"loading the machine in {tar} applied the name {text[14:].strip()!r}")
        if loaded is None:
            raise SandboxError(f"{tar} holds no image cairn saved")
        client.api.tag(loaded, REPOSITORY, run_id.lower(), force=True)
    except image_tar.BadImageTar as exc:
        raise SandboxError(f"{tar} is not a machine cairn saved: {exc}") from exc
    except containers.ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot load the machine in {tar}: {containers._explain(exc)}") from exc
    return loaded


def _unnamed(index: Any) -> Any:
    """An OCI index without the annotations that name its images (a containerd store applies them)."""
    names = ("io.containerd.image.name", "org.opencontainers.image.ref.name")
    if isinstance(index, dict) and isinstance(index.get("manifests"), list):
        for descriptor in index["manifests"]:
            if isinstance(descriptor, dict) and isinstance(descriptor.get("annotations"), dict):
                for name in names:
                    descriptor["annotations"].pop(name, None)
    return index


def present(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.api.inspect_image(tag)
    except docker.errors.ImageNotFound:
        return False
    return True

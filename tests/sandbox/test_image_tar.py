"""The saved-image tar surgery behind `export --with-machine` and its import (orchestrator/sandbox/
image_tar.py, machine.py), on crafted tars shaped as `docker save` writes them: no engine needed here;
tests/sandbox/test_kept_machines.py runs the same through a real engine."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from orchestrator.sandbox.docker import image_tar, machine
SECRET = "API_TOKEN=tok-9f8e7d"


def saved_image(path: Path, extra_config: dict | None = None) -> Path:
    """A tar shaped like Docker 20.10's `docker save`: manifest, config, one layer with its `json`."""
    config = {"config": {"Env": ["PATH=/usr/bin", SECRET]}, "container_config": {"Env": ["PATH=/usr/bin", SECRET]},
              "rootfs": {"type": "layers", "diff_ids": []}, **(extra_config or {})}
    members = {
        "abc.json": json.dumps(config).encode(),
        "layer1/VERSION": b"1.0",
        "layer1/json": json.dumps({"id": "layer1", "container_config": {"Env": [SECRET]}}).encode(),
        "layer1/layer.tar": b"\0" * 2048,
        "manifest.json": json.dumps([{"Config": "abc.json", "RepoTags": ["cairn-sandbox:victim"],
                                      "Layers": ["layer1/layer.tar"]}]).encode(),
        "repositories": json.dumps({"cairn-sandbox": {"victim": "layer1"}}).encode(),
    }
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def contents(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}


def test_a_saved_machine_keeps_no_passed_value_and_its_layers_byte_for_byte(tmp_path):
    raw = saved_image(tmp_path / "raw.tar")
    out = tmp_path / "out.tar"
    machine._write_without(raw, out, machine._blanker(["PATH=/usr/bin"], [SECRET]), [SECRET])
    written = contents(out)
    assert not any(b"tok-9f8e7d" in data for data in written.values())
    assert "repositories" not in written and written["layer1/layer.tar"] == b"\0" * 2048
    [entry] = json.loads(written["manifest.json"])
    assert entry["Config"] in written and entry["Config"] == image_tar.config_name(written[entry["Config"]])
    assert json.loads(written[entry["Config"]])["container_config"]["Env"] == ["PATH=/usr/bin", "API_TOKEN="]


def test_a_value_left_anywhere_in_the_metadata_refuses_the_export(tmp_path):
    raw = saved_image(tmp_path / "raw.tar", {"history": [{"created_by": f"echo {SECRET}"}]})
    out = tmp_path / "out.tar"
    with pytest.raises(image_tar.BadImageTar, match="the value of API_TOKEN, passed into the container, is still in"):
        machine._write_without(raw, out, machine._blanker([], [SECRET]), [SECRET])
    assert not out.exists()


def test_what_a_machine_is_loaded_from_names_no_image(tmp_path):
    raw = saved_image(tmp_path / "raw.tar")
    loaded = tmp_path / "loaded.tar"
    manifest = json.loads(contents(raw)["manifest.json"])
    manifest[0]["RepoTags"] = None
    image_tar.write(raw, loaded, {"manifest.json": ("manifest.json", image_tar.encode(manifest)), "repositories": None})
    written = contents(loaded)
    assert json.loads(written["manifest.json"])[0]["RepoTags"] is None and "repositories" not in written
    assert written["layer1/layer.tar"] == contents(raw)["layer1/layer.tar"]
    index = {"manifests": [{"digest": "sha256:1", "annotations": {"io.containerd.image.name": "cairn-sandbox:victim",
                                                                  "org.opencontainers.image.ref.name": "victim",
                                                                  "other": "kept"}}]}
    assert machine._unnamed(index)["manifests"][0]["annotations"] == {"other": "kept"}

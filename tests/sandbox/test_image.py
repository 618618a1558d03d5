"""The sandbox image: its tag follows its inputs, host CA certificates go into it, and a real build works."""

from __future__ import annotations

import json
import shutil
import ssl
from pathlib import Path

import pytest

from orchestrator.sandbox.docker import image
from orchestrator.sandbox import toolbox_files
from orchestrator.sandbox.docker.image import image_tag

HOST_CA_DIR = Path("/usr/local/share/ca-certificates")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A copy of sandbox_image/ that a test may change."""
    copy = tmp_path / "sandbox_image"
    shutil.copytree(toolbox_files.folder(), copy)
    return copy


@pytest.fixture
def no_ca(tmp_path: Path) -> Path:
    path = tmp_path / "no-ca"
    path.mkdir()
    return path


def test_same_files_give_the_same_tag(source: Path, no_ca: Path) -> None:
    tag = image_tag(source, no_ca)
    assert tag.startswith("cairn-sandbox:") and len(tag.split(":")[1]) == 12
    assert image_tag(source, no_ca) == tag
    # The content counts, not where the files are or when they were touched.
    assert image_tag(toolbox_files.folder(), no_ca) == tag
    (source / "Dockerfile").touch()
    assert image_tag(source, no_ca) == tag


def test_bytecode_beside_the_sources_does_not_change_the_tag(source: Path, no_ca: Path) -> None:
    tag = image_tag(source, no_ca)
    (source / "__pycache__").mkdir(exist_ok=True)
    (source / "__pycache__" / "toolbox.cpython-311.pyc").write_bytes(b"\0" * 16)
    assert image_tag(source, no_ca) == tag


def test_a_changed_or_added_file_gives_a_new_tag(source: Path, no_ca: Path) -> None:
    tag = image_tag(source, no_ca)
    dockerfile = source / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "\n# a change\n")
    changed = image_tag(source, no_ca)
    assert changed != tag
    (source / "extra.txt").write_text("x")
    assert image_tag(source, no_ca) not in {tag, changed}


def test_host_ca_certificates_are_carried_into_the_build_context(source: Path, tmp_path: Path) -> None:
    ca_dir = tmp_path / "ca"
    (ca_dir / "corp").mkdir(parents=True)
    (ca_dir / "proxy.crt").write_text("-----BEGIN CERTIFICATE-----\nproxy\n-----END CERTIFICATE-----\n")
    (ca_dir / "corp" / "root.crt").write_text("-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n")
    (ca_dir / "README").write_text("not a certificate")
    empty = tmp_path / "empty"
    empty.mkdir()

    files = image._context_files(source, ca_dir)
    context = tmp_path / "context"
    image._write_context(files, context)

    assert (context / "Dockerfile").read_text() == (source / "Dockerfile").read_text()
    assert (context / "extra-ca" / "proxy.crt").read_text() == (ca_dir / "proxy.crt").read_text()
    assert (context / "extra-ca" / "corp" / "root.crt").is_file()
    assert not (context / "extra-ca" / "README").exists()
    # The Dockerfile's COPY of extra-ca/ needs the directory even when the host has no certificates.
    assert (source / "extra-ca" / ".keep").is_file()
    # A new proxy certificate is a new image.
    assert image_tag(source, ca_dir) != image_tag(source, empty)


@pytest.mark.docker
def test_the_built_image_runs_python_as_uid_1000_and_trusts_the_host_ca(sandbox_image: str) -> None:
    import docker

    client = docker.from_env()
    assert sandbox_image == image_tag()
    labels = client.images.get(sandbox_image).labels
    assert sandbox_image.endswith(labels["org.cairn.build-hash"][:12])

    # Run as cairn's runtime does: read-only root, tmpfs /tmp and home. The check prints what the
    # trust store of Python's ssl holds, as DER in hex, and where pip takes its certificates from.
    probe = (
        "import json, os, ssl, subprocess; "
        "print(json.dumps({"
        "'uid': os.getuid(), 'one': subprocess.run(['python3', '-c', 'print(1)'], capture_output=True,"
        " text=True).stdout.strip(), 'toolbox': os.path.isfile('/opt/cairn/toolbox/server.py'),"
        " 'pid1': open('/proc/1/comm').read().strip(), 'pip_cert': os.environ.get('PIP_CERT'),"
        " 'cas': [c.hex() for c in ssl.create_default_context().get_ca_certs(binary_form=True)]}))"
    )
    output = client.containers.run(
        sandbox_image,
        ["python3", "-c", probe],
        remove=True,
        read_only=True,
        network_mode="none",
        tmpfs={"/tmp": "", "/home/cairn": "uid=1000,gid=1000"},
    )
    seen = json.loads(output)
    assert seen["uid"] == 1000
    assert seen["one"] == "1"
    assert seen["toolbox"] is True
    assert seen["pid1"] == "tini"
    assert seen["pip_cert"] == "/etc/ssl/certs/ca-certificates.crt"
    for der in _host_ca_certificates():
        assert der.hex() in seen["cas"]


def _host_ca_certificates() -> list[bytes]:
    """Every certificate in the host's extra CA files, as DER (a file may hold several)."""
    found = []
    for path in sorted(HOST_CA_DIR.rglob("*.crt")):
        pem = path.read_text(errors="replace")
        for block in pem.split("-----END CERTIFICATE-----")[:-1]:
            found.append(ssl.PEM_cert_to_DER_cert(block[block.index("-----BEGIN") :] + "-----END CERTIFICATE-----\n"))
    return found


@pytest.mark.docker
def test_a_build_says_on_stderr_when_it_starts_and_ends_with_its_time(tmp_path: Path, no_ca: Path,
                                                                       sandbox_image: str, capsys) -> None:
    small = tmp_path / "small"
    small.mkdir()
    (small / "Dockerfile").write_text(f"ARG BASE\nFROM ${{BASE}}\nRUN echo {tmp_path.name}\n")
    tag = image.build_image(source=small, ca_dir=no_ca, base=sandbox_image)  # no progress: an automatic build
    try:
        lines = capsys.readouterr().err.splitlines()
        assert lines[0] == f"cairn: building the sandbox image {tag} (once for this version of cairn; about a minute)"
        assert lines[-1].startswith(f"cairn: built {tag} on {sandbox_image} in ") and lines[-1].endswith(" s")
        assert len(lines) == 2  # the builder's log is for `cairn image build`, not for a run
        image.build_image(source=small, ca_dir=no_ca, base=sandbox_image)
        assert capsys.readouterr().err == ""  # an image that exists is not built: nothing to wait for
    finally:
        from orchestrator.sandbox.docker.engine import connect

        connect().images.remove(tag)

"""How the Harbor sandbox follows a task's work directory (orchestrator/sandbox/harbor/scan.py in the
container, follow.py on the host), run here on two folders of this machine, no Harbor and no Docker:
scan.py runs as a program, as the sandbox's `exec` runs it there, and its answers are applied to a copy."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.sandbox.harbor.follow import WorkspaceCopy
from orchestrator.sandbox.harbor.scan import CACHE_SIGNATURE, NOT_FOLLOWED, not_followed
from orchestrator.sandbox.harbor.sandbox import WORKSPACE_LIMIT
from orchestrator.store.checkpoints import SKIPPED_DIRS

SCAN = Path(__file__).resolve().parents[2] / "orchestrator" / "sandbox" / "harbor" / "scan.py"


def scan(folder: Path, since: int = 0, *extra: str, limit: tuple[int, int] = WORKSPACE_LIMIT) -> dict:
    done = subprocess.run([sys.executable, str(SCAN), "list", str(folder), str(since), str(limit[0]), str(limit[1]),
                           *extra], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def pack(folder: Path, names: list[str]) -> dict:
    encoded = base64.b64encode(json.dumps(names).encode()).decode()
    done = subprocess.run([sys.executable, str(SCAN), "pack", str(folder), str(WORKSPACE_LIMIT[0]), encoded],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def follow(work: Path, copy: WorkspaceCopy) -> list[str]:
    """One give-back, as HarborSandbox does it: the listing, then `pack` for what it did not carry."""
    missing = copy.update(scan(work, copy.since))
    if missing:
        copy.fill(pack(work, missing))
    return missing


def tree(folder: Path) -> dict[str, object]:
    """What a folder holds: each file's bytes and whether it is executable, each link's target, each folder."""
    found: dict[str, object] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if any(part in NOT_FOLLOWED for part in Path(rel).parts):
            continue
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = (path.read_bytes(), os.access(path, os.X_OK))
    return found


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "app"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("print('hi')\n")
    (folder / "data.csv").write_text("a,b\n1,2\n")
    return folder


@pytest.fixture
def copy(tmp_path: Path) -> WorkspaceCopy:
    (tmp_path / "workspace").mkdir()
    return WorkspaceCopy(tmp_path / "workspace")


def test_the_first_listing_carries_everything_and_the_copy_equals_the_folder(work, copy):
    (copy.root / "stale.txt").write_text("not the work directory's")
    assert follow(work, copy) == []
    assert tree(copy.root) == tree(work)


def test_dependency_trees_and_tagged_caches_are_neither_listed_nor_counted(work, copy):
    (work / ".venv" / "lib").mkdir(parents=True)
    (work / ".venv" / "lib" / "big.so").write_bytes(b"x" * (WORKSPACE_LIMIT[0] + 1))
    for name in ("node_modules/left-pad", "pkg/__pycache__", ".git/objects"):
        (work / name).mkdir(parents=True)
        (work / name / "f").write_text("x")
    (work / "target" / "debug").mkdir(parents=True)
    (work / "target" / "CACHEDIR.TAG").write_bytes(CACHE_SIGNATURE + b"\n# cargo's\n")
    (work / "target" / "debug" / "app").write_bytes(b"\x7fELF")
    (work / "build").mkdir()  # a name that may hold what the task asks for: followed
    (work / "build" / "out.txt").write_text("kept")

    scanned = scan(work)

    assert not scanned["over"] and scanned["files"] == 3
    assert sorted(scanned["pruned"]) == [".git", ".venv", "node_modules", "pkg/__pycache__", "target"]
    follow(work, copy)
    assert sorted(p.relative_to(copy.root).as_posix() for p in copy.root.rglob("*")) == [
        "build", "build/out.txt", "data.csv", "pkg", "src", "src/main.py"]
    # Asked to keep them, they are followed, and count.
    assert scan(work, 0, "--keep-dependencies")["over"]


def test_the_names_left_out_hold_every_folder_checkpoints_skip():
    assert set(SKIPPED_DIRS) <= set(NOT_FOLLOWED)


def test_a_folder_past_the_limit_is_over_and_costs_no_reading(work):
    for n in range(30):
        (work / f"f{n}").write_text("x")
    scanned = scan(work, 0, limit=(10**9, 20))
    assert scanned == {"over": True, "files": 21, "bytes": scanned["bytes"]}
    assert scan(work, 0, limit=(40, 10**6))["over"]  # 50 bytes in all


def test_each_kind_of_change_reaches_the_copy_and_nothing_unchanged_travels(work, copy):
    (work / "old-name.txt").write_text("moved")
    (work / "gone").mkdir()
    (work / "gone" / "inside.txt").write_text("deleted with its folder")
    (work / "becomes-a-folder").write_text("a file first")
    follow(work, copy)
    time.sleep(0.05)  # past the tick the next listing asks again for

    quiet = scan(work, copy.since)
    assert [e[0] for e in quiet["entries"] if e[5] is not None and e[1] == "f"] == []  # nothing changed: no content

    with open(work / "data.csv", "a") as f:  # the same second, the same size class: ctime tells
        f.write("3,4\n")
    (work / "old-name.txt").rename(work / "src" / "new-name.txt")  # mv keeps the mtime
    os.utime(work / "src" / "new-name.txt", (0, 0))
    shutil.rmtree(work / "gone")
    (work / "becomes-a-folder").unlink()
    (work / "becomes-a-folder").mkdir()
    (work / "becomes-a-folder" / "x").write_text("now inside")
    (work / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (work / "run.sh").chmod(0o755)
    (work / "latest").symlink_to("src/main.py")
    (work / "name\nwith newline é").write_text("odd names travel too")

    assert follow(work, copy) == []
    assert tree(copy.root) == tree(work)
    assert os.access(copy.root / "run.sh", os.X_OK)


def test_a_change_the_clock_cannot_vouch_for_is_fetched_with_pack(work, copy):
    follow(work, copy)
    (work / "data.csv").write_text("rewritten\n")
    copy.since = time.time_ns() + 10**12  # as if the container's clock had jumped back

    assert follow(work, copy) == ["data.csv"]
    assert (copy.root / "data.csv").read_text() == "rewritten\n"
    assert follow(work, copy) == []  # and listed now: not asked for again


def test_names_from_the_container_never_write_outside_the_copy(tmp_path, copy):
    outside = tmp_path / "outside"
    outside.mkdir()
    (copy.root / "escape").symlink_to(outside)
    payload = base64.b64encode(b"owned").decode()
    hostile = {"clock": 1, "entries": [
        ["../outside/a", "f", 5, 1, 0o644, payload],
        [str(outside / "b"), "f", 5, 1, 0o644, payload],
        ["escape", "l", 0, 0, 0o777, str(outside)],
        ["escape/c", "f", 5, 1, 0o644, payload],
        ["ok/../../d", "f", 5, 1, 0o644, payload],
        ["fine.txt", "f", 5, 1, 0o644, payload],
        ["bad-shape"], ["x", "f", "5", 1, 0o644, payload],
    ]}
    copy.listing = {"escape": ("l", 0, 0, 0o777)}  # a link the copy holds from an earlier listing

    copy.update(hostile)

    assert list(outside.iterdir()) == []
    assert (copy.root / "fine.txt").read_bytes() == b"owned"


def test_a_trial_log_copy_leaves_the_named_folders_out(work, tmp_path):
    (work / "node_modules" / "x").mkdir(parents=True)
    (work / "node_modules" / "x" / "index.js").write_text("x")
    (work / "src" / "__pycache__").mkdir()
    shutil.copytree(work, tmp_path / "logs", ignore=not_followed)
    assert sorted(p.relative_to(tmp_path / "logs").as_posix() for p in (tmp_path / "logs").rglob("*")) == [
        "data.csv", "src", "src/main.py"]


def test_a_fifo_or_a_link_named_like_a_cache_tag_never_stalls_the_scan(work, tmp_path):
    os.mkfifo(work / "fifo")
    (work / "looks-cached").mkdir()
    os.mkfifo(work / "looks-cached" / "CACHEDIR.TAG")
    (work / "linked").mkdir()
    (tmp_path / "tag").write_bytes(CACHE_SIGNATURE)
    (work / "linked" / "CACHEDIR.TAG").symlink_to(tmp_path / "tag")

    scanned = scan(work)

    assert scanned["pruned"] == [] and "fifo" not in [e[0] for e in scanned["entries"]]
    assert {"looks-cached", "linked", "linked/CACHEDIR.TAG"} <= {e[0] for e in scanned["entries"]}

"""The host reads what the sandbox wrote one way only (store/run_files.py; issue 34, holes 2 and 3): no
link followed, no FIFO or device opened, every read bounded, every folder listed by descriptor. The
last test reads the package's source and finds any other read, so a new one must say why it is safe."""

from __future__ import annotations

import ast
import os
import re
import threading
from pathlib import Path

import pytest

from orchestrator.store import run_files
from orchestrator.store.run_files import Missing, Refused

PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"


def test_a_link_anywhere_on_the_way_is_not_followed(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f.txt").write_text("inside\n")
    os.symlink("/proc/self/environ", tmp_path / "environ")
    os.symlink("real", tmp_path / "folder")
    os.symlink("real/f.txt", tmp_path / "file")
    assert run_files.read_text(tmp_path, "real/f.txt", 100) == "inside\n"
    for rel in ("environ", "folder/f.txt", "file"):
        with pytest.raises(Refused, match="symbolic link"):
            run_files.open_file(tmp_path, rel)
        assert run_files.read_text(tmp_path, rel, 100) is None
    with pytest.raises(Missing):
        run_files.open_file(tmp_path, "nothing")


def test_a_fifo_or_a_device_is_refused_at_once_and_a_read_is_bounded(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")  # a device can only be reached by a link: refused as one
    (tmp_path / "big").write_bytes(b"x" * 100_000)
    with pytest.raises(Refused, match="a FIFO, not a regular file"):
        run_files.open_file(tmp_path, "fifo")  # before: an open() that waited for a writer forever
    with pytest.raises(Refused):
        run_files.open_file(tmp_path, "zero")
    assert len(run_files.read_bytes(tmp_path, "big", 1000)) == 1000
    assert run_files.read_at(tmp_path, "big", 99_990, 1000) == b"x" * 10
    assert run_files.read_at(tmp_path, "fifo", 0, 1000) == b""


def _listed_by_the_page(root: Path) -> set[str]:
    from orchestrator.ui.web.files import list_files

    return {row["path"] for row in list_files(root)["files"]}


def _walked(root: Path) -> set[str]:
    return {entry.rel for entry in run_files.walk(root)}


@pytest.mark.parametrize("listing", [_listed_by_the_page, _walked], ids=["the page's file list", "run_files.walk"])
def test_a_folder_swapped_for_a_link_to_the_root_is_never_listed(tmp_path, listing):
    """The race of hole 3: `x` checked as a folder, then a link to `/` by the time it is listed."""
    root = tmp_path / "workspace"
    (root / "x").mkdir(parents=True)
    (root / "x" / "mine.txt").write_text("mine\n")
    for n in range(200):  # the time between listing the root and listing x, where the swap lands
        (root / f"f{n}").write_text("")
    host_names = set(os.listdir("/")) - {"mine.txt"}
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            try:
                os.rename(root / "x", root / "x.dir")
                os.symlink("/", root / "x")
                os.unlink(root / "x")
                os.rename(root / "x.dir", root / "x")
            except OSError:
                pass

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        seen: set[str] = set()
        for _ in range(150):
            seen |= listing(root)
    finally:
        stop.set()
        swapper.join()
    leaked = {rel.split("/")[1] for rel in seen if rel.count("/") >= 1 and rel.split("/")[0] in ("x", "x.dir")}
    assert not leaked & host_names, f"the host's root was listed: {sorted(leaked & host_names)[:10]}"
    assert {"x/mine.txt", "x.dir/mine.txt"} & seen


def test_the_pages_file_list_is_made_by_the_same_walk(tmp_path):
    from orchestrator.ui.web.files import list_files

    root = tmp_path / "workspace"
    root.mkdir()
    os.symlink("/", root / "x")
    (root / "a.txt").write_text("a")
    assert [(r["path"], r["link"]) for r in list_files(root)["files"]] == [("a.txt", False), ("x", True)]


def test_a_copy_leaves_links_and_special_files_out(tmp_path):
    source = tmp_path / "run"
    (source / "workspace" / "sub").mkdir(parents=True)
    (source / "workspace" / "sub" / "a.txt").write_text("a")
    os.symlink("/etc/passwd", source / "workspace" / "passwd")
    os.mkfifo(source / "workspace" / "fifo")
    left_out = run_files.copy_tree(source, tmp_path / "copy")
    assert (tmp_path / "copy" / "workspace" / "sub" / "a.txt").read_text() == "a"
    assert not os.path.lexists(tmp_path / "copy" / "workspace" / "passwd")
    assert not os.path.lexists(tmp_path / "copy" / "workspace" / "fifo")
    assert sorted(left_out) == ["workspace/fifo (a FIFO)", "workspace/passwd (a symbolic link)"]
    run_files.copy_tree(source, tmp_path / "with-links", links=True)
    assert os.readlink(tmp_path / "with-links" / "workspace" / "passwd") == "/etc/passwd"


def test_a_template_is_never_written_through_a_link_of_the_cloned_repository(tmp_path):
    from orchestrator.runs.new_run import add_missing_files

    template, workspace, outside = tmp_path / "template", tmp_path / "ws", tmp_path / "outside"
    (template / "notes").mkdir(parents=True)
    (template / "notes" / "README.md").write_text("notes go here\n")
    workspace.mkdir()
    outside.mkdir()
    os.symlink(outside, workspace / "notes")  # what a hostile repository ships
    add_missing_files(template, workspace)
    assert list(outside.iterdir()) == []


# -- every other read in the package says why it reads no run content -------------------------------

# Calls that open, read, copy or list a path. `run_files.*` is the one way into a run's workspace/ and
# cairn/; every other such call is listed here with the reason it does not read them.
READS = {"open", "read_text", "read_bytes", "fdopen", "copytree", "copy", "copy2", "copyfile", "scandir",
         "listdir", "iterdir", "glob", "rglob", "walk", "add"}
STATE = "the run's state/, which the sandbox never sees"
OWN = "cairn's own files (package data, a cache, a temporary file it made)"
ALLOWED = {
    "agent.approval_answers:record_answer": STATE,
    "agent.delegate:_copy_index": STATE + " (the checkpoints' git index)",
    "batch.jobs:parse_file": "the person's batch file",
    "batch.manifest:__init__": "the batch's manifest, beside the person's batch file",
    "batch.ray_driver:_prepare": OWN,
    "batch.ray_hub:export_bytes": "the archive export_run just wrote (it reads the run through run_files)",
    "batch.ray_node:sees_driver_runs": OWN,
    "llm.facts:_read": OWN,
    "llm.scripted:load_script": "the person's script, or cairn's built-in ones",
    "llm.scripted:_log_request": OWN + ": the request log a test names",
    "runs.agent_folder:load_agent": "the person's agent folder",
    "runs.new_run:clone": "the new workspace, before any sandbox runs",
    "runs.new_run:add_missing_files": "a template of cairn's, written into a new workspace never through a link",
    "runs.settings:template_settings": OWN + ": a template",
    "runs.settings:read_json": "the person's settings file",
    "runs.settings:template_names": OWN + ": the templates",
    "sandbox.carried:carried_python": OWN + ": the carried Python",
    "sandbox.docker.derived:derived_image": "the host's CA certificates",
    "sandbox.docker.image:_context_files": OWN + ": the image's build context",
    "sandbox.docker.image:_write_context": OWN + ": the image's build context",
    "sandbox.docker.image:_context_hash": OWN + ": the image's build context",
    "sandbox.docker.image:_build_lock": OWN,
    "sandbox.docker.image:_mounts_below": "/proc/self/mounts of this process",
    "sandbox.docker.image_tar:small_members": "a `docker save` tar the engine wrote",
    "sandbox.docker.image_tar:stream": "a `docker save` tar the engine wrote",
    "sandbox.docker.image_tar:write": OWN,
    "sandbox.docker.image_tar:json_members": "a `docker save` tar the engine wrote",
    "sandbox.docker.machine:save": OWN,
    "sandbox.docker.profile:host_has_local_ca": "the host's CA certificates",
    "sandbox.docker.workdir:_copy": "the engine's tar stream of the image's work directory, extracted with checks",
    "sandbox.harbor.relay:_detach": "runs in the sandbox (Harbor's relay), not on the host",
    "sandbox.harbor.relay:serve": "runs in the sandbox (Harbor's relay), not on the host",
    "sandbox.harbor.relay:main": "runs in the sandbox (Harbor's relay), not on the host",
    "sandbox.harbor.follow:_write": "writes what the sandbox listed into workspace/ (O_EXCL, O_NOFOLLOW) in a "
                                    "folder _place reached with no link on the way; reads nothing",
    "sandbox.harbor.follow:update": "lists workspace/'s own names to remove them; reads and follows none",
    "sandbox.harbor.scan:_content": "runs in the sandbox (Harbor's work directory scan), not on the host",
    "sandbox.harbor.scan:listing": "runs in the sandbox (Harbor's work directory scan), not on the host",
    "sandbox.harbor.scan:main": "runs in the sandbox (Harbor's work directory scan), not on the host",
    "sandbox.harbor.sandbox:_find_python": OWN + ": the carried Python",
    "sandbox.toolbox_files:sources": OWN + ": the toolbox's code",
    "store.archive:add_machine": "the machine image `docker save` wrote",
    "store.archive:import_run": "the archive being imported, checked member by member",
    "store.archive:export_run": "the archive it writes, and the run's own folder (not recursive); "
                                "its folders go through archive_files.add_tree",
    "store.archive:_adopt": STATE,
    "store.archive_files:_add_file": "opens an entry of run_files.walk by its folder's descriptor, O_NOFOLLOW",
    "store.checkpoints:skipped": STATE,
    "store.event_log:append": STATE,
    "store.event_log:read": STATE,
    "store.event_log:set_aside_torn_line": STATE,
    "store.fork:_copy_checkpoints": STATE,
    "store.fork:plan_fork": STATE,
    "store.fork:fork_run": STATE,
    "store.fork:_copy_inbox": STATE,
    "store.inbox:say": STATE,
    "store.inbox:pending": STATE,
    "store.liveness:take": STATE,
    "store.liveness:lock_is_held": STATE,
    "store.liveness:_pid_file_is_live": STATE,
    "store.liveness:_read": "/proc of this machine",
    "store.run_dir:write_meta": STATE,
    "store.run_dir:stop_request": STATE,
    "llm.scripted:_played": STATE + ": the scripted model's progress",
    "ui.chat:_read_history": OWN + ": the chat's history of what the person typed",
    "view.live_output:open_regular": "opens one component at a time with O_NOFOLLOW, non-blocking, a regular "
                                     "file only, as run_files does",
    "store.checkpoints:loose_objects": STATE,
    "store.git_safety:_filters": STATE,
    "store.git_safety:own_git_dir": STATE,
    "store.first_scan:_file_entry": "the checkpoint's first scan: opens with O_NOFOLLOW and O_NONBLOCK and reads "
                                    "a regular file only, as its descriptor says (its folders are walked by path)",
    "store.tree_update:_path": "a checkpoint's file: opens with O_NOFOLLOW and O_NONBLOCK and reads a regular "
                               "file only, as its descriptor says (its folders are walked by path)",
    "store.tree_update:_rescan": "a checkpoint's folder, listed by path (names only; each is lstat'ed, never followed)",
    "store.tree_update:is_repository": "a nested repository's .git file: 4 KiB of a name lstat'ed as a regular file",
    "store.tree_update:_is_git_directory": "a nested repository's HEAD and commondir, to tell it from a folder",
    "store.change_list:_watch_tree": "names of the workspace's folders to watch; reads no file",
    "integrations.harbor.time_budget:trial_agent_timeout": "Harbor's own trial config and task.toml",
    "view.read:_lines_before": STATE,
    "view.read:fold_log": STATE,
    "view.read:_cached": STATE,
    "view.read:_save": STATE,
    "store.run_dir:create": OWN + ": a template, copied into a new run",
    "store.run_dir:read_meta": STATE,
    "store.run_dir:external_workspace": STATE,
    "store.run_dir:all": "the runs directory",
    "store.run_dir:find": "the runs directory",
    "store.run_dir:started": STATE,
    "ui.approval_prompt:_in_editor": OWN + ": the person's edit of the arguments",
    "ui.inspect.report:<module>": OWN + ": the report's assets",
    "ui.inspect.watch:new": STATE,
    "ui.web.actions:_run_of": "the runs directory, and " + STATE,
    "ui.web.actions:spawn": OWN + ": the log of a command the page started",
    "ui.web.actions:_error_line": OWN + ": the log of a command the page started",
    "ui.web.actions:start": "the runs directory",
    "ui.web.app:style": OWN + ": the page's assets",
    "ui.web.files:read_file": "reads the descriptor run_files.open_file gave",
}


def reads_in(tree: ast.Module, module: str) -> dict[str, list[str]]:
    """`module:function` -> the calls in it that open, read, copy or list a path, other than run_files'."""
    found: dict[str, list[str]] = {}
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
        if (name not in READS or receiver == "run_files"
                or (name == "add" and not re.search(r"\b(tar|archive)\b", receiver))  # a set's add
                or (name == "walk" and receiver != "os")):
            continue
        scope = node
        while scope in parents and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope = parents[scope]
        function = scope.name if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else "<module>"
        found.setdefault(f"{module}:{function}", []).append(ast.unparse(node)[:100])
    return found


def reads_in_package() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", ".")
        if module != "store.run_files":
            found.update(reads_in(ast.parse(path.read_text()), module))
    return found


def test_every_other_read_of_a_path_says_why_it_is_not_run_content():
    found = reads_in_package()
    unexplained = {where: calls for where, calls in found.items() if where not in ALLOWED}
    assert not unexplained, ("a read of a path that may be under a run's workspace/ or cairn/: use "
                             f"store/run_files.py, or add it to ALLOWED with the reason it is safe: {unexplained}")
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED names reads that are gone: {stale}"


def test_the_scan_finds_the_plain_opens_that_made_holes_2_and_3():
    """ui/display.py opened <run>/cairn/live/shell.out with open(); the page listed folders with scandir."""
    display = "def _show_new(self):\n    with open(self.path, 'rb') as f:\n        return f.read()\n"
    page = "def list_files(root):\n    for entry in os.scandir(root / rel_dir):\n        pass\n"
    found = {**reads_in(ast.parse(display), "ui.display"), **reads_in(ast.parse(page), "ui.web.files")}
    assert set(found) == {"ui.display:_show_new", "ui.web.files:list_files"}
    assert not set(found) & set(ALLOWED)

"""The toolbox on its own: sandbox_image/ run on the host with --root, no Docker needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.sandbox.channel import PROTOCOL_VERSION
from tests.sandbox_fixtures import TOOLBOX, ToolboxProcess, locked_toolbox, toolbox  # noqa: F401 - fixtures


def root_of(toolbox: ToolboxProcess) -> Path:
    return toolbox.root


def test_ready_line_comes_first_signed_over_the_key_line(toolbox):
    # ToolboxProcess checks it as the host does (sandbox/channel.py): id 0, ok, the key line's MAC.
    assert toolbox.ready["ready"] is True and toolbox.ready["version"] == PROTOCOL_VERSION
    assert isinstance(toolbox.ready["dumpable"], bool)


def test_shell_keeps_cwd_and_variables(toolbox):
    toolbox.result("shell", command="mkdir -p sub && cd sub && export GREETING=hi && count=3")
    result = toolbox.result("shell", command='pwd; echo "$GREETING $count"')
    assert result["output"] == f"{root_of(toolbox) / 'sub'}\nhi 3\n"
    toolbox.result("shell", command="cd ..")


def test_shell_merges_stdout_and_stderr_in_order(toolbox):
    result = toolbox.result("shell", command="echo one; echo two >&2; echo three")
    assert result["output"] == "one\ntwo\nthree\n"
    assert (result["output_bytes"], result["output_lines"]) == (14, 3)


def test_shell_reports_exit_code_and_duration(toolbox):
    result = toolbox.result("shell", command="exit_with() { return $1; }; exit_with 7")
    assert result["exit_code"] == 7 and not result["timed_out"]
    assert result["duration_ms"] >= 0


def test_shell_stdin_is_dev_null(toolbox):
    result = toolbox.result("shell", command="cat; echo after", timeout=5)
    assert result["output"] == "after\n" and not result["timed_out"]


def test_shell_timeout_kills_the_command_and_the_shell_survives(toolbox):
    toolbox.result("shell", command="kept=yes")
    result = toolbox.result("shell", command="sleep 60 | cat", timeout=0.5)
    assert (result["exit_code"], result["timed_out"], result["shell_restarted"]) == (124, True, False)
    assert result["duration_ms"] < 5000
    assert toolbox.result("shell", command="echo $kept")["output"] == "yes\n"


def test_shell_stuck_in_a_builtin_loop_is_restarted(toolbox):
    result = toolbox.result("shell", command="while true; do :; done", timeout=0.5)
    assert result["timed_out"] and result["shell_restarted"]
    assert "restarted" in result["note"]
    assert toolbox.result("shell", command="echo alive")["output"] == "alive\n"


def test_shell_that_exits_is_replaced(toolbox):
    result = toolbox.result("shell", command="exit 3")
    assert result["exit_code"] == 3 and result["shell_restarted"]
    assert toolbox.result("shell", command="echo back")["output"] == "back\n"


def test_huge_output_is_capped_at_the_source_and_saved(toolbox):
    result = toolbox.result("shell", command="yes | head -c 5000000", inline_bytes=4096, max_file_bytes=100_000)
    assert result["truncated"] and result["output_bytes"] == 5_000_000
    assert result["output_lines"] == 2_500_000
    assert len(result["output"]) < 4096 + 200
    assert result["output"].startswith("y\ny\n") and result["output"].endswith("y\ny\n")
    saved = Path(result["output_path"])
    assert saved.parent == toolbox.cairn.resolve() / "obs" and saved.name.startswith("shell-")
    assert 100_000 <= saved.stat().st_size < 100_200  # kept up to max_file_bytes, plus a closing note


def test_small_output_is_inline_and_writes_no_file(toolbox):
    result = toolbox.result("shell", command="echo small", save_as="never.txt")
    assert result["output"] == "small\n" and result["output_path"] is None
    assert not (root_of(toolbox) / "never.txt").exists()


def test_read_returns_the_asked_line_range(toolbox):
    toolbox.result("write", path="lines.txt", content="".join(f"line {i}\n" for i in range(1, 11)))
    result = toolbox.result("read", path="lines.txt", offset=3, limit=2)
    assert result["content"] == "line 3\nline 4\n"
    assert (result["start_line"], result["end_line"], result["total_lines"], result["truncated"]) == (3, 4, 10, True)
    whole = toolbox.result("read", path="lines.txt")
    assert (whole["end_line"], whole["truncated"]) == (10, False)


def test_read_stops_at_max_bytes(toolbox):
    toolbox.result("write", path="wide.txt", content="abcdefghij\n" * 100)
    result = toolbox.result("read", path="wide.txt", max_bytes=25)
    assert result["content"] == "abcdefghij\nabcdefghij\n" and result["truncated"]


def test_read_past_the_end_is_an_error(toolbox):
    toolbox.result("write", path="short.txt", content="one\n")
    assert toolbox.error("read", path="short.txt", offset=5) == "short.txt: offset 5 is past the end of the file (1 lines)"


def test_read_of_a_missing_file_names_it(toolbox):
    assert toolbox.error("read", path="missing.txt") == "missing.txt: No such file or directory"


def test_write_creates_parents_and_leaves_no_temporary_file(toolbox):
    result = toolbox.result("write", path="deep/er/new.txt", content="héllo\n")
    assert result == {"path": "deep/er/new.txt", "bytes": 7, "created": True}
    assert os.listdir(root_of(toolbox) / "deep" / "er") == ["new.txt"]
    assert toolbox.result("write", path="deep/er/new.txt", content="again\n")["created"] is False


def test_write_keeps_the_mode_of_the_file_it_replaces(toolbox):
    script = root_of(toolbox) / "run.sh"
    script.write_text("old\n")
    script.chmod(0o755)
    toolbox.result("write", path="run.sh", content="#!/bin/sh\n")
    assert script.stat().st_mode & 0o777 == 0o755 and script.read_text() == "#!/bin/sh\n"


def test_edit_replaces_a_unique_string(toolbox):
    toolbox.result("write", path="code.py", content="a = 1\nb = 2\n")
    assert toolbox.result("edit", path="code.py", old="b = 2", new="b = 3") == {"path": "code.py", "bytes": 12}
    assert (root_of(toolbox) / "code.py").read_text() == "a = 1\nb = 3\n"


def test_edit_of_an_absent_string_says_so(toolbox):
    toolbox.result("write", path="code2.py", content="a = 1\n")
    assert "old text not found" in toolbox.error("edit", path="code2.py", old="zzz", new="y")


def test_edit_of_a_repeated_string_says_how_often_it_occurs(toolbox):
    toolbox.result("write", path="code3.py", content="x\nx\nx\n")
    assert "occurs 3 times" in toolbox.error("edit", path="code3.py", old="x", new="y")


@pytest.mark.parametrize("path", ["../outside.txt", "sub/../../outside.txt", "/etc/passwd"])
def test_under_lockdown_paths_outside_the_workspace_are_refused(locked_toolbox, path):
    error = locked_toolbox.error("read", path=path)
    assert error.startswith(f"{path}: outside /workspace (it resolves to ")


def test_under_lockdown_a_symlink_leading_out_is_refused(locked_toolbox):
    os.symlink("/etc", root_of(locked_toolbox) / "etc-link")
    error = locked_toolbox.error("write", path="etc-link/evil", content="x")
    assert error.startswith("etc-link/evil: outside /workspace (it resolves to /etc/evil)")


def test_under_lockdown_cairns_own_files_can_be_read(locked_toolbox):
    (locked_toolbox.cairn / "obs").mkdir(exist_ok=True)
    (locked_toolbox.cairn / "obs" / "1-shell_exec.txt").write_text("saved\n")
    path = str(locked_toolbox.cairn / "obs" / "1-shell_exec.txt")
    assert locked_toolbox.result("read", path=path)["content"] == "saved\n"


def test_absolute_paths_reach_anywhere(toolbox):
    result = toolbox.result("read", path="/etc/os-release")
    assert "ID=" in result["content"] and result["path"].startswith("/")  # the resolved path: absolute


def test_paths_outside_the_workdir_are_given_back_absolute(toolbox, tmp_path):
    toolbox.result("write", path=str(tmp_path / "elsewhere.txt"), content="x")
    assert (tmp_path / "elsewhere.txt").read_text() == "x"
    assert toolbox.result("read", path=str(tmp_path / "elsewhere.txt"))["path"] == str(tmp_path / "elsewhere.txt")


def test_workspace_prefix_means_the_root(toolbox):
    toolbox.result("write", path="/workspace/abs.txt", content="x")
    assert (root_of(toolbox) / "abs.txt").read_text() == "x"


def test_another_workdir_is_the_root_and_relative_paths_land_there(tmp_path):
    (tmp_path / "app").mkdir()
    toolbox = ToolboxProcess(tmp_path / "app", workdir="/app")
    try:
        toolbox.result("write", path="/app/x.txt", content="1")
        toolbox.result("write", path="y.txt", content="2")
        assert (tmp_path / "app" / "x.txt").read_text() == "1" and (tmp_path / "app" / "y.txt").read_text() == "2"
        assert toolbox.result("shell", command="pwd")["output"] == f"{tmp_path / 'app'}\n"
    finally:
        toolbox.close()


def test_list_walks_to_the_asked_depth(toolbox):
    toolbox.result("write", path="tree/a/b/c.txt", content="c")
    paths = {entry["path"]: entry["type"] for entry in toolbox.result("list", path="tree", depth=2)["entries"]}
    assert paths == {"tree/a": "dir", "tree/a/b": "dir"}
    deeper = toolbox.result("list", path="tree", depth=3)["entries"]
    assert {"path": "tree/a/b/c.txt", "type": "file", "size": 1} in deeper


def test_unknown_op_and_bad_arguments_are_clear(toolbox):
    assert toolbox.error("nope") == "unknown op 'nope'"
    assert "bad arguments for read" in toolbox.error("read", file="x")


def test_fetch_refuses_what_is_not_http(toolbox):
    assert "only http and https" in toolbox.error("fetch", url="file:///etc/passwd")


def test_html_becomes_readable_text():
    from orchestrator.sandbox_image.toolbox.web import html_to_text

    page = "<html><head><style>p{}</style></head><body><h1>Title</h1><p>One &amp; two</p><script>x()</script><ul><li>item</li></ul></body></html>"
    assert html_to_text(page) == "Title\n\nOne & two\n\n- item\n"

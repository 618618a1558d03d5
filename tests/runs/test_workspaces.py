"""Where a run's workspace comes from: a template, a user's own folder (--workspace), a git clone (--from-git)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import CairnError, UsageError
from orchestrator.runs.new_run import create_run
from orchestrator.runs.settings import resolve_config, template_names
from orchestrator.store.run_dir import RunDir
from tests.cli.test_cli import cairn, cairn_here

AS_ROOT = os.getuid() == 0
OWNER = (1234, 1234)  # a folder owner that is neither root nor the sandbox's default 1000


def script(tmp_path: Path, *turns: dict) -> str:
    path = tmp_path / f"script-{len(list(tmp_path.glob('script-*.json')))}.json"
    path.write_text(json.dumps({"turns": list(turns)}))
    return f"scripted:{path}"


def call(name: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


DONE = call("task_done", summary="ok")


def results(out: subprocess.CompletedProcess) -> list[str]:
    """The output preview of each tool call (whitespace collapsed), without the `[exit code 0, 0.0 s]` the
    shell adds."""
    doc = json.loads(out.stdout)
    return [re.sub(r"\s*\[exit code [^\]]*\]\s*$", "", c["result"] or "") for s in doc["steps"] for c in s["tool_calls"]]


def the_run(runs_dir: Path) -> RunDir:
    [root] = [p for p in runs_dir.iterdir() if (p / "state").is_dir()]
    return RunDir(root)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, check=True, capture_output=True,
                          text=True, env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                                          "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}).stdout


def tree_digest(path: Path) -> str:
    """Every file's path, mode and bytes under `path`: any change to it changes the digest."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        st = p.lstat()
        h.update(f"{p.relative_to(path)} {st.st_mode}\n".encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


# -- templates ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, files", [
    ("default", ["todo.md", "WORKSPACE.md"]),
    ("coding", ["todo.md", "WORKSPACE.md"]),
    ("research", ["todo.md", "WORKSPACE.md", "report.md", "sources/", "notes/"]),
])
def test_each_template_creates_its_files(tmp_path, name, files):
    cfg = resolve_config({}, template=name)
    run = create_run(tmp_path / "runs", "task", cfg)
    for f in files:
        assert (run.workspace / f).is_dir() if f.endswith("/") else (run.workspace / f).is_file(), f
    assert not (run.workspace / "cairn.json").exists()
    assert run.read_meta()["config"]["template"] == name


def test_template_settings_sit_between_defaults_and_options():
    assert resolve_config({}).sandbox.network == "none"
    assert resolve_config({}, template="research").sandbox.network == "bridge"
    assert resolve_config({"sandbox": {"network": "none"}}, template="research").sandbox.network == "none"
    # an option the user did not give (None) does not clobber the template's setting
    assert resolve_config({"sandbox": {"network": None, "image": None}}, template="research").sandbox.network == "bridge"


def test_an_unknown_template_is_a_one_line_usage_error_naming_the_templates(runs_dir):
    out = cairn_here("run", "task", "--template", "nope", runs_dir=runs_dir)
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    assert "nope" in line and all(n in line for n in ("coding", "default", "research"))
    assert not runs_dir.exists() or not list(runs_dir.iterdir())


@pytest.mark.docker
@pytest.mark.parametrize("options, network", [([], "bridge"), (["--network", "none"], "none")])
def test_research_turns_the_network_on_unless_the_option_says_otherwise(runs_dir, sandbox_image, tmp_path,
                                                                        options, network):
    model = script(tmp_path, call("shell_exec", command="ls /sys/class/net"), DONE)
    out = cairn("run", "look", "--template", "research", *options, "--model", model, "--json", runs_dir=runs_dir)
    assert out.returncode == 0, out.stderr
    assert the_run(runs_dir).read_meta()["config"]["sandbox"]["network"] == network
    interfaces = set(results(out)[0].split())
    assert "lo" in interfaces
    assert bool(interfaces - {"lo"}) == (network == "bridge"), interfaces


# -- --workspace DIR --------------------------------------------------------------------------------

@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's folder that is a git repository with one commit, owned by OWNER when the tests run as root."""
    path = tmp_path / "project"
    path.mkdir()
    (path / "main.py").write_text("print('hi')\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "main.py")
    git(path, "commit", "-q", "-m", "first")
    if AS_ROOT:
        for p in [path, *path.rglob("*")]:
            os.lchown(p, *OWNER)
    return path


BIG = "python3 -c \"print('\\n'.join('line %05d ' % i + 'x' * 40 for i in range(4000)))\""


@pytest.mark.docker
def test_a_run_on_a_users_git_folder_works_in_place_and_leaves_no_trace_of_cairn(runs_dir, sandbox_image,
                                                                                   tmp_path, project):
    git_before = tree_digest(project / ".git")
    head_before = git(project, "rev-parse", "HEAD")
    model = script(tmp_path,
                   call("file_write", path="new.py", content="x = 1\n"),
                   call("shell_exec", command=BIG),  # offloaded to /cairn/obs/: must not land in the folder
                   call("shell_exec", command="id -u; ls -a /cairn/obs"),
                   DONE)
    out = cairn("run", "work here", "--workspace", str(project), "--model", model, "--json", runs_dir=runs_dir)
    assert out.returncode == 0, out.stderr
    run = the_run(runs_dir)

    # the agent (root in its container) wrote its file in the folder itself, given back to the folder's owner
    assert (project / "new.py").read_text() == "x = 1\n"
    owner = OWNER[0] if AS_ROOT else os.getuid()
    assert (project / "new.py").stat().st_uid == owner
    assert results(out)[2].split()[0] == "0"
    assert (project / "main.py").stat().st_uid == owner  # not chowned

    # the folder's own git is untouched: HEAD, index, objects, config; status shows just the new file
    assert tree_digest(project / ".git") == git_before
    assert git(project, "rev-parse", "HEAD") == head_before
    assert git(project, "status", "--porcelain") == "?? new.py\n"

    # cairn's files are in the run, not in the folder
    assert not (project / ".cairn").exists()
    assert (run.root / "cairn" / "obs" / "2-shell_exec.txt").is_file()
    assert not (run.root / "workspace").exists()

    # the run knows its workspace, and its checkpoints (in the run's state) have the new file
    assert run.read_meta()["workspace"] == str(project.resolve())
    assert RunDir.find(runs_dir, run.id).workspace == project.resolve()
    from orchestrator.store.checkpoints import Checkpoints

    cp = Checkpoints.of(run)
    assert cp.git_dir == run.state / "checkpoints.git"
    files = cp.git.ls_tree("-r", "--name-only", cp.head()).splitlines()
    assert "new.py" in files and "main.py" in files and not any(f.startswith((".git/", ".cairn/")) for f in files)

    # a resume after the folder moved away is a clear error
    project.rename(tmp_path / "moved")
    again = cairn("resume", run.id, "--message", "more", runs_dir=runs_dir)
    assert again.returncode == 2
    assert "not there any more" in again.stderr and str(project.resolve()) in again.stderr


def test_workspace_refuses_a_file_a_missing_folder_and_the_runs_dir(runs_dir, tmp_path):
    (tmp_path / "file.txt").write_text("x")
    (runs_dir / "inside").mkdir(parents=True)
    for bad, says in ((tmp_path / "file.txt", "not a folder"), (tmp_path / "nope", "no such folder"),
                      (runs_dir / "inside", "inside the runs directory"), (tmp_path, "is inside --workspace")):
        out = cairn_here("run", "task", "--workspace", str(bad), runs_dir=runs_dir)
        assert out.returncode == 2, (bad, out.stderr)
        assert says in out.stderr.splitlines()[0], out.stderr
    assert [p.name for p in runs_dir.iterdir()] == ["inside"]  # no run was created


@pytest.mark.skipif(not AS_ROOT, reason="only root can make a folder root owns and a different owner")
def test_under_lockdown_a_folder_root_owns_is_refused_unless_a_sandbox_user_is_given(runs_dir, tmp_path):
    folder = tmp_path / "rooted"
    folder.mkdir()
    out = cairn_here("run", "task", "--workspace", str(folder), "--lockdown", runs_dir=runs_dir)
    assert out.returncode == 2 and "belongs to root" in out.stderr and "--sandbox-user" in out.stderr
    assert not runs_dir.exists() or not list(runs_dir.iterdir())
    from orchestrator.sandbox.docker.profile import decide_user

    cfg = resolve_config({"sandbox": {"user": "1000:1000", "lockdown": True}})
    assert decide_user(cfg.sandbox, folder, external=True) == (1000, 1000)
    with pytest.raises(UsageError):
        decide_user(resolve_config({"sandbox": {"user": "0:0", "lockdown": True}}).sandbox, folder, external=True)
    assert decide_user(resolve_config({}).sandbox, folder, external=True) == (0, 0)  # the default: root
    assert folder.stat().st_uid == 0  # never chowned


# -- --from-git URL ---------------------------------------------------------------------------------

@pytest.fixture
def bare_repo(tmp_path: Path) -> tuple[str, str]:
    """A bare repository (file:// URL) with two commits on main and a tag `v1` on the first; returns
    (url, sha of the first commit)."""
    work = tmp_path / "upstream"
    work.mkdir()
    (work / "README.md").write_text("version one\n")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "README.md")
    git(work, "commit", "-q", "-m", "one")
    first = git(work, "rev-parse", "HEAD").strip()
    git(work, "tag", "v1")
    (work / "README.md").write_text("version two\n")
    git(work, "commit", "-q", "-am", "two")
    bare = tmp_path / "upstream.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    return bare.as_uri(), first


@pytest.mark.docker
def test_from_git_clones_and_the_agent_sees_the_files(runs_dir, sandbox_image, tmp_path, bare_repo):
    url, _ = bare_repo
    model = script(tmp_path, call("shell_exec", command="cat README.md; git log --oneline | wc -l"), DONE)
    out = cairn("run", "read it", "--from-git", url, "--model", model, "--json", runs_dir=runs_dir)
    assert out.returncode == 0, out.stderr
    assert "version two" in results(out)[0]
    assert results(out)[0].split()[2] == "1"  # a shallow clone
    run = the_run(runs_dir)
    assert run.read_meta()["source"] == {"git": url, "ref": None}
    assert (run.workspace / "todo.md").is_file()  # the template's files the repository lacks are added


@pytest.mark.parametrize("ref, expected", [("v1", "version one\n"), ("main", "version two\n"), ("first", "version one\n")])
def test_from_git_checks_out_a_branch_a_tag_or_a_commit(tmp_path, bare_repo, ref, expected):
    url, first = bare_repo
    run = create_run(tmp_path / "runs", "task", resolve_config({}), from_git=url,
                     ref=first if ref == "first" else ref)
    assert (run.workspace / "README.md").read_text() == expected
    assert run.read_meta()["source"]["ref"] == (first if ref == "first" else ref)


def test_a_failing_clone_is_one_line_and_leaves_no_run(runs_dir, tmp_path, bare_repo):
    out = cairn_here("run", "task", "--from-git", (tmp_path / "missing.git").as_uri(), runs_dir=runs_dir)
    assert out.returncode == 1
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("cairn: error: cannot clone file://") and "missing.git" in line
    assert not list(runs_dir.iterdir())
    with pytest.raises(CairnError, match="cannot clone"):
        create_run(runs_dir, "task", resolve_config({}), from_git=bare_repo[0], ref="no-such-ref")
    assert not list(runs_dir.iterdir())


def test_templates_are_all_listed(tmp_path):
    assert set(template_names()) >= {"default", "coding", "research"}


def test_a_stored_config_with_a_setting_this_version_does_not_know_still_loads(runs_dir):
    from orchestrator.runs.new_run import create_run
    from orchestrator.runs.settings import load_config

    run = create_run(runs_dir, "task", resolve_config({}))
    meta = run.read_meta()
    meta["config"]["context"]["a_setting_from_another_version"] = 1
    meta["config"]["sandbox"]["gone_too"] = "x"
    run.write_meta(meta)
    assert load_config(run).context.offload_tokens == resolve_config({}).context.offload_tokens
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="ofload_tokens"):  # a person's config stays strict: a typo is an error
        resolve_config({"context": {"ofload_tokens": 10}})

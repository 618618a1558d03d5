"""A new run: its directory, its workspace (a template's copy, a person's folder, a git clone, or the image's
content at the work directory) and its first events."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from orchestrator.config import RunConfig
from orchestrator.errors import CairnError, UsageError
from orchestrator.agent.prompts import read_instructions, system_prompt
from orchestrator.runs.settings import template_dir
from orchestrator import events as ev
from orchestrator.store.run_dir import RunDir
from orchestrator.tools.specs import BUILTIN_TOOLS, canonical

if TYPE_CHECKING:
    from orchestrator.tools.registry import Tool

DEFAULT_WORKDIR = "/workspace"


def check_workspace_dir(path: Path, runs_dir: Path) -> Path:
    """The folder of `cairn run --workspace DIR`, resolved; a clear error for one cairn cannot work on."""
    if not path.exists():
        raise UsageError(f"--workspace {path}: no such folder")
    if not path.is_dir():
        raise UsageError(f"--workspace {path} is not a folder")
    folder, runs = path.resolve(), runs_dir.expanduser().resolve()
    if folder == runs or runs in folder.parents:
        raise UsageError(f"--workspace {path} is inside the runs directory {runs}; give a folder of your own")
    if folder in runs.parents:
        raise UsageError(f"the runs directory {runs} is inside --workspace {path}: the folder's checkpoints "
                         "would take in cairn's own runs", hint="use another --runs-dir, or another folder")
    return folder


def create_run(runs_dir: Path, task: str, cfg: RunConfig, workspace: Path | None = None,
               from_git: str | None = None, ref: str | None = None, tools: Sequence[Tool] = (),
               offered: Sequence[str] | None = None) -> RunDir:
    """A new run: its workspace is a copy of the template, or `workspace` (a user's folder, worked on in
    place; the template's files are not added to it), or a clone of the git repository `from_git` at
    `ref` (the template's files that the repository does not have are added), or, with another work
    directory than /workspace (`--workdir`), the image's content at that path (no template files).
    `tools`: tools of the run's own, offered after the built-in ones (docs/extending.md); its
    drives must be given the same. `offered`: the built-in tools the model is offered, when not all of
    them (orchestrator.Agent's `tools`): the run's first event holds only those, for good."""
    if workspace is not None and from_git is not None:
        raise UsageError("--workspace and --from-git do not go together")
    meta: dict[str, Any] = {"task": task, "status": "running", "config": cfg.model_dump(mode="json")}
    template = template_dir(cfg.template)
    if workspace is not None:
        workspace = check_workspace_dir(Path(workspace), runs_dir)
        from orchestrator.sandbox.docker.profile import decide_user

        decide_user(cfg.sandbox, workspace, external=True)  # a folder root owns is refused before a run exists
    if from_git is not None:
        meta["source"] = {"git": from_git, "ref": ref}
    from_image = workspace is None and from_git is None and cfg.sandbox.workdir != DEFAULT_WORKDIR
    run = RunDir.create(runs_dir, meta, template=None if workspace or from_git or from_image else template,
                        workspace=workspace)
    try:
        if from_git is not None:
            clone(from_git, ref, run.workspace)
            add_missing_files(template, run.workspace)
        if from_image:
            copy_workdir(run, cfg)
    except BaseException:
        shutil.rmtree(run.root, ignore_errors=True)  # a run that never started leaves nothing behind
        raise
    if not cfg.mcp.servers:  # with MCP servers, the LiveRun starts the log once they listed their tools
        start_log(run, task, cfg, [tool.spec for tool in tools], offered)
    return run


def copy_workdir(run: RunDir, cfg: RunConfig) -> None:
    """The image's content at the work directory becomes the run's workspace (sandbox/docker/workdir.py);
    run.json records where it came from."""
    from orchestrator.sandbox.docker.engine import connect
    from orchestrator.sandbox.docker.image import ensure_image
    from orchestrator.sandbox.docker.workdir import copy_out

    image, path = cfg.sandbox.image or ensure_image(), cfg.sandbox.workdir
    done = copy_out(connect(), image, path, run.workspace, name=f"cairn-{run.id}-copy")
    if not done.found:
        progress(f"{path} is not in the image {image}: the work directory starts empty")
    else:
        owners = "owners kept" if os.getuid() == 0 else "owned by you (only root keeps owners)"
        skipped = f", {done.skipped} device files left out" if done.skipped else ""
        progress(f"copied {path} out of {image}: {done.files} entries, modes and symlinks kept, {owners}{skipped}")
    run.update_meta(workdir_source={"image": image, "path": path, "found": done.found, "entries": done.files})


def start_log(run: RunDir, task: str, cfg: RunConfig, extra_tools: list[dict[str, Any]] | None = None,
              offered: Sequence[str] | None = None) -> None:
    """The first event: RunStarted with the run's system prompt (its profile, the project's AGENTS.md) and
    fixed tool list (built-in, or those of them `offered`, then the run's own, then MCP). Step 0, the
    workspace's first checkpoint, is taken by the run's first drive, while its first request goes out
    (runs/first_checkpoint.py)."""
    # AGENTS.md is read once, here: the prompt stays the same for the whole run, so the prefix cache holds.
    instructions = read_instructions(run.workspace, cfg.sandbox.workdir)
    prompt = system_prompt(cfg.system_prompt_extra, cfg.sandbox.workdir, cfg, instructions)
    builtin = [t for t in BUILTIN_TOOLS if offered is None or t["function"]["name"] in offered]
    run.events.append(ev.RunStarted(task=task, system_prompt=prompt, tools=canonical(builtin + list(extra_tools or [])),
                                    seed=ev.new_seed()))


def clone(url: str, ref: str | None, dest: Path) -> None:
    """`git clone` on the host into the empty directory `dest`: shallow, of `ref` (a branch or a tag)
    when given; a ref that is not a branch or tag (a commit) needs a whole clone and a checkout.
    The user's own git config applies (credentials, proxies); git never prompts."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}

    def git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise CairnError("--from-git needs git on this machine, and there is none") from None

    def failed(done: subprocess.CompletedProcess) -> CairnError:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        return CairnError(f"cannot clone {url}: {lines[-1] if lines else f'git exited with {done.returncode}'}")

    if ref is not None and (not ref or ref.startswith("-")):
        raise UsageError(f"--ref {ref!r} is not a git ref")
    shallow = ["clone", "--quiet", "--depth", "1", *(["--branch", ref] if ref else []), "--", url, str(dest)]
    done = git(*shallow)
    if done.returncode == 0:
        return
    if not ref:
        raise failed(done)
    for leftover in dest.iterdir() if dest.is_dir() else []:  # a failed clone may leave a .git behind
        shutil.rmtree(leftover) if leftover.is_dir() and not leftover.is_symlink() else leftover.unlink()
    done = git("clone", "--quiet", "--no-checkout", "--", url, str(dest))
    if done.returncode != 0:
        raise failed(done)
    done = git("-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", ref, cwd=dest)
    if done.returncode != 0:
        raise failed(done)


def add_missing_files(template: Path, workspace: Path) -> None:
    """Copy the template's files that the workspace does not have (a cloned repository's files win)."""
    for source in sorted(template.rglob("*")):
        relative = source.relative_to(template)
        target = workspace / relative
        if relative == Path("cairn.json") or os.path.lexists(target):
            continue
        if source.is_dir():
            target.mkdir(parents=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


_PROGRESS: list[Callable[[str], None] | None] = [lambda line: print(line, file=sys.stderr, flush=True)]


def progress(line: str) -> None:
    """A line on what is being done before the run's display exists (stderr; nowhere during a batch,
    whose table says what each run is doing)."""
    say = _PROGRESS[0]
    if say is not None:
        say(line)


def progress_to(say: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """Where progress lines go from now on (None: nowhere); returns where they went before."""
    before, _PROGRESS[0] = _PROGRESS[0], say
    return before

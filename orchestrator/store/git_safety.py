"""git with cairn's settings only, on a git dir cairn owns: what every git call on checkpoints goes through.

git is never configured by a run. Every git process gets a fixed identity, no global or system config,
and command-line settings (GIT_CONFIG_COUNT, which outrank any config file) that switch off everything
in git that can start a program: fsmonitor, hooks, pager, editor, external diff, signature checks,
diff drivers and filters. `safe.directory=*` too: the workspace may belong to
the sandbox's uid while cairn runs as root. Before the first git call on a git dir in a process,
`own_git_dir` makes its `config` cairn's own text and removes what git would follow out of it (hooks,
info/attributes, alternates, commondir): a git dir copied from elsewhere cannot act on this machine.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import git

IDENTITY = {"name": "cairn", "email": "cairn@localhost"}


# Settings given on git's command line (as GIT_CONFIG_COUNT) outrank every config file, so even a hostile
# `config` that slipped past `own_git_dir` cannot make git start a program.
SAFE_SETTINGS = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),  # no hook is ever found there
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("core.attributesFile", os.devnull),
    ("core.quotepath", "off"),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("log.showSignature", "false"),
    ("submodule.recurse", "false"),
    ("protocol.allow", "never"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("safe.directory", "*"),  # the workspace may belong to the sandbox's uid while cairn runs as root
)
# A git dir's `config` is exactly this: what `init` writes, and what `own_git_dir` puts back.
OWN_CONFIG = f"""[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = true
\tautocrlf = false
\tsymlinks = true
[gc]
\tauto = 0
[user]
\tname = {IDENTITY["name"]}
\temail = {IDENTITY["email"]}
"""
# What git would follow out of a git dir, or run: none of it is ever part of cairn's checkpoints.
_FOREIGN = ("hooks", "info", "commondir", "gitdir", "worktrees", "modules", "logs", "shallow",
            "objects/info/alternates", "objects/info/http-alternates")
_owned: set[Path] = set()  # git dirs made safe in this process


def own_git_dir(git_dir: Path) -> None:
    """Makes `git_dir` safe to run git on: its config is cairn's own text, and nothing git would follow
    or run (hooks, info/attributes, alternates, commondir, ...) is left in it. Once per process."""
    key = Path(os.path.abspath(git_dir))
    if key in _owned or not (git_dir / "HEAD").exists():
        return
    config = git_dir / "config"
    try:
        same = not config.is_symlink() and config.read_text() == OWN_CONFIG
    except (OSError, UnicodeDecodeError):
        same = False
    if not same:
        tmp = git_dir / "config.cairn-tmp"
        tmp.unlink(missing_ok=True)
        tmp.write_text(OWN_CONFIG)
        os.replace(tmp, config)  # replaces a symlink itself, never what it points to
    for name in _FOREIGN:
        path = git_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
    _owned.add(key)


def _env(git_dir: Path, work_tree: Path | None) -> dict[str, str]:
    env = {
        "GIT_DIR": str(git_dir),
        # Only cairn's settings: a user's global or system git config must not change what is kept.
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_AUTHOR_NAME": IDENTITY["name"], "GIT_AUTHOR_EMAIL": IDENTITY["email"],
        "GIT_COMMITTER_NAME": IDENTITY["name"], "GIT_COMMITTER_EMAIL": IDENTITY["email"],
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_PAGER": "cat", "GIT_EDITOR": "true",
        "LC_ALL": "C",
    }
    settings = list(SAFE_SETTINGS)
    # A filter a config file defines runs for any path a .gitattributes (the workspace's) names it for:
    # give each an empty command, which git takes as none. (Diff drivers and textconv never run: every
    # diff cairn makes says --no-ext-diff --no-textconv.)
    for name in sorted(_filters(git_dir / "config")):
        settings += [(f"filter.{name}.{key}", "") for key in ("clean", "smudge", "process")]
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    for i, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


_FILTER_SECTION = re.compile(r'^\s*\[\s*(filter)(?:\s+"((?:[^"\\\\]|\\\\.)*)"|\.([^\]\s]+))\s*\]', re.I | re.M)


def _filters(config: Path) -> set[str]:
    """The names of the filters a config file defines."""
    try:
        text = config.read_text(errors="replace")
    except OSError:
        return set()
    return {(m.group(2) if m.group(2) is not None else m.group(3)).replace('\\"', '"')
            for m in _FILTER_SECTION.finditer(text)}


def make_git(git_dir: Path, work_tree: Path | None = None) -> git.Git:
    """A gitpython command runner on this git dir and work tree (the git command line underneath),
    with cairn's own settings only (see the module's docstring)."""
    own_git_dir(git_dir)
    g = git.Git(str(work_tree if work_tree is not None else git_dir))
    g.update_environment(**_env(git_dir, work_tree))
    return g

"""What a run's container is made with: its name and labels, its user, mounts, environment and limits,
and the hash of those by which a kept container is known again (container.py gives it its life).

The default profile, "root inside, a wall outside": the container is the agent's own computer. The agent
is root (uid 0) with a writable root filesystem (the container's own layer), so `apt-get install`,
`pip install`, `chmod`, `chown`, scripts in /tmp and a home at /root work as in any root shell. The wall
is at the container's edge:
- no Docker socket, and of the host only these mounts: the run's workspace at the work directory
  (`sandbox.workdir`, /workspace unless `--workdir`), cairn's own files of the run (`<run>/cairn/`: saved
  outputs, fetched pages, summaries) at /cairn, outside any project tree, and read-only: the toolbox's
  folder from cairn's files at /opt/cairn (sandbox/toolbox_files.py: so it always matches the host's
  cairn, nothing is written into the workspace, and no file of the agent's can take its place) and, for
  an image without cairn's Python, the volume that carries one (python_volume.py); the environment holds only what the config names (`env`, and host variables listed
  in `pass_env`), so API keys stay on the host;
- limits on pids, memory (no swap) and CPU; no network unless the run asks for `bridge`; Docker's default
  seccomp profile (never `unconfined`); `no-new-privileges`; an init (PID 1) that reaps orphans;
- capabilities cut to what a root shell that installs packages needs (ROOT_CAPABILITIES):
    CHOWN, FOWNER, FSETID   dpkg, tar and pip give files their owners and modes (setuid bits included);
    DAC_OVERRIDE            root reads and writes files it does not own: the workspace is the host user's;
    SETUID, SETGID          apt drops to its `_apt` user to download; `su`, `runuser`, servers that drop
                            privileges;
    KILL                    signal processes of other users (apt's `_apt` helpers, a server's workers);
    NET_BIND_SERVICE        a server under test may listen on a port below 1024.
  Dropped from Docker's default set: NET_RAW (raw sockets: spoofing, sniffing; `ping` fails), MKNOD (device
  nodes), SETFCAP and SETPCAP (file and process capabilities: no-new-privileges makes them useless to a
  package, and they are the way to widen a process's set), SYS_CHROOT and AUDIT_WRITE (no package install
  needs them). Nothing outside Docker's default set (SYS_ADMIN, NET_ADMIN, SYS_PTRACE, SYS_MODULE, ...)
  is ever added.
Files the root agent leaves in a bind-mounted directory are given back to the directory's owner (the
host user, or the owner of `--workspace DIR`) from inside the container: see `DockerSandbox.give_back_files`.

`--lockdown`, the cage for untrusted work: the agent is not root (the host user's uid:gid; 1000:1000 when
cairn runs as root, and the workspace tree is chowned to it first; with `--workspace DIR` the folder's
owner, and a folder root owns is refused), the root filesystem is read-only, /tmp and the home are
noexec tmpfs, and no capability is left. `sandbox.user` ("UID:GID") overrides the uid in either profile;
0 only without lockdown.

`sandbox.runtime` names an OCI runtime the engine knows (e.g. `runsc`, gVisor: a user-space kernel
between the agent and the host's, for work whose code nobody has read).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from orchestrator.config import SandboxConfig
from orchestrator.errors import UsageError
from orchestrator.sandbox import carried, toolbox_files
from orchestrator.store import run_files
LABEL_MANAGED = "cairn.managed"
LABEL_RUN = "cairn.run"
LABEL_RUN_DIR = "cairn.run_dir"  # the run's directory on the host: gc tells another runs dir's from an orphan
LABEL_CONFIG = "cairn.config"  # a hash of the settings the container was made with (see `fingerprint`)
WORKSPACE = "/workspace"  # the default work directory
CAIRN_DIR = toolbox_files.CAIRN_DIR  # where the run's own cairn files (<run>/cairn/) are mounted
HOME = "/home/cairn"  # the home of a non-root agent (a tmpfs)
ROOT_HOME = "/root"
ROOT = (0, 0)
NON_ROOT = (1000, 1000)  # the user cairn's image makes; used under lockdown when the host user is root
ROOT_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL", "NET_BIND_SERVICE"]


def container_name(run_id: str) -> str:
    return f"cairn-{run_id}"


def sandbox_user() -> tuple[int, int]:
    """The uid and gid a locked-down agent runs as: the host user's, but never root."""
    uid = os.getuid()
    return NON_ROOT if uid == 0 else (uid, os.getgid())


def decide_user(cfg: SandboxConfig, workspace: Path, external: bool = False) -> tuple[int, int]:
    """The uid and gid the agent runs as, for this workspace: root, unless `sandbox.user` says otherwise
    or under lockdown. `external`: a user's own folder, which cairn never chowns; under lockdown as root,
    cairn runs the agent as its owner, and refuses a folder root owns."""
    if cfg.user:
        uid, gid = (int(part) for part in cfg.user.split(":"))
        if uid == 0 and cfg.lockdown:
            raise UsageError("sandbox.user must not be uid 0 with --lockdown: a locked-down agent never runs as "
                             "root")
        return uid, gid
    if not cfg.lockdown:
        return ROOT
    if not external or os.getuid() != 0:
        return sandbox_user()
    st = os.stat(workspace)
    if st.st_uid == 0:
        raise UsageError(f"{workspace} belongs to root, and a locked-down agent never runs as root; cairn does "
                         "not chown your folder",
                         hint=f"give it to a user (chown -R 1000:1000 {workspace}), or run the agent as a "
                              "uid that can write it: --sandbox-user UID:GID")
    return st.st_uid, st.st_gid


def security_options(cfg: SandboxConfig, uid: int, gid: int) -> dict:
    """The profile's part of the container's options: user, root filesystem, tmpfs, capabilities,
    runtime (the module docstring says why each)."""
    options: dict = {"user": f"{uid}:{gid}", "security_opt": ["no-new-privileges"], "cap_drop": ["ALL"]}
    if cfg.lockdown:
        options["read_only"] = True
        options["tmpfs"] = {
            "/tmp": f"rw,noexec,nosuid,nodev,size={cfg.tmp_size},mode=1777",
            HOME: f"rw,noexec,nosuid,nodev,size={cfg.home_size},uid={uid},gid={gid},mode=0755",
        }
    else:
        options["read_only"] = False
        options["cap_add"] = list(ROOT_CAPABILITIES)
        if uid != 0:  # root's home is /root in the container's layer; another uid gets one of its own
            options["tmpfs"] = {HOME: f"rw,exec,nosuid,nodev,size={cfg.home_size},uid={uid},gid={gid},mode=0755"}
    if cfg.runtime:
        options["runtime"] = cfg.runtime
    return options


def home_of(uid: int) -> str:
    return ROOT_HOME if uid == 0 else HOME


# Behind a TLS-inspecting proxy (a corporate one, or this project's CI), the host trusts the proxy's CA
# through a local certificate (/usr/local/share/ca-certificates), which cairn's image carries. An image
# of the user's does not: pip, curl, requests and npm in it fail to verify any https site. The carried
# Python's CA bundle is cairn's image's, the host's local CAs included, so where the host has any, an
# image without cairn's Python is pointed to it (the run's own `env` and `pass_env` still win). The
# image's own trust store is then not read by these tools: docs/workspaces.md says so ("Supported images").
CA_VARIABLES = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")


def host_has_local_ca() -> bool:
    from orchestrator.sandbox.docker.image import HOST_CA_DIR

    return HOST_CA_DIR.is_dir() and any(path.is_file() for path in HOST_CA_DIR.rglob("*.crt"))


def run_options(cfg: SandboxConfig, run_id: str, workspace: Path, user: tuple[int, int] | None = None,
                cairn_mount: Path | None = None, python: str | None = None) -> dict:
    """Keyword arguments of `client.containers.run(image, ...)` for this run's hardened container.

    `cairn_mount`: the host directory mounted at /cairn (the run's `<run>/cairn/`); `python`: the volume
    that carries a Python (python_volume.py), for an image without cairn's. `user`: as `decide_user`
    decided it for this workspace (its default: the profile's user, as for the run's own workspace)."""
    uid, gid = user or decide_user(cfg, workspace)
    volumes = {str(Path(workspace).resolve()): {"bind": cfg.workdir, "mode": "rw"},
               str(toolbox_files.folder()): {"bind": toolbox_files.TOOLBOX_IN_SANDBOX, "mode": "ro"}}
    if cairn_mount is not None:
        volumes[str(Path(cairn_mount).resolve())] = {"bind": CAIRN_DIR, "mode": "rw"}
    if python is not None:
        volumes[python] = {"bind": carried.MOUNT, "mode": "ro"}
    env = {"HOME": home_of(uid)}
    if python is not None and host_has_local_ca():
        env.update({name: carried.CA_BUNDLE for name in CA_VARIABLES})
    env.update({name: os.environ[name] for name in cfg.pass_env if name in os.environ})
    env.update(cfg.env)
    return {
        "name": container_name(run_id),
        "labels": {LABEL_MANAGED: "1", LABEL_RUN: run_id},
        # Our own entrypoint, so that any image works the same: it waits, the toolbox is exec'd in.
        "entrypoint": ["sleep", "infinity"],
        "command": [],
        "init": True,
        "detach": True,
        "working_dir": cfg.workdir,
        "environment": env,
        "volumes": volumes,
        **security_options(cfg, uid, gid),
        "pids_limit": cfg.pids_limit,
        "mem_limit": cfg.memory,
        "memswap_limit": cfg.memory,  # equal to the memory limit: no swap
        # The engine refuses more CPUs than the host has, so a default of 2 must not break a 1-core host.
        "nano_cpus": int(min(cfg.cpus, os.cpu_count() or 1) * 1e9),
        "network_mode": "bridge" if cfg.network == "bridge" else "none",
    }


def prepare_workspace(workspace: Path, owner: tuple[int, int] | None = None, lockdown: bool = True) -> None:
    """Create the workspace, and under lockdown when cairn runs as root, give its tree to the sandbox user
    (`owner`), who is not root and could not write it otherwise. The default profile's root agent writes
    any tree; what it leaves is given back afterwards (`Sandbox.give_back_files`).

    Symlinks are chowned themselves (lchown) and never followed: the agent may have made them, and a
    container of the run's may still run (a crashed session's) while this walks, so the tree is listed
    by descriptor (store/run_files.py) and each name is changed relative to its folder's descriptor.
    """
    workspace.mkdir(parents=True, exist_ok=True)
    if os.getuid() != 0 or not lockdown:
        return
    uid, gid = owner or sandbox_user()
    st = os.lstat(workspace)
    if (st.st_uid, st.st_gid) != (uid, gid):
        os.lchown(workspace, uid, gid)
    for entry in run_files.walk(workspace):
        if (entry.stat.st_uid, entry.stat.st_gid) != (uid, gid):
            try:
                os.chown(entry.name, uid, gid, dir_fd=entry.dir_fd, follow_symlinks=False)
            except FileNotFoundError:  # removed meanwhile
                continue


def fingerprint(image: str, options: dict) -> str:
    """A hash of what a kept container must share with this session's settings to be used again: image,
    profile, mounts, limits, network, and the names of its environment variables (not the values of
    host variables passed in, which may be secrets and may change between sessions)."""
    passed = set(options.get("_pass_env", ()))
    env = {key: (None if key in passed else value) for key, value in options.get("environment", {}).items()}
    kept = {key: value for key, value in options.items()
            if key not in ("name", "labels", "detach", "environment", "_pass_env")}
    text = json.dumps({"image": image, "environment": env, **kept}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]

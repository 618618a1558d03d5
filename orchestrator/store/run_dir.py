"""Run directories: `<runs-dir>/<run-id>/{workspace/, cairn/, state/}` (docs/design.md) and `state/run.json`.

`workspace/` is the project the agent works on, mounted at its work directory (/workspace, or the
`--workdir` it was copied out of); `cairn/` holds cairn's own files of the run (obs/ saved outputs, web/
fetched pages, summaries/, inbox/ moved messages), mounted at /cairn, so that no project tree gets a
cairn file in it; `state/` is never seen by the sandbox. Runs made before `cairn/` existed kept these
files in `workspace/.cairn/`, where their pointers (relative paths) still find them."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.store.event_log import EventLog


ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
LAST = ("@last", "-")  # what names the newest run wherever a command takes RUN


def new_run_id(now: float | None = None) -> str:
    """Unique without coordination, and unique in its first few characters: the random part comes
    first, then the start time for a reader, `k3f9q2-20261122-2145` (UTC). Older runs were named
    `20261121-181300-3fa9c1`; both kinds resolve by prefix alike."""
    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime(now or time.time()))
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(6)) + f"-{stamp}"


class RunDir:
    def __init__(self, root: Path) -> None:
        self.root = root.absolute()  # git and the engine resolve paths from other working directories
        self.id = root.name
        self.state = self.root / "state"
        self.events = EventLog(self.state / "events.jsonl")
        self.meta_path = self.state / "run.json"
        self._external: Path | None | bool = False  # False: not read yet; None: the run's own workspace/
        self._checkpoints: Any = None  # store.checkpoints.Checkpoints, made at the first checkpoint
        self.lock: Any = None  # the run's RunLock (store/liveness.py) while this process drives it
        self.changes: Any = None  # the workspace's change list (store/change_list.Subscription) of a live drive
        # The workspace's first checkpoint, taken in a thread while the first request goes out
        # (runs/first_checkpoint.py); None when there is none to wait for.
        self.pending_first_checkpoint: Any = None

    # A run made with `cairn run --workspace DIR` works on DIR in place: run.json holds its absolute
    # path under "workspace", and everything (sandbox, checkpoints, inspection, resume) uses it.

    @property
    def external_workspace(self) -> Path | None:
        """The user's folder this run works on in place, or None for a run with its own workspace/.
        An imported run that is not trusted never works on a folder outside it (store/trust.py)."""
        if self._external is False:
            from orchestrator.store.trust import is_untrusted

            try:
                meta = json.loads(self.meta_path.read_text())
                path = meta.get("workspace") if not is_untrusted(meta) else None
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError):
                path = None
            self._external = Path(path) if isinstance(path, str) and path else None
        return self._external

    @property
    def workspace(self) -> Path:
        return self.external_workspace or self.root / "workspace"

    @property
    def cairn_dir(self) -> Path:
        """Where the sandbox's /cairn is, on the host."""
        return self.root / "cairn"

    def check_workspace(self) -> None:
        """A clear error when the folder an in-place run works on is gone (before a sandbox starts)."""
        path = self.external_workspace
        if path is not None and not path.is_dir():
            raise UsageError(f"run {self.id} works on {path}, which is not there any more",
                             hint="put the folder back at that path to resume the run")

    @classmethod
    def create(cls, runs_dir: Path, meta: dict[str, Any], template: Path | None = None,
               workspace: Path | None = None) -> "RunDir":
        """A new run directory. With `workspace` (an existing folder), the run works on it in place:
        nothing is copied."""
        runs_dir.mkdir(parents=True, exist_ok=True)
        run = cls(runs_dir / new_run_id())
        run.state.mkdir(parents=True)
        run.hold()  # live from before run.json exists: no reader ever sees it `running` and unlocked
        # Only an explicit `workspace` makes an in-place run: a "workspace" copied along in `meta` (a fork
        # of one) must never point a new run at the user's folder.
        meta = {k: v for k, v in meta.items() if k != "workspace"}
        if workspace is not None:
            meta = {**meta, "workspace": str(Path(workspace).resolve())}
        elif template is not None:
            shutil.copytree(template, run.root / "workspace", ignore=shutil.ignore_patterns("cairn.json"))
        else:
            (run.root / "workspace").mkdir()
        run.cairn_dir.mkdir()
        run.write_meta({"id": run.id, "created": time.time(), **meta})
        return run

    @classmethod
    def find(cls, runs_dir: Path, ref: str) -> "RunDir":
        """A run by id, by a unique prefix of one, or `@last` (or `-`) for the newest; a clear error otherwise."""
        if ref in LAST:
            newest = cls.newest(runs_dir)
            if newest is None:
                raise UsageError(f"{ref} names the newest run, and there is none in {runs_dir}",
                                 hint='start one with: cairn run "TASK"')
            return newest
        if not ref or "/" in ref or ref in (".", ".."):
            raise UsageError(f"not a run id: {ref!r}")
        if (runs_dir / ref / "state").is_dir():
            return cls(runs_dir / ref)
        matches = sorted(p for p in runs_dir.glob(f"{ref}*") if (p / "state").is_dir()) if runs_dir.is_dir() else []
        if not matches:
            raise UsageError(f"no run {ref!r} in {runs_dir}", hint="cairn ls lists the runs")
        if len(matches) > 1:
            names = ", ".join(p.name for p in matches[:5])
            raise UsageError(f"{ref!r} matches {len(matches)} runs ({names}); give more of the id")
        return cls(matches[0])

    @staticmethod
    def all(runs_dir: Path) -> list["RunDir"]:
        if not runs_dir.is_dir():
            return []
        return [RunDir(p) for p in sorted(runs_dir.iterdir()) if (p / "state" / "run.json").is_file()]

    @classmethod
    def newest(cls, runs_dir: Path) -> "RunDir | None":
        """The run started last: by the start time in its run.json (ids no longer sort by time)."""
        runs = cls.all(runs_dir)
        return max(runs, key=lambda r: (r.started(), r.id)) if runs else None

    def started(self) -> float:
        """When the run was made: run.json's `created`, else the time its state directory was made."""
        try:
            created = json.loads(self.meta_path.read_text()).get("created")
        except (OSError, json.JSONDecodeError, AttributeError):
            created = None
        if isinstance(created, (int, float)):
            return float(created)
        try:
            return self.state.stat().st_mtime
        except OSError:
            return 0.0

    def hold(self) -> None:
        """Take the run's lock for this process, kept until `release()` or the process's end (a second
        `hold` of this object keeps the one it has); RunIsLive when another process drives the run."""
        from orchestrator.store.liveness import RunLock, live_error

        if self.lock is not None and self.lock.held:
            return
        lock = RunLock.take(self.state)
        if lock is None:
            raise live_error(self)
        self.lock = lock

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    # `cairn stop RUN` asks a live run to stop with a file its drive watches (agent/stop_signals.py): now
    # (the running command is cut short), or with --after-step once the running call is done; the loop
    # takes the request away as it stops, so a resume starts clean.

    @property
    def stop_path(self) -> Path:
        return self.state / "stop"

    def request_stop(self, now: bool = True) -> None:
        tmp = self.stop_path.with_name("stop.tmp")
        tmp.write_text(json.dumps({"at": time.time(), "now": now}) + "\n")
        os.replace(tmp, self.stop_path)  # whole or not at all: the drive reads it while it is written

    def stop_request(self) -> str | None:
        """The stop the top run was asked for, without taking it: "now", "after-step" or None. A request
        of an older cairn (a time alone) stopped after the running call."""
        try:
            text = self.top_run.stop_path.read_text()
        except (OSError, UnicodeDecodeError):
            return None
        try:
            asked = json.loads(text)
        except ValueError:
            return "after-step"
        return "now" if isinstance(asked, dict) and asked.get("now") is True else "after-step"

    def take_stop_request(self) -> bool:
        """True (once) when a stop was asked for."""
        try:
            self.stop_path.unlink()
        except FileNotFoundError:
            return False
        return True

    # -- what the loop asks of its run: the Store port (orchestrator/ports.py) ----------------------------

    @property
    def top_run(self) -> "RunDir":
        """The run a person started: itself, or for a sub-agent's run (store/children.py) its top run."""
        return self

    def stop_asked(self) -> bool:
        """`cairn stop`: the top run takes the request (once); a sub-agent's run only sees its top run's."""
        top = self.top_run
        return top.take_stop_request() if top is self else top.stop_path.exists()

    def messages_after(self, offset: int) -> list[tuple[str, int]]:
        """The person's `cairn say` lines past `offset` of the inbox (state/, which the sandbox never sees):
        (text, the offset just past it)."""
        from orchestrator.store import inbox

        return inbox.pending(self.state, offset)

    def journal_key(self, step: int, call_id: str) -> str:
        """The key a tool call of this run's agent is journaled under (store/journal.py)."""
        from orchestrator.store import journal

        top = self.top_run
        return journal.call_key(top.id, self.root.relative_to(top.root).as_posix(), step, call_id)

    def disk_limit(self, sandbox: Any, limit: str) -> Any:
        """`--max-disk` for this run and its sandbox (store/disk.py's DiskLimit): what it writes on the host."""
        from orchestrator.store.disk import disk_limit_of

        return disk_limit_of(self, sandbox, limit)

    def read_journal(self) -> Any:
        """The toolbox's journal of this run's tool calls (store/journal.py), read on the host."""
        from orchestrator.store import journal

        return journal.read(self.cairn_dir)

    def checkpoints(self) -> Any:
        """The run's store.checkpoints.Checkpoints, from its change list when a drive watches the workspace."""
        if self._checkpoints is None:
            from orchestrator.store.checkpoints import Checkpoints

            self._checkpoints = Checkpoints(self.state / "checkpoints.git", self.workspace, changes=self.changes)
        return self._checkpoints

    def forget_checkpoints(self) -> None:
        """The next checkpoint starts afresh (a new drive): its change list and what it knew are gone."""
        if self._checkpoints is not None:
            self._checkpoints.close()
        self._checkpoints = None

    def checkpoint(self, step: int) -> Any:
        """Commits the workspace after `step` (store/checkpoints.py); what was committed and newly skipped."""
        if self.pending_first_checkpoint is not None:
            self.pending_first_checkpoint.wait()
        return self.checkpoints().commit(step)

    def read_meta(self) -> dict[str, Any]:
        """run.json; a UsageError in one line when it is missing, not JSON or not a JSON object."""
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise UsageError(f"run {self.id} has an unreadable state/run.json ({exc})") from exc
        if not isinstance(meta, dict):
            raise UsageError(f"run {self.id} has an unreadable state/run.json (not a JSON object)")
        return meta

    def write_meta(self, meta: dict[str, Any]) -> None:
        """Atomically: a reader never sees half a file, a crash never leaves one."""
        tmp = self.meta_path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            json.dump(meta, f, indent=2, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.meta_path)
        self._external = False  # derived from run.json: read again when next asked

    def update_meta(self, **changes: Any) -> dict[str, Any]:
        meta = self.read_meta()
        meta.update(changes, updated=time.time())
        self.write_meta(meta)
        return meta

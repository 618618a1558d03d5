"""A batch's manifest, `<runs-dir>/batches/<hash of the file's path>.json`: which run each line has, keyed by
a hash of the line's content (and its occurrence, for repeated lines), so running the file again resumes it."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError


class Manifest:
    """`<runs-dir>/batches/<hash>.json`: line key → run id, written atomically after every change."""

    def __init__(self, runs_dir: Path, batch_file: Path) -> None:
        resolved = str(batch_file.resolve())
        self.id = hashlib.sha256(resolved.encode()).hexdigest()[:16]
        self.path = runs_dir / "batches" / f"{self.id}.json"
        self.lock = threading.Lock()
        self.doc: dict[str, Any] = {"file": resolved, "runs": {}}
        if self.path.is_file():
            try:
                self.doc = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise UsageError(f"the batch manifest {self.path} is unreadable ({exc})") from None

    def run_of(self, key: str) -> str | None:
        return self.doc["runs"].get(key, {}).get("id")

    def record(self, key: str, line: int, run_id: str) -> None:
        with self.lock:
            self.doc["runs"][key] = {"id": run_id, "line": line}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(self.doc, indent=2, sort_keys=True))
            os.replace(tmp, self.path)

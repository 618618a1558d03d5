"""Through the CLI, in the Docker sandbox: a run at a 16k window with big outputs compacts again and again
while the person speaks to it five times (`cairn say`) and answers its question (`cairn resume
--message`). All six messages are word for word in the last request; a dozen near-identical calls show
several framings, each output whole; the tail names the question after every compaction. (The same
scenario on the in-memory ports: tests/agent/test_what_compaction_never_loses.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.agent.test_what_compaction_never_loses import ANSWER, BIG, QUESTION, SAID, SAME
from tests.loop_helpers import call, done, turn

CAIRN = [sys.executable, "-m", "orchestrator.cli"]
WINDOW = 16_384
MEDIUM = 'for i in $(seq 120); do echo "build step $i compiled module $((i * 7)) with no warnings"; done'


def _env(tmp_path: Path, log: Path) -> dict[str, str]:
    return {**os.environ, "CAIRN_RUNS_DIR": str(tmp_path / "runs"), "CAIRN_SCRIPTED_LOG": str(log),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _script(tmp_path: Path, name: str, turns: list[dict[str, Any]]) -> str:
    (tmp_path / name).write_text(json.dumps({"turns": turns}))
    return f"scripted:{tmp_path / name}"


def _saying(tmp_path: Path, cues: dict[str, str]) -> threading.Thread:
    """In a thread: as the run starts the call whose command ends with a cue (`# say-N`), `cairn say` its text."""

    def watch() -> None:
        deadline, left = time.time() + 300, dict(cues)
        while left and time.time() < deadline:
            for log in (tmp_path / "runs").glob("*/state/events.jsonl"):
                text = log.read_text().replace('\\"', '"')
                for cue in [c for c in left if f'{c}"' in text]:
                    said = subprocess.run(CAIRN + ["say", log.parent.parent.name, left.pop(cue)],
                                          env=_env(tmp_path, tmp_path / "unused.jsonl"), capture_output=True,
                                          text=True, timeout=60)
                    assert said.returncode == 0, said.stderr
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _wait(command: str, cue: str) -> dict[str, Any]:
    """A call that gives `cairn say` time to land before the step ends (the message reaches the next step)."""
    return turn(call("shell_exec", command=f"{command}; sleep 3  # {cue}"))


@pytest.mark.docker
def test_six_messages_of_the_person_survive_compactions_word_for_word_through_the_cli(tmp_path, sandbox_image):
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"model": {"context_window": WINDOW}}))
    first = [turn(call("shell_exec", command=f"{MEDIUM if i % 3 else BIG}  # {i}")) for i in range(8)]
    first[1], first[4], first[7] = _wait(MEDIUM, "say-1"), _wait(MEDIUM, "say-2"), _wait(BIG, "say-3")
    first.append(turn(call("ask_user", question=QUESTION)))
    log1 = tmp_path / "requests-1.jsonl"
    thread = _saying(tmp_path, {"say-1": SAID[0], "say-2": SAID[1], "say-3": SAID[2]})
    ran = subprocess.run(CAIRN + ["run", "Build the report generator.", "--model", _script(tmp_path, "one.json", first),
                                  "--settings", str(settings)],
                         env=_env(tmp_path, log1), capture_output=True, text=True, timeout=600)
    thread.join(10)
    assert ran.returncode == 1 and "waiting" in ran.stderr, ran.stderr[-2000:]
    run_id = next((tmp_path / "runs").iterdir()).name

    second = [turn(call("shell_exec", command=SAME.format(n=n))) for n in range(12)]
    second += [turn(call("shell_exec", command=f"{MEDIUM if i % 2 else BIG}  # {i}")) for i in range(8)]
    second[3], second[15] = _wait(SAME.format(n=3), "say-4"), _wait(BIG, "say-5")
    second.append(done())
    log2 = tmp_path / "requests-2.jsonl"
    thread = _saying(tmp_path, {"say-4": SAID[3], "say-5": SAID[4]})
    resumed = subprocess.run(CAIRN + ["resume", run_id, "--message", ANSWER, "--model",
                                      _script(tmp_path, "two.json", second)],
                             env=_env(tmp_path, log2), capture_output=True, text=True, timeout=600)
    thread.join(10)
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    events = [json.loads(line) for line in (tmp_path / "runs" / run_id / "state" / "events.jsonl").read_text().splitlines()]
    compactions = [e for e in events if e["type"] == "compaction"]
    assert len(compactions) >= 2
    said = [e["text"] for e in events if e["type"] == "user_message"]
    assert said == [*SAID[:3], ANSWER, *SAID[3:]]
    requests = [json.loads(line) for line in log2.read_text().splitlines()]
    last = requests[-1]["messages"]
    assert [m["content"] for m in last[2:-1] if m.get("content") in said] == said  # word for word, in order
    # Twelve near-identical calls: each output whole, at least three framings around it.
    wrappers = set()
    for request in requests[1:13]:
        newest = [m for m in request["messages"] if m["role"] == "tool"][-1]["content"]
        assert "same-output-every-time\n" in newest
        wrappers.add(" ".join(newest.replace("same-output-every-time\n", "").translate(
            str.maketrans("0123456789", "#" * 10)).split()))
    assert len(wrappers) >= 3, wrappers
    # The question stays named in the tail after every compaction.
    assert all(f'(ask_user): "{QUESTION}". They answered' in r["messages"][-1]["content"] for r in requests)

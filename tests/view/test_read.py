"""The one read model of a run (orchestrator/view/read.py): its fold of the log is kept beside the log and
only what was appended since is folded again; a kept fold of another format is never trusted."""

from __future__ import annotations

import json

import orchestrator
from orchestrator.store.run_dir import RunDir
from orchestrator.testing import LocalSandbox, ScriptedModel
from orchestrator.view.read import CACHE, read_view


def _a_finished_run(tmp_path) -> RunDir:
    model = ScriptedModel({"turns": [{"tool_calls": [{"name": "task_done", "arguments": {"summary": "ok"}}]}]})
    result = orchestrator.Agent(model, LocalSandbox(), runs_dir=tmp_path / "runs").run("go")
    return RunDir(result.run_dir)


def test_the_fold_is_kept_with_the_size_of_the_log_it_covers(tmp_path):
    run = _a_finished_run(tmp_path)
    view = read_view(run)
    kept = json.loads((run.state / CACHE).read_text())
    assert kept["events_size"] == (run.state / "events.jsonl").stat().st_size
    assert (view.status, view.result) == ("done", "ok")


def test_a_kept_fold_of_another_format_is_folded_again(tmp_path):
    run = _a_finished_run(tmp_path)
    read_view(run)
    kept = json.loads((run.state / CACHE).read_text())
    kept["fold"]["result"] = "a lie from an older cairn"
    kept["format"] = kept["format"] - 1
    (run.state / CACHE).write_text(json.dumps(kept))
    assert read_view(run).result == "ok"


def test_a_kept_fold_that_is_not_one_is_folded_again(tmp_path):
    run = _a_finished_run(tmp_path)
    for junk in ("", "[]", '{"format": 2}', '{"format": 2, "events_size": 0, "fold": {"status": 1}}'):
        (run.state / CACHE).write_text(junk)
        assert read_view(run).status == "done", junk

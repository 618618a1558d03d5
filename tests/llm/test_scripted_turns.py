"""The scripted model goes on from the turn its run reached: a resume with the same script is answered
by the next turn, failed turns counted, and another script starts from its first."""

from __future__ import annotations

import json

from orchestrator.llm.scripted import SCRIPT_PROGRESS, ScriptedServer

SCRIPT = {"turns": [{"fail": 503}, {"content": "one"}, {"content": "two"}, {"content": "three"}]}
REQUEST = {"messages": [{"role": "user", "content": "go"}]}


def test_a_new_server_for_the_same_run_goes_on_from_the_turn_reached(tmp_path):
    progress = tmp_path / SCRIPT_PROGRESS
    first = ScriptedServer(SCRIPT, progress)
    assert first.respond(REQUEST).status == 503  # a failed turn is a turn the script played
    assert first.respond(REQUEST).body["choices"][0]["message"]["content"] == "one"
    assert json.loads(progress.read_text()) == {first.digest: 2}
    again = ScriptedServer(SCRIPT, progress)  # the resumed run's process
    assert again.respond(REQUEST).body["choices"][0]["message"]["content"] == "two"
    other = ScriptedServer({"turns": [{"content": "a new script"}, {"content": "its second turn"}]}, progress)
    assert other.respond(REQUEST).body["choices"][0]["message"]["content"] == "a new script"
    assert ScriptedServer(other.script, progress).respond(REQUEST).body["choices"][0]["message"]["content"] == \
        "its second turn"  # each script's turns are its own (a run's critic may play another script)
    assert ScriptedServer(SCRIPT, progress).respond(REQUEST).body["choices"][0]["message"]["content"] == "three"
    assert ScriptedServer(SCRIPT).respond(REQUEST).status == 503  # no run to go on from: turn 1


def test_a_progress_file_that_is_not_one_starts_the_script_from_its_first_turn(tmp_path):
    progress = tmp_path / SCRIPT_PROGRESS
    digest = ScriptedServer(SCRIPT).digest
    for text in ("not json", json.dumps({"x": 2}), json.dumps([1]), json.dumps({digest: -1}), json.dumps({digest: "2"})):
        progress.write_text(text)
        assert ScriptedServer(SCRIPT, progress).respond(REQUEST).status == 503

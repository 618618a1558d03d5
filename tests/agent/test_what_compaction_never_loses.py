"""A run at a 16k window with big outputs compacts again and again while the person speaks to it and answers
its question: their words stay word for word in every later request, the tail still names what is in
flight, near-identical results are framed in several ways with each output whole, and a resume and a
replay send the same bytes (engine-free: the loop on the scripted model and the local sandbox; the same
scenario through the CLI and Docker is tests/runs/test_a_long_run_keeps_the_persons_words.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.state import RunState
from orchestrator.api import Agent
from orchestrator.context import TokenCounter, build_request, canonical_json
from orchestrator.runs.settings import load_config
from orchestrator.store import inbox
from orchestrator.store.run_dir import RunDir
from orchestrator.testing import LocalSandbox, ScriptedModel
from tests.fake_loop import play
from tests.loop_helpers import call, done, tool_messages, turn

WINDOW = 16_384
# About 1,500 tokens each: under the offload threshold, so each stays whole until compaction moves it. Each
# call gets a comment of its own, so the loop guard sees no repetition.
MEDIUM = 'for i in $(seq 230); do echo "build step $i compiled module $((i * 7)) with no warnings"; done'
BIG = 'for i in $(seq 600); do echo "trace line $i ' + "x" * 60 + '"; done'  # offloaded: a preview
SAME = "echo same-output-every-time  # {n}"  # near-identical: the same output, a call the loop guard lets by
SAID = ["First: the tests live in tests/, never touch vendor/.",
        "Second: prefer the standard library over new dependencies.",
        "Third: the CHANGELOG entry goes under 'Unreleased'.",
        "Fourth: keep functions under fifty lines.",
        "Fifth: when in doubt, ask before deleting anything."]
QUESTION = "Which theme should the report use, blue or green?"
ANSWER = "Use the blue theme, and keep the footer as it is."


class Speaking(ScriptedModel):
    """The scripted model, and the person saying `said[n]` (`cairn say`) as the model answers request n."""

    def __init__(self, turns: list[dict[str, Any]], runs: Path, said: dict[int, str]) -> None:
        super().__init__({"turns": turns}, context_window=WINDOW)
        self.runs, self.said = runs, said

    def complete(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        text = self.said.get(len(self.requests))
        if text is not None:
            inbox.say(next(self.runs.glob("*/state")), text)  # reaches the model at the next step
        return super().complete(*args, **kwargs)


def bodies(model: ScriptedModel) -> list[dict[str, Any]]:
    return [json.loads(json.dumps(body)) for body in model.requests]


def scenario(tmp_path: Path, vary: bool = True) -> tuple[RunDir, list[dict[str, Any]], list[dict[str, Any]]]:
    """The run up to its question (the person speaking three times), then resumed with the answer (twice
    more), through a dozen near-identical calls and more big outputs. Returns the run and both drives'
    requests."""
    runs = tmp_path / "runs"
    settings = {"model": {"context_window": WINDOW}, "context": {"vary_framing": vary}}
    first = [turn(call("shell_exec", command=f"{MEDIUM if i % 3 else BIG}  # {i}")) for i in range(9)]
    first.append(turn(call("ask_user", question=QUESTION)))
    model = Speaking(first, runs, {1: SAID[0], 4: SAID[1], 7: SAID[2]})
    sandbox = LocalSandbox(cfg=load_config_free(settings))
    agent = Agent(model, sandbox, runs_dir=runs, settings=settings)
    try:
        assert agent.run("Build the report generator.").status == "waiting"
        second = [turn(call("shell_exec", command=SAME.format(n=n))) for n in range(12)]
        second += [turn(call("shell_exec", command=f"{MEDIUM if i % 2 else BIG}  # {i}")) for i in range(8)] + [done()]
        resumed = Speaking(second, runs, {3: SAID[3], 14: SAID[4]})
        again = Agent(resumed, sandbox, runs_dir=runs)
        again.run_dir = agent.run_dir
        assert again.resume(ANSWER).status == "done"
    finally:
        sandbox.stop()
    return RunDir(agent.run_dir.root), bodies(model), bodies(resumed)


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunDir, list[dict[str, Any]], list[dict[str, Any]]]:
    return scenario(tmp_path_factory.mktemp("scenario"))


def load_config_free(settings: dict[str, Any]) -> Any:  # noqa: ANN401 - a SandboxConfig
    from orchestrator.config import RunConfig

    return RunConfig.model_validate(settings).sandbox


def history_part(request: dict[str, Any]) -> list[dict[str, Any]]:
    return request["messages"][:-1]  # all but the tail


def test_all_six_of_the_persons_messages_stay_word_for_word_and_in_order_through_compactions(played):
    run, before, after = played
    events = run.events.read()[0]
    compactions = [e for e in events if e.type == "compaction"]
    assert len(compactions) >= 2 and all(e.kind in ("pointers", "digest") for e in compactions)
    assert any(e.kept for e in compactions)  # a digest did take a span the person had spoken in
    said = [e.text for e in events if e.type == "user_message"]
    assert said == [*SAID[:3], ANSWER, *SAID[3:]]
    last = history_part(after[-1])
    users = [m["content"] for m in last[2:] if m["role"] == "user" and not m["content"].startswith("[Steps ")]
    assert users == said  # each its own message, word for word, in the order said
    for request in after:  # and every request after each was said holds it
        text = json.dumps(history_part(request), ensure_ascii=False)
        assert all(json.dumps(m, ensure_ascii=False)[1:-1] in text for m in said[:3] + [ANSWER])
    assert max(r["usage"]["prompt_tokens"] for r in [e.model_dump() for e in events if e.type == "model_request"]) < WINDOW


def test_twelve_near_identical_calls_show_at_least_three_framings_each_with_its_output_whole(played):
    _, _, after = played
    results = []
    for request in after[1:13]:  # the newest result of each, as it entered the history
        newest = tool_messages(request)[-1]["content"]
        assert "same-output-every-time\n" in newest  # the output whole, byte for byte
        results.append(newest)
    wrappers = {" ".join(r.replace("same-output-every-time\n", "").translate(str.maketrans("0123456789", "#" * 10)).split())
                for r in results}
    assert len(wrappers) >= 3, wrappers


def test_with_the_setting_off_every_result_has_the_plain_form(tmp_path):
    turns = [turn(call("shell_exec", command=SAME.format(n=n))) for n in range(8)] + [done()]
    out = play(tmp_path, turns, settings={"context": {"vary_framing": False}})
    for request in out.requests[1:9]:
        assert tool_messages(request)[-1]["content"].startswith("same-output-every-time\n[exit code 0, ")


def test_a_resume_and_a_replay_send_the_same_bytes_with_variation_on(played):
    run, before, after = played
    # The resume's first request goes on from the last one before it: the same history, byte for byte, then
    # the question's result and the person's answer.
    kept = history_part(before[-1])
    assert after[0]["messages"][: len(kept)] == kept
    # A replay of the log (what `cairn resume` rebuilds) gives the very history the last request sent.
    state = RunState(load_config(run).context, TokenCounter())
    for event in run.events.read()[0]:
        state.apply(event)
    replayed = build_request(state.system_prompt, state.tools, state.task, state.history, "tail")
    last = history_part(after[-1])
    assert canonical_json(replayed.messages[: len(last)]) == canonical_json(last)
    assert len(replayed.messages) - 1 == len(last) + 2  # then the last answer (task_done) and its result


def test_the_tail_names_the_question_after_every_compaction_as_before_it(played):
    run, _, after = played
    steps = [e.step for e in run.events.read()[0] if e.type == "compaction"]
    tails = [request["messages"][-1]["content"] for request in after]
    line = f'You asked the person at step 10 (ask_user): "{QUESTION}". They answered at step 10'
    assert all(line in tail for tail in tails)
    assert steps and all(step > 10 for step in steps[-2:])  # compactions came after the answer, and it held

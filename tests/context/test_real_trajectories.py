"""Real runs as the context bench's workload: the loader reads the published formats, the breakdown
accounts for every token and dollar, and the --trajectories mode prices cairn against the raw agent."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.context.test_context_bench import load_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from trajectories import TrajectoryError, load  # noqa: E402

TASK = "<pr_description>Fix the parser so that empty input is an error.</pr_description>"


def text_agent_run(steps: int) -> dict:
    """A mini-SWE-agent run of the text-based agent ("mini-swe-agent-1"): THOUGHT, one bash block, and the
    observation in the next user message. Each step's output is different, as a real one is."""
    messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": TASK}]
    for i in range(steps):
        thought = f"THOUGHT: step {i}: I look at module {i} to see how it parses. " + "Reasoning. " * 40
        messages.append({"role": "assistant", "content": f"{thought}\n\n```bash\nsed -n '{i},+80p' src/m{i}.py\n```",
                         "extra": {"cost": 0.01}})
        code = 1 if i % 7 == 3 else 0
        output = "\n".join(f"{n:>4}  def parse_{i}_{n}(text): return text.split({n})" for n in range(60))
        messages.append({"role": "user", "content": f"<returncode>{code}</returncode>\n<output>\n{output}\n</output>"})
    return {"info": {"exit_status": "Submitted"}, "messages": messages, "trajectory_format": "mini-swe-agent-1"}


def tool_agent_run() -> dict:
    """The tool-calling agent's form ("mini-swe-agent-1.1"): tool_calls and tool messages."""
    call = {"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    return {"messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": TASK},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [call], "provider_specific_fields": {}},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "<returncode>0</returncode>\n<output>\na.py\n</output>"},
    ], "trajectory_format": "mini-swe-agent-1.1"}


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_text_agent_step_becomes_a_shell_call_with_its_thought_as_text(tmp_path: Path) -> None:
    run = load(write(tmp_path, "x.traj.json", text_agent_run(8)))
    assert run.name == "x" and run.task == TASK and len(run.steps) == 8
    message, results = run.steps[3]
    assert message["content"].startswith("THOUGHT: step 3") and "```" not in message["content"]
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"command": "sed -n '3,+80p' src/m3.py"}
    [(call_id, tool, observation, failed)] = results
    assert call_id == message["tool_calls"][0]["id"] and tool == "shell_exec" and failed  # returncode 1
    assert observation.startswith("<returncode>1</returncode>") and not run.steps[0][1][0][3]
    assert "extra" not in message


def test_a_tool_calling_agent_keeps_its_calls_and_their_answers(tmp_path: Path) -> None:
    [(message, [(call_id, tool, observation, failed)])] = load(write(tmp_path, "t.traj.json", tool_agent_run())).steps
    assert message["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}
    assert (call_id, tool, failed) == ("toolu_1", "bash", False) and "a.py" in observation


def test_a_swe_agent_history_leaves_its_demonstration_out_and_reads_its_plain_blocks(tmp_path: Path) -> None:
    history = [
        {"role": "system", "content": "SETTING: ...", "agent": "primary"},
        {"role": "user", "content": "Here is a demonstration ...", "agent": "primary", "is_demo": True},
        {"role": "user", "content": TASK, "agent": "primary"},
        {"role": "assistant", "content": "Let me look.\n\n```\nfind_file setup.py\n```", "thought": "Let me look."},
        {"role": "user", "content": "Found 1 matches for \"setup.py\"", "agent": "primary"},
    ]
    run = load(write(tmp_path, "i1.traj", {"environment": "e", "trajectory": [], "history": history, "info": {}}))
    [(message, [(_, tool, observation, failed)])] = run.steps
    assert run.name == "i1" and run.task == TASK and message["content"] == "Let me look."
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"command": "find_file setup.py"}
    assert (tool, failed) == ("shell_exec", False) and observation.startswith("Found 1 matches")


@pytest.mark.parametrize(("content", "reason"), [
    ("{not json", "not a readable JSON trajectory"),
    ('{"messages": 3}', "no list of chat messages"),
    ('{"messages": [{"role": "system", "content": "s"}]}', "no user message holds a task"),
    ('{"history": [{"role": "user", "content": "t"}]}', "no assistant message after the task"),
])
def test_a_file_that_is_no_trajectory_is_refused_in_one_line(tmp_path: Path, content: str, reason: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TrajectoryError, match=reason) as refused:
        load(path)
    assert "\n" not in str(refused.value) and str(refused.value).startswith(f"{path}: ")


def test_the_breakdown_adds_up_to_the_cost_and_only_cairn_rewrites(tmp_path: Path) -> None:
    bench = load_bench()
    run = load(write(tmp_path, "long.traj.json", text_agent_run(60)))
    turns = bench.trajectory_turns(run.steps)
    cairn, _ = bench.measure_cairn(turns, 12_000, 1, task=run.task)
    raw = bench.run_drop_oldest(turns, 10**12, None, "raw", task=run.task)
    for ledger in (cairn, raw):
        assert ledger.breakdown.total_cost == pytest.approx(ledger.cost)
        assert ledger.breakdown.requests == ledger.requests - ledger.summaries
        assert ledger.breakdown.tokens["answers"] == ledger.output - ledger.summarize_output
    assert cairn.compactions >= 2 and cairn.breakdown.tokens["rewrite"] > 0 and cairn.breakdown.compacting >= 2
    assert raw.breakdown.tokens["rewrite"] == raw.breakdown.tokens["tail"] == 0
    assert cairn.breakdown.tokens["tail"] > 0 and cairn.breakdown.tokens["cached history"] > 0
    # the raw agent's only uncached input is its new messages, the first prefix and the block rounding
    uncached = sum(raw.breakdown.tokens[k] for k in ("prefix", "rounding", "new"))
    assert uncached == raw.prompt - raw.cached


def test_the_trajectories_mode_prices_each_run_against_the_raw_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench()
    files = [str(write(tmp_path, f"r{n}.traj.json", text_agent_run(n))) for n in (40, 60)]
    result = bench.main(["--trajectories", *files])  # at a 32k window, which the raw agent's requests outgrow
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    assert lines[-1].startswith("runs=2 steps=100 cost_vs_raw=") and "over_window=0" in lines[-1]
    assert 0 < result["cost_vs_raw"] < 1 and result["peak_tokens"] < 32_768
    assert any(line.startswith("uncached: rewrite") for line in lines)


def test_the_trajectories_mode_names_a_bad_file_and_stops(tmp_path: Path) -> None:
    bench = load_bench()
    bad = tmp_path / "bad.json"
    bad.write_text("[]", encoding="utf-8")
    with pytest.raises(SystemExit, match="bad.json: no user message holds a task"):
        bench.main(["--trajectories", str(bad)])

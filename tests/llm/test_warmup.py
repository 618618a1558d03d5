"""The model library starts loading as soon as `run` or `resume` knows the model, unless it is not needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchestrator.config import ModelConfig
from orchestrator.llm.facts import model_facts
from orchestrator.llm.warmup import needs_litellm


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_the_scripted_model_needs_litellm():
    assert needs_litellm(ModelConfig(model="scripted:demo"))


def test_a_model_whose_facts_are_not_kept_yet_needs_litellm():
    assert needs_litellm(ModelConfig(model="openai/gpt-4o", api_base="http://127.0.0.1:9/v1"))


def test_a_model_asked_directly_needs_no_litellm_once_its_facts_are_kept():
    model_facts("openai/gpt-4o")
    assert not needs_litellm(ModelConfig(model="openai/gpt-4o", api_base="http://127.0.0.1:9/v1"))
    model_facts("anthropic/claude-sonnet-4-5")
    assert needs_litellm(ModelConfig(model="anthropic/claude-sonnet-4-5"))


def test_begin_loads_the_library_in_a_thread_that_wait_joins(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"content": "hi"}]}))
    code = ("import sys; from orchestrator.config import ModelConfig; from orchestrator.llm import warmup; "
            f"warmup.begin(ModelConfig(model='scripted:{script}')); "
            "print(warmup._thread.name, end=' '); "
            "warmup.wait(); print('openai.resources' in sys.modules, sys.getswitchinterval())")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    name, loaded, interval = out.stdout.split()
    assert (name, loaded, float(interval)) == ("cairn-model-library", "True", 0.005)  # what a first request imports is loaded; the interval restored

"""Ports that need neither Docker nor a model service, for tests and for trying cairn out.

    from orchestrator.testing import LocalSandbox, ScriptedModel

`ScriptedModel` plays a scripted-model file (docs/contracts.md) in this process; `LocalSandbox` runs the
toolbox's ops over a directory of this machine (no wall: read its docstring); `MemoryStore` is a run
with no directory. The first two are what `orchestrator.Agent` takes, as any model and sandbox of one's
own; with the third, the loop (`orchestrator.agent.loop.Loop`) runs on nothing but in-memory ports.
"""

from orchestrator.testing.model import ScriptedModel
from orchestrator.sandbox.local.sandbox import LocalSandbox
from orchestrator.testing.store import MemoryStore

__all__ = ["LocalSandbox", "MemoryStore", "ScriptedModel"]

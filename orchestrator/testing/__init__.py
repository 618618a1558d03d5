"""Ports that need neither Docker nor a model service, for tests and for trying cairn out.

    from orchestrator.testing import LocalSandbox, ScriptedModel

`ScriptedModel` plays a scripted-model file (CONTRACTS.md) in this process; `LocalSandbox` runs the
toolbox's ops over a directory of this machine (no wall: read its docstring). Both are what
`orchestrator.Agent` takes, as any model and sandbox of one's own.
"""

from orchestrator.testing.model import ScriptedModel
from orchestrator.testing.sandbox import LocalSandbox

__all__ = ["LocalSandbox", "ScriptedModel"]

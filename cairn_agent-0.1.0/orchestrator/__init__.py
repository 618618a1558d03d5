"""cairn: a long-running agent whose memory is a filesystem, acting only inside a Docker sandbox.

    import orchestrator
    result = orchestrator.run("Write fizzbuzz.py with tests", model="anthropic/claude-sonnet-4-5")

`run`, `resume`, `Agent` and `RunResult` are in orchestrator/api.py; they are loaded on first use, so
`import orchestrator` loads neither litellm nor docker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.version import __version__  # noqa: F401 - orchestrator.__version__

__all__ = ["Agent", "RunResult", "resume", "run"]

if TYPE_CHECKING:
    from orchestrator.api import Agent, RunResult, resume, run


def __getattr__(name: str) -> Any:
    if name in __all__:
        from orchestrator import api

        return getattr(api, name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")

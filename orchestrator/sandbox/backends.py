"""The sandbox backends by name: where each one's class is, loaded only when it is asked for (so asking
for the local one never loads docker). A new backend is one folder beside these and one line here;
tests/sandbox/test_backends.py holds every backend listed here to the port's methods."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.ports import Sandbox

BACKENDS: dict[str, str] = {
    "docker": "orchestrator.sandbox.docker.sandbox:DockerSandbox",
    "harbor": "orchestrator.sandbox.harbor.sandbox:HarborSandbox",
    "local": "orchestrator.sandbox.local.sandbox:LocalSandbox",
}


def backend(name: str) -> type[Sandbox]:
    """The class of the backend `name`; KeyError for a name that is not one."""
    module, _, attribute = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attribute)

"""`orchestrator.harbor:CairnAgent`, the name Harbor is given (`harbor run -a orchestrator.harbor:CairnAgent`).

The agent itself is in orchestrator/integrations/harbor/. It needs Harbor, installed with the `harbor`
extra (`pip install 'cairn-agent[harbor]'`, Python 3.12 or newer).
"""

from orchestrator.integrations.harbor.agent import CairnAgent

__all__ = ["CairnAgent"]
